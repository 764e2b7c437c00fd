"""The absmean quantizer and the quantize -> pack interchange it writes, on the real tiny checkpoint."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from ternforge.quant import absmean, run
from ternforge.quant.methods import METHODS
from ternforge.sources.checkpoint import sha256_file
from ternforge_server.contract import EXEMPT_PREFIXES, TERNARY_FRACTION_MIN

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "schemas" / "interchange-index.schema.json").read_text())


def test_absmean_matches_hand_computed_values() -> None:
    W = torch.tensor([[0.1, -0.5, 0.02, 1.0, 0.0, 0.0, 0.0, 0.0]])
    T, gamma = absmean.quantize(W, absmean.AbsmeanConfig(group_size=4))
    # gamma = mean(|0.1|, |-0.5|, |0.02|, |1.0|) = 0.405; W / gamma = [0.247, -1.235, 0.049, 2.469]
    assert T.dtype == torch.int8 and T.tolist() == [[0, -1, 0, 1, 0, 0, 0, 0]]
    assert gamma.dtype == torch.float32 and gamma.shape == (1, 2)
    assert gamma[0, 0].item() == pytest.approx(0.405) and gamma[0, 1].item() == 0.0
    with pytest.raises(ValueError, match="does not divide"):
        absmean.quantize(torch.zeros(2, 6), absmean.AbsmeanConfig(group_size=4))


def test_absmean_bf16_input_and_method_table() -> None:
    W = torch.randn(16, 64, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    T, gamma = absmean.quantize(W, absmean.AbsmeanConfig(group_size=32))
    assert set(T.unique().tolist()) == {-1, 0, 1}
    assert torch.allclose(gamma, W.float().reshape(16, 2, 32).abs().mean(-1))
    assert METHODS["absmean"].name == "absmean" and not METHODS["absmean"].calibrated


def _quantize(model_dir: Path, out_dir: Path, group_size: int = 32, **extra) -> dict:
    return run.main({"model_dir": str(model_dir), "out_dir": str(out_dir), "method": "absmean", "group_size": group_size, **extra})


def _validate_index(index: dict) -> None:
    """The schema's constraints, checked by hand (the TypeScript side validates with ajv)."""
    assert set(index) == set(SCHEMA["properties"]) and index["format"] == SCHEMA["properties"]["format"]["const"]
    tensor_schema = SCHEMA["definitions"]["InterchangeTensor"]
    for name, entry in index["tensors"].items():
        assert set(tensor_schema["required"]) <= set(entry) <= set(tensor_schema["properties"]), name
        assert entry["encoding"] in tensor_schema["properties"]["encoding"]["enum"] and entry["file"] in index["files"]


def test_interchange_on_tiny(tiny_fetch_dir: Path, tmp_path: Path) -> None:
    model_dir = tiny_fetch_dir / "model"
    result = _quantize(model_dir, tmp_path / "q")
    assert result["ok"] is True
    index = json.loads((tmp_path / "q" / "index.json").read_text())
    _validate_index(index)
    assert index["base_model"] == "ternforge-tiny-qwen3.5-seed0" and index["revision"] == "v1-seed0" and index["method"] == "absmean"

    source_map = json.loads((model_dir / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index["tensors"]) == set(source_map)  # every source tensor, nothing else
    src = {shard: safe_open(str(model_dir / shard), framework="pt") for shard in set(source_map.values())}
    files = {f: safe_open(str(tmp_path / "q" / f), framework="pt") for f in index["files"]}
    stored = set().union(*(set(f.keys()) for f in files.values()))

    ternary = {n for n, e in index["tensors"].items() if e["encoding"] == "ternary"}
    assert "model.language_model.layers.0.linear_attn.in_proj_qkv.weight" in ternary
    assert "model.language_model.layers.3.self_attn.q_proj.weight" in ternary
    for kept in ("embed_tokens.weight", "linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight", "linear_attn.conv1d.weight", "linear_attn.A_log", "input_layernorm.weight"):
        assert not any(n.endswith(kept) for n in ternary), kept
    assert all(n.startswith("model.language_model.layers.") for n in ternary)

    for name, entry in index["tensors"].items():
        W = src[source_map[name]].get_tensor(name)
        f = files[entry["file"]]
        assert entry["shape"] == list(W.shape) and entry["dtype"] == "BF16"
        assert entry["exempt"] == name.startswith(EXEMPT_PREFIXES)
        if entry["encoding"] == "ternary":
            T, scale = f.get_tensor(name), f.get_tensor(name + ".scale")
            assert entry["group_size"] == 32 and T.dtype == torch.int8 and scale.dtype == torch.float32
            assert T.shape == W.shape and scale.shape == (W.shape[0], W.shape[1] // 32)
            assert set(T.unique().tolist()) <= {-1, 0, 1}
            T_ref, scale_ref = absmean.quantize(W, absmean.AbsmeanConfig(group_size=32))
            assert torch.equal(T, T_ref) and torch.equal(scale, scale_ref)
        else:
            assert "group_size" not in entry and name + ".scale" not in stored
            assert torch.equal(f.get_tensor(name), W)  # float tensors: the source bytes, source dtype

    # The tiny checkpoint is sized so its float tensors fit the contract's budget at g=32 (gate 1).
    totals = result["totals"]
    embed = 448 * 128
    fraction = totals["ternary_params"] / (totals["ternary_params"] + totals["scale_params"] + totals["float_params"] - embed)
    assert fraction > TERNARY_FRACTION_MIN


def test_interchange_bytes_are_deterministic_and_split_by_size(tiny_fetch_dir: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _quantize(tiny_fetch_dir / "model", a, max_file_bytes=600_000)
    _quantize(tiny_fetch_dir / "model", b, max_file_bytes=600_000)
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert len([n for n in names if n.endswith(".safetensors")]) > 1
    for n in names:
        assert sha256_file(a / n) == sha256_file(b / n), n
    index = json.loads((a / "index.json").read_text())
    for name, entry in index["tensors"].items():  # a ternary tensor and its scale share a file
        if entry["encoding"] == "ternary":
            with safe_open(str(a / entry["file"]), framework="pt") as f:
                assert {name, name + ".scale"} <= set(f.keys())


def test_expected_failures_are_events_and_write_nothing(tiny_fetch_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _quantize(tiny_fetch_dir / "model", tmp_path / "g30", group_size=30) == {"ok": False}
    failure = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert failure["event"] == "failure" and failure["reason"] == "bad-group-size" and failure["actual"] == 30
    assert not (tmp_path / "g30").exists() or not any((tmp_path / "g30").iterdir())
    result = run.main({"model_dir": str(tiny_fetch_dir / "model"), "out_dir": str(tmp_path / "m"), "method": "nope", "group_size": 32})
    assert result == {"ok": False}
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["reason"] == "unknown-method"


def test_quantize_cli_streams_progress(tiny_fetch_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_dir": str(tiny_fetch_dir / "model"), "out_dir": str(tmp_path / "q"), "method": "absmean", "group_size": 64}))
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    done = subprocess.run([sys.executable, "-m", "ternforge", "quantize", "--config", str(config)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    progress = [e for e in events if e["event"] == "progress"]
    n = len(json.loads((tiny_fetch_dir / "model" / "model.safetensors.index.json").read_text())["weight_map"])
    assert [e["done"] for e in progress] == list(range(1, n + 1))
    assert events[-1]["event"] == "result" and events[-1]["ok"] is True
    index = json.loads((tmp_path / "q" / "index.json").read_text())
    assert {e["group_size"] for e in index["tensors"].values() if e["encoding"] == "ternary"} == {64}
