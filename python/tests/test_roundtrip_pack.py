"""Quantizer codes -> the TypeScript pack (lib/pack/cli.ts) -> the server's Python unpack: exact round trip.

The interchange is written here in Python the way the quantize stage writes it (DESIGN.md section 2); the
packed shards are read back with `safetensors` and `ternforge_server.packing.unpack_2bit`.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from ternforge_server.packing import dequantize, unpack_2bit

ROOT = Path(__file__).resolve().parents[2]
TSX = ROOT / "node_modules" / ".bin" / "tsx"


def write_interchange(directory: Path, seed: int) -> dict[str, dict[str, torch.Tensor]]:
    """Random ternary codes and scales for three tensors (g = 32, 64, 128) plus one float tensor."""
    rng = np.random.default_rng(seed)
    truth: dict[str, dict[str, torch.Tensor]] = {}
    tensors: dict[str, torch.Tensor] = {}
    index: dict[str, dict] = {}
    for name, (rows, cols), g in [("a.weight", (48, 128), 32), ("b.weight", (7, 256), 64), ("c.weight", (1, 128), 128)]:
        t = torch.from_numpy(rng.integers(-1, 2, size=(rows, cols), dtype=np.int8))
        s = torch.from_numpy(rng.standard_normal((rows, cols // g)).astype(np.float32))
        tensors[name], tensors[f"{name}.scale"] = t, s
        truth[name] = {"codes": t, "scale": s}
        index[name] = {"encoding": "ternary", "file": "q.safetensors", "shape": [rows, cols], "dtype": "BF16", "group_size": g}
    norm = torch.from_numpy(rng.standard_normal(128).astype(np.float32)).to(torch.bfloat16)
    tensors["norm.weight"] = norm
    truth["norm.weight"] = {"data": norm}
    index["norm.weight"] = {"encoding": "float", "file": "q.safetensors", "shape": [128], "dtype": "BF16"}
    save_file(tensors, str(directory / "q.safetensors"))
    (directory / "index.json").write_text(json.dumps({
        "format": "ternforge-interchange/1", "base_model": "test", "revision": str(seed), "method": "random",
        "files": ["q.safetensors"], "tensors": index,
    }))
    return truth


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on PATH (where node exists this runs, and fails without tsx)")
def test_typescript_pack_python_unpack_round_trip(tmp_path: Path) -> None:
    inter, out = tmp_path / "interchange", tmp_path / "packed"
    inter.mkdir()
    truth = write_interchange(inter, seed=3)
    assert TSX.exists(), f"node exists but {TSX} does not: run npm ci (the cross-language check never skips where node runs)"
    proc = subprocess.run([str(TSX), str(ROOT / "lib/pack/cli.ts"), str(inter), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["ternary"] == 3 and summary["float"] == 1

    manifest = json.loads((out / "quantization_manifest.json").read_text())
    shards = {s["file"]: load_file(str(out / s["file"])) for s in manifest["shards"]}
    for name, want in truth.items():
        entry = manifest["tensors"][name]
        stored = shards[entry["shard"]]
        if "codes" in want:
            assert entry["encoding"] == "packed_2bit"
            codes = stored[entry["codes_key"]]
            assert codes.dtype == torch.uint8
            got = unpack_2bit(codes, entry["shape"][1])
            assert torch.equal(got, want["codes"])
            assert torch.equal(stored[entry["scale_key"]], want["scale"])
            w = dequantize(got, stored[entry["scale_key"]], entry["group_size"], torch.float32)
            ref = want["codes"].float().reshape(w.shape[0], -1, entry["group_size"]) * want["scale"].unsqueeze(-1)
            assert torch.equal(w, ref.reshape(w.shape))
        else:
            assert entry["encoding"] == "float"
            assert torch.equal(stored[entry["data_key"]], want["data"])


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on PATH (where node exists this runs, and fails without tsx)")
def test_typescript_pack_refuses_a_non_ternary_code(tmp_path: Path) -> None:
    inter, out = tmp_path / "interchange", tmp_path / "packed"
    inter.mkdir()
    write_interchange(inter, seed=4)
    tensors = load_file(str(inter / "q.safetensors"))
    tensors["b.weight"][2, 5] = 2
    save_file(tensors, str(inter / "q.safetensors"))
    assert TSX.exists(), f"node exists but {TSX} does not: run npm ci (the cross-language check never skips where node runs)"
    proc = subprocess.run([str(TSX), str(ROOT / "lib/pack/cli.ts"), str(inter), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "invalid-ternary-value: b.weight[2, 5] = 2" in proc.stderr
    assert not (out / "quantization_manifest.json").exists()
