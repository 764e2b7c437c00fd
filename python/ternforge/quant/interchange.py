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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..sources.checkpoint import write_json
from .policy import Encoding

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
