"""Token files and how consumers read them.

One safetensors file per source, `tokens/<role>/<source>.safetensors`:
    input_ids    I32 [n_tokens]        every document's tokens, concatenated (no separators)
    doc_offsets  I64 [n_docs + 1]      document d is input_ids[doc_offsets[d]:doc_offsets[d + 1]]
The data manifest lists each file with its sha256; `load_role` checks it before anything is read.
Consumers cut fixed-length sequences with `sequences`: documents joined by the tokenizer's EOS id, in
file order, cut into windows of `seq_len` (the tail that does not fill a window is dropped).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

MANIFEST = "data_manifest.json"


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_tokens(path: Path, docs: list[list[int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    offsets = [0]
    for d in docs:
        offsets.append(offsets[-1] + len(d))
    flat = [t for d in docs for t in d]
    save_file({"input_ids": torch.tensor(flat, dtype=torch.int32),
               "doc_offsets": torch.tensor(offsets, dtype=torch.int64)}, str(path))


class TokenFileMismatch(ValueError):
    """A token file's bytes differ from the sha256 the data manifest recorded."""


def read_manifest(calib_dir: str | Path) -> dict:
    return json.loads((Path(calib_dir) / MANIFEST).read_text(encoding="utf-8"))


def load_role(calib_dir: str | Path, role: str) -> list[torch.Tensor]:
    """Every document (int64 token tensor) of every source with `role`, sha256-checked, in manifest order."""
    calib_dir = Path(calib_dir)
    docs: list[torch.Tensor] = []
    for src in read_manifest(calib_dir)["sources"]:
        if src["role"] != role:
            continue
        path = calib_dir / src["file"]
        actual = sha256_file(path)
        if actual != src["sha256"]:
            raise TokenFileMismatch(f"{src['file']}: sha256 {actual} but the data manifest says {src['sha256']}")
        t = load_file(str(path))
        ids, off = t["input_ids"].to(torch.int64), t["doc_offsets"].tolist()
        docs.extend(ids[off[i]:off[i + 1]] for i in range(len(off) - 1))
    return docs


def sequences(docs: list[torch.Tensor], seq_len: int, n_seq: int | None, eos_id: int) -> torch.Tensor:
    """[n, seq_len] int64 windows over the EOS-joined documents; all of them when n_seq is None."""
    if not docs:
        raise ValueError("no documents to cut sequences from")
    sep = torch.tensor([eos_id], dtype=torch.int64)
    stream = torch.cat([x for d in docs for x in (d, sep)])
    n = stream.numel() // seq_len
    if n_seq is not None:
        if n < n_seq:
            raise ValueError(f"{stream.numel()} tokens make {n} sequences of {seq_len}, {n_seq} requested")
        n = n_seq
    return stream[: n * seq_len].reshape(n, seq_len)


def batches(seqs: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    """Equal batches (the layer-wise driver replays one set of masks for all of them)."""
    if seqs.shape[0] % batch_size != 0:
        raise ValueError(f"{seqs.shape[0]} sequences do not split into batches of {batch_size}")
    return [seqs[i:i + batch_size] for i in range(0, seqs.shape[0], batch_size)]
