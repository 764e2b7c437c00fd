"""Locked hub revisions against the real huggingface_hub client and a local hub (tests/hub_server.py).

Resolve a branch to its commit and file hashes; fetch at the locked commit after the branch moved; refuse
bytes that differ from the lock (a changed mirror, a changed cache blob); list every unresolvable source in
one failure; read a parquet source through pyarrow with the lock.
"""
from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hub_server import FakeHub, git_blob_sha1
from ternforge.calib import fetch as calib_fetch
from ternforge.calib.sources import SourceDecl, documents
from ternforge.sources import hub, hub_lock
from ternforge.sources.checkpoint import SourceError, sha256_file

CONFIG = b'{"model_type": "qwen3_5"}\n'
TOKENIZER = b'{"version": "1.0"}\n'


def _safetensors(value: int) -> bytes:
    """A one-tensor safetensors file (F32[2]) written by hand: 8-byte header length, JSON header, data."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + bytes([value]) * 8


@pytest.fixture()
def fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    h = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token, no user config
    yield h
    h.stop()


def _model_files(value: int, config: bytes = CONFIG) -> dict[str, bytes]:
    return {"config.json": config, "tokenizer.json": TOKENIZER, "model.safetensors": _safetensors(value), "README.md": b"not fetched\n"}


def _lock_model(ref: str = "main") -> dict:
    done, failed = hub_lock.resolve([hub_lock.PinRequest("model", "model", "org/model", ref)])
    assert failed == []
    return done["model"]


def test_resolve_turns_a_branch_into_its_commit_and_the_hubs_hashes(fake_hub: FakeHub) -> None:
    files = _model_files(1)
    commit = fake_hub.push("model", "org/model", files)
    entry = _lock_model("main")
    assert entry["commit"] == commit
    assert entry["request"] == {"name": "model", "kind": "model", "repo": "org/model", "ref": "main"}
    # README.md is not a file fetch-model copies; the LFS file carries sha256, the git-stored ones their blob sha1.
    assert entry["files"] == {
        "config.json": {"size": len(CONFIG), "git_sha1": git_blob_sha1(CONFIG)},
        "model.safetensors": {"size": len(files["model.safetensors"]), "sha256": hashlib.sha256(files["model.safetensors"]).hexdigest()},
        "tokenizer.json": {"size": len(TOKENIZER), "git_sha1": git_blob_sha1(TOKENIZER)},
    }
    assert "GET /api/models/org/model/revision/main" in fake_hub.requests
    # A commit resolves to itself.
    assert _lock_model(commit)["commit"] == commit


def test_fetch_reads_the_locked_commit_after_the_branch_moved(fake_hub: FakeHub, tmp_path: Path) -> None:
    first = fake_hub.push("model", "org/model", _model_files(1))
    entry = _lock_model("main")
    second = fake_hub.push("model", "org/model", _model_files(2, config=b'{"model_type": "moved"}\n'))
    assert second != first and _lock_model("main")["commit"] == second
    fake_hub.requests.clear()
    record = hub.fetch(tmp_path / "out", "org/model", "main", locked=entry, cache_dir=str(tmp_path / "cache"))
    model = tmp_path / "out" / "model"
    assert (model / "config.json").read_bytes() == CONFIG
    assert (model / "model-00001-of-00001.safetensors").read_bytes() == _safetensors(1)
    assert record["origin"]["revision"] == first and record["origin"]["ref"] == "main" and record["hash_checked"] is True
    downloads = [r for r in fake_hub.requests if "/resolve/" in r]
    assert downloads and all(f"/resolve/{first}/" in r for r in downloads)
    assert not any(r.startswith("GET /api/") for r in fake_hub.requests)  # no re-resolution


def test_fetch_refuses_bytes_that_differ_from_the_lock(fake_hub: FakeHub, tmp_path: Path) -> None:
    commit = fake_hub.push("model", "org/model", _model_files(1))
    entry = _lock_model("main")
    # A mirror that serves other bytes for the locked commit.
    fake_hub.rewrite("model", "org/model", commit, "model.safetensors", _safetensors(9))
    with pytest.raises(SourceError) as e:
        hub.fetch(tmp_path / "a", "org/model", "main", locked=entry, cache_dir=str(tmp_path / "cache-a"))
    assert e.value.reason == "hash-mismatch"
    assert e.value.facts == {"file": "model.safetensors", "algorithm": "sha256",
                             "expected": entry["files"]["model.safetensors"]["sha256"], "actual": hashlib.sha256(_safetensors(9)).hexdigest()}
    assert "model.safetensors" in str(e.value) and entry["files"]["model.safetensors"]["sha256"] in str(e.value)
    assert not (tmp_path / "a" / "model").exists() or not any((tmp_path / "a" / "model").iterdir())
    # A cache whose blob was changed after a good download (same size, other bytes): refused as well.
    fake_hub.rewrite("model", "org/model", commit, "model.safetensors", _safetensors(1))
    hub.fetch(tmp_path / "b", "org/model", "main", locked=entry, cache_dir=str(tmp_path / "cache-b"))
    cached = next((tmp_path / "cache-b").rglob("snapshots/*/config.json")).resolve()
    cached.write_bytes(CONFIG.replace(b"qwen3_5", b"qwen3_6"))
    with pytest.raises(SourceError) as e:
        hub.fetch(tmp_path / "c", "org/model", "main", locked=entry, cache_dir=str(tmp_path / "cache-b"))
    assert e.value.reason == "hash-mismatch" and e.value.facts["file"] == "config.json" and e.value.facts["algorithm"] == "git_sha1"
    assert e.value.facts["expected"] == git_blob_sha1(CONFIG)


def test_fetch_without_a_lock_entry_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as e:
        hub.fetch(tmp_path / "out", "org/model", "main")
    assert e.value.reason == "unlocked" and "tsx pipeline.ts lock" in str(e.value)


def test_every_unresolvable_source_is_listed_in_one_failure(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    fake_hub.push("model", "org/model", _model_files(1))
    fake_hub.push("dataset", "org/data", {"data/a.parquet": b"PAR1"})
    sources = [
        {"name": "model", "kind": "model", "repo": "org/model", "ref": "main"},
        {"name": "no-repo", "kind": "dataset", "repo": "org/missing", "ref": "main"},
        {"name": "no-branch", "kind": "dataset", "repo": "org/data", "ref": "v9"},
        {"name": "no-file", "kind": "dataset", "repo": "org/data", "ref": "main", "files": ["data/b.parquet"]},
    ]
    assert hub_lock.main({"sources": sources}) == {"ok": False}
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    failure = events[-1]
    assert failure["event"] == "failure" and failure["reason"] == "unresolvable-sources"
    assert [u["name"] for u in failure["unresolvable"]] == ["no-repo", "no-branch", "no-file"]
    assert failure["unresolvable"][1]["error"] == "dataset org/data has no branch, tag or commit 'v9'"
    assert "has no file data/b.parquet" in failure["unresolvable"][2]["error"]
    assert failure["message"].startswith("3 of 4 hub sources cannot be resolved:")


def test_unreachable_hub_is_unresolvable_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: connection refused
    done, failed = hub_lock.resolve([hub_lock.PinRequest("model", "model", "org/model", "main")])
    assert done == {} and len(failed) == 1 and failed[0]["error"].startswith("cannot reach the hub")


def _parquet(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def test_a_parquet_source_is_read_through_pyarrow_at_the_locked_commit(fake_hub: FakeHub, tmp_path: Path, tiny_fetch_dir: Path) -> None:
    rows = [{"text": f"Document number {i} says something about lock files and pinned revisions."} for i in range(12)]
    data = _parquet(rows)
    fake_hub.push("dataset", "org/prose", {"data/train-0.parquet": data, "README.md": b"card\n"})
    decl = {"name": "prose-cal", "kind": "hub-files", "dataset": "org/prose", "split": "train", "revision": "main",
            "role": "calibration", "rows": 8, "files": ["data/train-0.parquet"], "format": "text", "fields": ["text"]}
    done, failed = hub_lock.resolve([hub_lock.PinRequest("prose-cal", "dataset", "org/prose", "main", ("data/train-0.parquet",))])
    assert failed == [] and done["prose-cal"]["files"] == {"data/train-0.parquet": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}
    docs = list(documents(SourceDecl.from_json(decl), str(tmp_path / "cache"), done["prose-cal"]))
    assert [d.text for d in docs] == [r["text"] for r in rows] and docs[0].doc_id == "data/train-0.parquet#0"
    # The branch moves; the worker command still reads the locked commit and records it.
    fake_hub.push("dataset", "org/prose", {"data/train-0.parquet": _parquet(rows[:2]), "README.md": b"card\n"})
    out = tmp_path / "calib"
    result = calib_fetch.main({"model_dir": str(tiny_fetch_dir / "model"), "out": str(out), "sources": [decl],
                               "cache_dir": str(tmp_path / "cache2"), "pins": done})
    assert result["ok"] is True
    entry = json.loads((out / "data_manifest.json").read_text())["sources"][0]
    assert entry["commit"] == done["prose-cal"]["commit"] and entry["revision"] == "main" and entry["documents"] == 8
    assert entry["sha256"] == sha256_file(out / entry["file"])


def test_a_hub_source_without_a_lock_entry_is_refused_before_reading(tmp_path: Path) -> None:
    decl = SourceDecl.from_json({"name": "x", "kind": "hub-files", "dataset": "org/prose", "split": "train", "revision": "main",
                                 "role": "calibration", "rows": 1, "files": ["a.parquet"]})
    from ternforge.calib.sources import SourceUnavailable

    with pytest.raises(SourceUnavailable, match="has no lock entry; `tsx pipeline.ts lock fetch-calib`"):
        next(iter(documents(decl, str(tmp_path))))


def test_a_messages_parquet_source_goes_through_the_chat_template(fake_hub: FakeHub, tmp_path: Path, tiny_fetch_dir: Path) -> None:
    """transformers 5 returns a BatchEncoding (not a dict) from apply_chat_template: its token ids, not its keys."""
    from transformers import AutoTokenizer

    from ternforge.calib.tokens import load_role

    rows = [{"messages": [{"role": "user", "content": f"Question {i}?"}, {"role": "assistant", "content": f"Answer {i}."}]} for i in range(4)]
    fake_hub.push("dataset", "org/chat", {"train.parquet": _parquet(rows)})
    decl = {"name": "chat-cal", "kind": "hub-files", "dataset": "org/chat", "split": "train", "revision": "main",
            "role": "calibration", "rows": 4, "files": ["train.parquet"], "format": "messages", "fields": ["messages"]}
    done, _ = hub_lock.resolve([hub_lock.PinRequest("chat-cal", "dataset", "org/chat", "main", ("train.parquet",))])
    out = tmp_path / "calib"
    result = calib_fetch.main({"model_dir": str(tiny_fetch_dir / "model"), "out": str(out), "sources": [decl],
                               "cache_dir": str(tmp_path / "cache"), "pins": done})
    assert result["ok"] is True
    tok = AutoTokenizer.from_pretrained(str(tiny_fetch_dir / "model"))
    expected = [list(tok.apply_chat_template(r["messages"], tokenize=True)["input_ids"]) for r in rows]
    entry = json.loads((out / "data_manifest.json").read_text())["sources"][0]
    assert entry["tokens"] == sum(len(e) for e in expected) and entry["tokens"] > 4 * 2
    assert [d.tolist() for d in load_role(out, "calibration")] == expected


def test_a_locked_fetch_works_offline_from_the_librarys_cache(fake_hub: FakeHub, tmp_path: Path) -> None:
    """HF_HUB_OFFLINE=1 (read by huggingface_hub at import: a fresh process) with the cache a first fetch laid out:
    the locked commit's snapshot is used, no request reaches the hub, and the bytes are still checked."""
    import os
    import subprocess
    import sys

    fake_hub.push("model", "org/model", _model_files(5))
    entry = _lock_model("main")
    cache = tmp_path / "cache"
    hub.fetch(tmp_path / "online", "org/model", "main", locked=entry, cache_dir=str(cache))
    assert (cache / "models--org--model" / "snapshots" / entry["commit"] / "config.json").is_file()
    fake_hub.requests.clear()
    script = ("import json, sys; from pathlib import Path; from ternforge.sources import hub; "
              "r = hub.fetch(Path(sys.argv[1]), 'org/model', 'main', locked=json.loads(sys.argv[2]), cache_dir=sys.argv[3]); "
              "print(r['origin']['revision'])")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(hub.__file__).parents[2])}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "offline"), json.dumps(entry), str(cache)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == entry["commit"] and fake_hub.requests == []
    assert (tmp_path / "offline" / "model" / "config.json").read_bytes() == CONFIG
    # Offline and changed in the cache: still refused.
    next(cache.rglob("snapshots/*/tokenizer.json")).resolve().write_bytes(TOKENIZER.replace(b"1.0", b"2.0"))
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "offline2"), json.dumps(entry), str(cache)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0 and "hash-mismatch" in proc.stderr and "tokenizer.json: expected git_sha1" in proc.stderr
