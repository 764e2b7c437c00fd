"""The quantize -> pack interchange (DESIGN.md section 2; schemas/interchange-index.schema.json).

    for a ternary tensor <name>:  I8 <name> [out, in] in {-1, 0, 1}  and  F32 <name>.scale [out, in / g]
    for a float tensor <name>:    its data under its source name and source dtype
    index.json: format, base_model, revision, method, files, and every source tensor with its encoding,
                file, shape, dtype, group_size (ternary only) and exempt flag

Files are `interchange-0000K-of-0000N.safetensors`, planned from the shapes before any data is read; a
ternary tensor and its scale always share a file. Same input, same bytes: tensors are written in name
order, safetensors headers are deterministic, index.json is canonical JSON. Each file is written to a
temporary name and renamed; index.json is written last.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..sources.checkpoint import write_json
from .floatplan import Encoding

FORMAT = "ternforge-interchange/1"
INDEX_NAME = "index.json"

DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.float32: "F32",
    torch.float64: "F64",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.int32: "I32",
    torch.int64: "I64",
}


@dataclass(frozen=True)
class TernaryTensor:
    """What a quantize method returns for a ternary tensor; the interchange writer stores it."""

    W_q: torch.Tensor  # int8 [out, in] in {-1, 0, 1}
    scale: torch.Tensor  # float32 [out, in / group_size]
    group_size: int


def file_name(k: int, n: int) -> str:
    return f"interchange-{k:05d}-of-{n:05d}.safetensors"


@dataclass(frozen=True)
class PlannedTensor:
    """One source tensor as it will be stored, before its data exists."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # source dtype name (BF16, F16, F32)
    encoding: Encoding
    group_size: int | None
    exempt: bool
    element_size: int

    @property
    def stored_bytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        if self.encoding is Encoding.TERNARY:
            assert self.group_size is not None
            return n + (n // self.group_size) * 4  # I8 codes + F32 scales
        return n * self.element_size


def plan_files(tensors: list[PlannedTensor], max_file_bytes: int) -> list[list[PlannedTensor]]:
    files: list[list[PlannedTensor]] = [[]]
    size = 0
    for t in tensors:
        if files[-1] and size + t.stored_bytes > max_file_bytes:
            files.append([])
            size = 0
        files[-1].append(t)
        size += t.stored_bytes
    return [f for f in files if f]


def index_entry(t: PlannedTensor, file: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"encoding": t.encoding.value, "file": file, "shape": list(t.shape), "dtype": t.dtype, "exempt": t.exempt}
    if t.encoding is Encoding.TERNARY:
        entry["group_size"] = t.group_size
    return entry


def write_file(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(tmp), metadata={"format": FORMAT})
    os.replace(tmp, path)


def write_index(out_dir: Path, base_model: str, revision: str, method: str, files: list[str], entries: dict[str, Any]) -> dict[str, Any]:
    index = {
        "format": FORMAT,
        "base_model": base_model,
        "revision": revision,
        "method": method,
        "files": files,
        "tensors": dict(sorted(entries.items())),
    }
    write_json(out_dir / INDEX_NAME, index)
    return index


def check_codes(t: PlannedTensor, tt: TernaryTensor) -> None:
    """A method's output must be exactly what the interchange promises; a mismatch is a method bug."""
    assert t.group_size is not None
    out, cols = t.shape
    T, scale = tt.W_q, tt.scale
    if T.dtype != torch.int8 or tuple(T.shape) != (out, cols) or int(T.min()) < -1 or int(T.max()) > 1:
        raise RuntimeError(f"{t.name}: method returned codes {T.dtype} {tuple(T.shape)} outside int8 {{-1,0,1}} [{out}, {cols}]")
    if scale.dtype != torch.float32 or tuple(scale.shape) != (out, cols // t.group_size) or tt.group_size != t.group_size:
        raise RuntimeError(f"{t.name}: method returned scales {scale.dtype} {tuple(scale.shape)} at g={tt.group_size}, "
                           f"expected float32 [{out}, {cols // t.group_size}] at g={t.group_size}")


def write_interchange(out_dir: Path, planned: list[PlannedTensor], read: Callable[[str], torch.Tensor],
                      codes: Callable[[PlannedTensor, torch.Tensor], TernaryTensor], method: str, base_model: str,
                      revision: str, max_file_bytes: int, why: dict[str, str] | None = None,
                      on_tensor: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """The one interchange writer, for every method: `planned` (every source tensor with its encoding, in
    name order) split into files of at most `max_file_bytes`, each tensor read from the source with
    `read(name)` and, when ternary, encoded by `codes(planned, W)`; one file's tensors in memory at a time.
    Returns the figures every method's report and evidence hold: files, totals, the ternary share of the
    non-exempt tensors including the embedding, and per tensor the relative error and zero share of the
    codes (ternary) or why it stays float."""
    files = plan_files(planned, max_file_bytes)
    names = [file_name(k, len(files)) for k in range(1, len(files) + 1)]
    out_dir.mkdir(parents=True, exist_ok=True)
    entries: dict[str, Any] = {}
    per_tensor: dict[str, Any] = {}
    totals = {"ternary_tensors": 0, "float_tensors": 0, "exempt_tensors": 0, "ternary_params": 0, "scale_params": 0,
              "float_params": 0}
    done = 0
    for fname, group in zip(names, files):
        data: dict[str, torch.Tensor] = {}
        for t in group:
            W = read(t.name)
            n = W.numel()
            if t.encoding is Encoding.TERNARY:
                assert t.group_size is not None
                tt = codes(t, W)
                check_codes(t, tt)
                T, scale = tt.W_q.contiguous(), tt.scale.contiguous()
                data[t.name], data[f"{t.name}.scale"] = T, scale
                W_q = (T.to(torch.float32).reshape(T.shape[0], -1, t.group_size) * scale.unsqueeze(-1)).reshape(T.shape)
                W_f = W.to(torch.float32)
                rel = float((W_f - W_q).norm() / W_f.norm().clamp_min(1e-30))
                per_tensor[t.name] = {"encoding": "ternary", "rel_error": round(rel, 6),
                                      "zero_fraction": round(float((T == 0).float().mean()), 6)}
                totals["ternary_tensors"] += 1
                totals["ternary_params"] += n
                totals["scale_params"] += scale.numel()
            else:
                data[t.name] = W
                per_tensor[t.name] = {"encoding": "float", "exempt": t.exempt, "why": (why or {}).get(t.name, "")}
                totals["exempt_tensors" if t.exempt else "float_tensors"] += 1
                if not t.exempt:
                    totals["float_params"] += n
            entries[t.name] = index_entry(t, fname)
            done += 1
            if on_tensor is not None:
                on_tensor(done, len(planned), t.name)
        write_file(out_dir / fname, data)
        del data
    write_index(out_dir, base_model, revision, method, names, entries)
    audited = totals["ternary_params"] + totals["scale_params"] + totals["float_params"]
    return {"files": names, "totals": totals,
            # Ternary share of the non-exempt tensors including embeddings; the audit computes the gate itself.
            "ternary_fraction_incl_embedding": round(totals["ternary_params"] / audited, 6) if audited else 0.0,
            "tensors": per_tensor}
