"""fetch-calib: the data rules, document-disjoint held-out text, token files and the data manifest."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ternforge.calib import fetch, policy
from ternforge.calib.sources import SourceDecl, SourceUnavailable, documents
from ternforge.sources.checkpoint import SourceError
from ternforge.calib.tokens import TokenFileMismatch, load_role, sequences


@pytest.mark.parametrize("dataset, config, split", [
    ("Idavidrein/gpqa", "gpqa_diamond", "train"),
    ("HuggingFaceH4/MATH-500", None, "test"),
    ("HuggingFaceH4/MATH-500", None, "train"),
    ("EleutherAI/hendrycks_math", "algebra", "train"),
    ("hendrycks/competition_math", None, "train"),
    ("lighteval/MATH", None, "train"),
    ("livecodebench/code_generation_lite", "release_v6", "train"),
    ("TIGER-Lab/MMLU-Pro", None, "train"),
    ("cais/mmlu", "all", "auxiliary_train"),
])
@pytest.mark.parametrize("role", ["calibration", "heldout", "selection"])
def test_benchmarks_are_refused_for_any_role_but_evaluation(dataset: str, config: str | None, split: str, role: str) -> None:
    with pytest.raises(policy.CalibRefused, match=r"benchmark .* may only have the role 'evaluation'"):
        policy.check(dataset, config, split, role)
    assert policy.check(dataset, config, split, "evaluation").benchmark is not None


@pytest.mark.parametrize("split", ["validation", "test", "dev", "val", "test[:100]", "Validation"])
def test_held_splits_are_refused_for_fitting_roles(split: str) -> None:
    with pytest.raises(policy.CalibRefused, match=r"validation, test and dev splits may only have the role 'evaluation'"):
        policy.check("HuggingFaceFW/fineweb-edu", "sample-10BT", split, "calibration")
    policy.check("HuggingFaceFW/fineweb-edu", "sample-10BT", split, "evaluation")


@pytest.mark.parametrize("dataset", ["open-thoughts/OpenThoughts-114k", "open-r1/OpenR1-Math-220k",
                                     "nvidia/OpenCodeReasoning", "HuggingFaceFW/fineweb-edu",
                                     "allenai/tulu-3-sft-mixture", "pydoc-topics"])
def test_train_splits_of_public_corpora_are_allowed(dataset: str) -> None:
    v = policy.check(dataset, None, "train", "calibration")
    assert v.benchmark is None and not v.held_split


def test_unknown_role_is_refused() -> None:
    with pytest.raises(policy.CalibRefused, match="unknown role 'tuning'"):
        policy.check("pydoc-topics", None, "train", "tuning")


def _decl(name: str, role: str, buckets: tuple[int, int], dataset: str = "pydoc-topics", split: str = "train") -> dict:
    return {"name": name, "kind": "package-text", "dataset": dataset, "split": split, "revision": "python-3.11",
            "role": role, "rows": 6, "buckets": list(buckets)}


def test_overlapping_buckets_across_roles_are_refused() -> None:
    decls = [SourceDecl.from_json(_decl("a", "calibration", (0, 70))), SourceDecl.from_json(_decl("b", "heldout", (60, 100)))]
    with pytest.raises(policy.CalibRefused, match="overlapping document buckets"):
        fetch.check_declarations(decls)


def test_a_refused_source_stops_before_any_tokenising(tmp_path: Path) -> None:
    bad = _decl("math", "calibration", (0, 100), dataset="HuggingFaceH4/MATH-500")
    with pytest.raises(policy.CalibRefused, match="MATH-500"):
        fetch.run({"model_dir": str(tmp_path / "no-model"), "out": str(tmp_path / "out"), "sources": [bad]})
    assert not (tmp_path / "out").exists()


def test_the_worker_command_reports_a_refusal_as_a_failure_event(tmp_path: Path) -> None:
    import json as _json
    import subprocess
    import sys

    bad = _decl("gpqa", "heldout", (0, 100), dataset="Idavidrein/gpqa")
    cfg = tmp_path / "cfg.json"
    cfg.write_text(_json.dumps({"model_dir": str(tmp_path), "out": str(tmp_path / "out"), "sources": [bad]}))
    repo_python = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "ternforge", "fetch-calib", "--config", str(cfg)], cwd=repo_python,
                          capture_output=True, text=True, env={"PYTHONPATH": str(repo_python), "PATH": "/usr/bin:/bin"})
    if "invalid choice: 'fetch-calib'" in proc.stderr:
        pytest.skip("fetch-calib is not registered in ternforge/__main__.py COMMANDS yet")
    events = [_json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0
    assert events[0]["event"] == "failure" and events[0]["reason"] == "calib-refused"
    assert "GPQA" in events[0]["message"] and events[-1] == {"event": "result", "ok": False}


def test_hub_sources_refuse_clearly_when_unlocked_or_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    decl = SourceDecl.from_json({"name": "ot", "kind": "hub-files", "dataset": "open-thoughts/OpenThoughts-114k",
                                 "split": "train", "revision": "main", "role": "calibration", "rows": 4,
                                 "files": ["data/x.jsonl"]})
    with pytest.raises(SourceUnavailable, match="has no lock entry"):
        next(iter(documents(decl)))
    # huggingface_hub reads the variable once, at its import (an earlier test may have imported it): set both,
    # or the download tries the network and this test waits on its retries.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    locked = {"request": {"name": "ot", "kind": "dataset", "repo": decl.dataset, "ref": "main", "files": ["data/x.jsonl"]},
              "commit": "0" * 40, "files": {"data/x.jsonl": {"size": 1, "sha256": "0" * 64}}}
    with pytest.raises(SourceError) as e:
        next(iter(documents(decl, cache_dir=str(tmp_path), locked=locked)))
    assert e.value.reason == "download-failed" and e.value.facts["file"] == "data/x.jsonl"


def test_fetch_writes_disjoint_token_files_and_manifest(tmp_path: Path, tiny_fetch_dir: Path) -> None:
    out = tmp_path / "calib"
    sources = [_decl("topics-cal", "calibration", (0, 70)), _decl("topics-held", "heldout", (70, 100))]
    result = fetch.main({"model_dir": str(tiny_fetch_dir / "model"), "out": str(out), "sources": sources})
    assert result["ok"] is True
    manifest = json.loads((out / "data_manifest.json").read_text())
    assert manifest["format"] == "ternforge-data/1"
    assert result["tokens_by_role"]["calibration"] > 0 and result["tokens_by_role"]["heldout"] > 0
    cal, held = manifest["sources"]
    assert cal["documents"] == 6 and held["documents"] == 6
    assert not set(cal["document_ids"]) & set(held["document_ids"])
    assert all(fetch.bucket("pydoc-topics", d) < 70 for d in cal["document_ids"])
    docs = load_role(out, "heldout")
    assert len(docs) == 6 and sum(d.numel() for d in docs) == held["tokens"]
    seqs = sequences(docs, 64, 4, manifest["tokenizer"]["eos_id"])
    assert seqs.shape == (4, 64) and seqs.dtype == torch.int64
    # Same declaration, same bytes.
    again = tmp_path / "again"
    fetch.main({"model_dir": str(tiny_fetch_dir / "model"), "out": str(again), "sources": sources})
    assert (again / cal["file"]).read_bytes() == (out / cal["file"]).read_bytes()
    # A token file that no longer matches the manifest is refused.
    (out / held["file"]).write_bytes((out / held["file"]).read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(TokenFileMismatch, match="sha256"):
        load_role(out, "heldout")
