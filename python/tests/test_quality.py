"""Each method on tiny, end to end: fetch-calib -> method -> interchange -> the TypeScript pack -> the
server's loader -> quality.json; and same inputs, seed and device give the same bytes."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ternforge import quality
from ternforge.quant import run

ROOT = Path(__file__).resolve().parents[2]
TSX = ROOT / "node_modules" / ".bin" / "tsx"
# Skipped only where node does not run; where it does, a missing tsx fails (the pack below asserts it).
needs_pack = pytest.mark.skipif(shutil.which("node") is None, reason="no node on PATH (where node exists this runs, and fails without tsx)")

PARAMS = {"group_size": 32, "seed": 0, "calibration": {"seq_len": 64, "sequences": 8, "batch_size": 4},
          "allocation": {"target_fraction": 0.955, "min_relative_score": 1.0},
          "gptq": {"actorder": True}, "kd": {"steps": 4, "lr": 0.05, "scale_lr": 5e-3, "batch_size": 4, "seq_len": 64,
                 "chat_prompts": 4, "chat_max_new": 8}}


def _quantize(method: str, model_dir: Path, calib: Path, work: Path) -> dict:
    """The quantize command itself (methods.METHODS through the one writer) into work/interchange."""
    res = run.main({**PARAMS, "method": method, "model_dir": str(model_dir), "calib_dir": str(calib),
                    "work_dir": str(work / "kd"), "out_dir": str(work / "interchange")})
    assert res["ok"], res
    assert method == "none" or res["ternary_fraction"] > 0.95
    return json.loads((work / "interchange" / "quantize_report.json").read_text())


def _pack(work: Path) -> Path:
    out = work / "packed"
    assert TSX.exists(), f"node exists but {TSX} does not: run npm ci (the cross-language check never skips where node runs)"
    proc = subprocess.run([str(TSX), str(ROOT / "lib/pack/cli.ts"), str(work / "interchange"), str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


@needs_pack
@pytest.mark.parametrize("method", ["none", "twn", "gptq", "gptq+kd"])
def test_method_end_to_end_through_pack_loader_and_quality(method: str, tiny_fetch_dir: Path, tiny_calib: Path,
                                                            tmp_path: Path) -> None:
    model_dir = tiny_fetch_dir / "model"
    _quantize(method, model_dir, tiny_calib, tmp_path)
    packed = _pack(tmp_path)
    result = quality.main({"pack_dir": str(packed), "model_dir": str(model_dir), "calib_dir": str(tiny_calib),
                           "out": str(tmp_path / "quality"), "seq_len": 64, "sequences": 4, "batch_size": 2})
    report = json.loads((tmp_path / "quality" / "quality.json").read_text())
    m = report["metrics"]
    assert report["heldout"] == {"role": "heldout", "seq_len": 64, "sequences": 4}
    assert report["loader"]["architecture"] == "Qwen3_5ForCausalLM"
    assert result["ppl"] == m["ppl"]
    if method == "none":
        assert report["tensors"]["count"] == 0
        assert m["ppl_ratio"] == pytest.approx(1.0, abs=1e-4) and m["top1_agreement"] == 1.0
    else:
        per = report["tensors"]["per_tensor"]
        assert report["tensors"]["count"] == len(per) > 20
        assert all(0 < v["rel_frobenius"] < 1 and 0 < v["zero_share"] < 1 for v in per.values())
        assert 0 <= m["top1_agreement"] <= 1 and m["kl"] > 0


def test_same_inputs_seed_and_device_give_the_same_bytes(tiny_fetch_dir: Path, tiny_calib: Path, tmp_path: Path) -> None:
    model_dir = tiny_fetch_dir / "model"
    for run in ("a", "b"):
        _quantize("gptq+kd", model_dir, tiny_calib, tmp_path / run)
    a = (tmp_path / "a" / "interchange").iterdir()
    for f in sorted(a):
        assert f.read_bytes() == (tmp_path / "b" / "interchange" / f.name).read_bytes(), f.name


def test_quantize_model_writes_the_interchange_and_its_report(tiny_fetch_dir: Path, tiny_calib: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    res = run.main({**PARAMS, "method": "gptq", "model_dir": str(tiny_fetch_dir / "model"),
                    "out_dir": str(out), "calib_dir": str(tiny_calib)})
    index = json.loads((out / "index.json").read_text())
    report = json.loads((out / "quantize_report.json").read_text())
    assert res["ok"] and index["method"] == "gptq" and index["format"] == "ternforge-interchange/1"
    assert index["base_model"] == "ternforge-tiny-qwen3.5-seed0" and index["revision"] == "v1-seed0"
    ternary = {n for n, t in index["tensors"].items() if t["encoding"] == "ternary"}
    assert ternary == set(report["ternary_tensors"]) and len(ternary) == res["totals"]["ternary_tensors"] > 20
    assert all(t["group_size"] == 32 for n, t in index["tensors"].items() if n in ternary)
    assert report["allocation"]["ternary_fraction"] > 0.95
    assert not any("in_proj_a" in n or "in_proj_b" in n or "embed_tokens" in n for n in ternary)


def test_compare_in_chunks_equals_whole_logits(tiny_fetch_dir: Path) -> None:
    """The quality pass's chunked heads give the figures of whole logits (up to float summation order)."""
    import torch

    from ternforge.quant.model import load_float_model

    ref = load_float_model(tiny_fetch_dir / "model")
    cand = load_float_model(tiny_fetch_dir / "model")
    with torch.no_grad():
        for p in cand.parameters():
            p.mul_(0.9)
    seqs = torch.randint(0, int(ref.config.vocab_size), (3, 40), generator=torch.Generator().manual_seed(0))
    whole = quality.compare(ref, cand, seqs, batch_size=2, chunk=10**6)
    chunked = quality.compare(ref, cand, seqs, batch_size=2, chunk=7)
    assert whole["positions"] == chunked["positions"] == 3 * 39
    for k in ("ppl_reference", "ppl", "kl", "ppl_ratio"):
        assert chunked[k] == pytest.approx(whole[k], rel=1e-5), k
    assert chunked["top1_agreement"] == whole["top1_agreement"] and 0 < whole["kl"]
