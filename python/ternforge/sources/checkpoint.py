"""The fetch-model output layout, written the same way by every source.

    <out>/model/config.json, generation_config.json, tokenizer.json, tokenizer_config.json,
                chat_template.jinja (when the template is not inside tokenizer_config.json),
                model.safetensors.index.json (always, even for one shard: weight_map + metadata.total_size),
                model-0000K-of-0000N.safetensors
    <out>/source.json   what was fetched, from where, and every file's sha256 and size

Writers stream tensors into shards and never hold more than one shard in memory. Files are written to a
temporary name beside their destination and renamed into place, so bad input leaves no half-written file.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

INDEX_NAME = "model.safetensors.index.json"
SOURCE_NAME = "source.json"
SOURCE_FORMAT = "ternforge-source/1"
_HASH_CHUNK = 1 << 20


class SourceError(Exception):
    """An expected failure of a model source: a kebab-case reason plus the facts (path, expected, actual)."""

    def __init__(self, reason: str, message: str, **facts: Any) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.facts = facts


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, value: Any) -> None:
    """Canonical JSON (sorted keys, two-space indent, trailing newline): same value, same bytes."""
    write_bytes_atomic(path, (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8"))


def write_text(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def shard_name(k: int, n: int) -> str:
    return f"model-{k:05d}-of-{n:05d}.safetensors"


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one tensor a source will produce, known before its data."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()


def plan_shards(specs: list[TensorSpec], max_shard_bytes: int) -> list[list[TensorSpec]]:
    """Split tensors, in order, into shards of at most `max_shard_bytes` (a bigger tensor gets its own shard)."""
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in specs:
        if shards[-1] and size + spec.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += spec.nbytes
    return [s for s in shards if s]


def write_sharded(
    model_dir: Path,
    specs: list[TensorSpec],
    tensors: Iterator[tuple[str, torch.Tensor]],
    max_shard_bytes: int,
    on_tensor: Any = None,
) -> dict[str, Any]:
    """Stream `tensors` (in `specs` order) into shards and write the index. Returns the index dict.

    Each yielded tensor must match its spec's name, shape and dtype; a mismatch is a source bug.
    """
    plan = plan_shards(specs, max_shard_bytes)
    weight_map: dict[str, str] = {}
    total = 0
    done = 0
    for k, shard in enumerate(plan, start=1):
        name = shard_name(k, len(plan))
        data: dict[str, torch.Tensor] = {}
        for spec in shard:
            got_name, t = next(tensors)
            if got_name != spec.name or tuple(t.shape) != spec.shape or t.dtype != spec.dtype:
                raise RuntimeError(f"tensor stream out of step: expected {spec}, got {got_name} {tuple(t.shape)} {t.dtype}")
            data[spec.name] = t.contiguous()
            weight_map[spec.name] = name
            total += spec.nbytes
            done += 1
            if on_tensor is not None:
                on_tensor(done, len(specs), spec.name)
        tmp = model_dir / f".{name}.tmp"
        save_file(data, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, model_dir / name)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    write_json(model_dir / INDEX_NAME, index)
    return index


def file_records(root: Path) -> list[dict[str, Any]]:
    """Every regular file under `root` (relative path, size, sha256), sorted by path."""
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.name.startswith("."):
            out.append({"path": p.relative_to(root).as_posix(), "size": p.stat().st_size, "sha256": sha256_file(p)})
    return out


def write_source_record(out_dir: Path, origin: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write `<out>/source.json`: the origin (what and from where), the model files with their hashes."""
    model_dir = out_dir / "model"
    index = json.loads((model_dir / INDEX_NAME).read_text(encoding="utf-8"))
    record = {
        "format": SOURCE_FORMAT,
        "origin": origin,
        "model_dir": "model",
        "files": file_records(model_dir),
        "tensor_count": len(index["weight_map"]),
        "total_size": index["metadata"]["total_size"],
        **(extra or {}),
    }
    write_json(out_dir / SOURCE_NAME, record)
    return record


def iter_index_tensors(model_dir: Path) -> Iterable[tuple[str, str]]:
    """(tensor name, shard file) from the checkpoint's own index, sorted by name."""
    index = json.loads((model_dir / INDEX_NAME).read_text(encoding="utf-8"))
    return sorted(index["weight_map"].items())
