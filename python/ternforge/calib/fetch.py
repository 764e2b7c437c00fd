"""`python -m ternforge fetch-calib --config <json>`: declared sources -> token files + data_manifest.json.

Config:
    model_dir   fetch-model's `model/` (its tokenizer tokenises everything)
    out         the stage's empty output directory
    sources     the profile's list of SourceDecl objects
    cache_dir   optional hub download cache
    pins        hub-files sources: source name -> its lock entry {kind, repo, ref, commit, files}

Order of work: every source is checked against the data rules (policy.check) and the held-out/calibration
disjointness before anything is read, so a refused declaration never downloads or tokenises a byte.
Documents are assigned to hash buckets (sha256 of `<dataset>:<doc_id>`, mod 100); two entries over the
same text split it by document through disjoint bucket ranges, and the manifest records the document ids
of each (or their sha256 when there are many).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..events import emit, log
from ..sources.checkpoint import SourceError
from . import policy
from .sources import SourceDecl, SourceUnavailable, documents
from .tokens import MANIFEST, sha256_file, write_tokens

FORMAT = "ternforge-data/1"
BUCKETS = 100


def bucket(dataset: str, doc_id: str) -> int:
    return int(hashlib.sha256(f"{dataset}:{doc_id}".encode()).hexdigest()[:8], 16) % BUCKETS


def _text_key(d: SourceDecl) -> tuple:
    return (d.kind, d.dataset, d.config, d.split, d.revision)


def check_declarations(decls: list[SourceDecl]) -> None:
    """Data rules and disjointness; raises policy.CalibRefused."""
    names = [d.name for d in decls]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise policy.CalibRefused(f"source names must be unique; repeated: {', '.join(dup)}")
    for d in decls:
        policy.check(d.dataset, d.config, d.split, d.role)
        lo, hi = d.buckets
        if not (0 <= lo < hi <= BUCKETS):
            raise policy.CalibRefused(f"source {d.name!r}: buckets {list(d.buckets)} must satisfy 0 <= lo < hi <= {BUCKETS}")
        if d.rows <= 0:
            raise policy.CalibRefused(f"source {d.name!r}: rows must be positive, got {d.rows}")
    for i, a in enumerate(decls):
        for b in decls[i + 1:]:
            if _text_key(a) == _text_key(b) and a.role != b.role:
                if a.buckets[0] < b.buckets[1] and b.buckets[0] < a.buckets[1]:
                    raise policy.CalibRefused(
                        f"sources {a.name!r} ({a.role}) and {b.name!r} ({b.role}) read the same text "
                        f"{a.dataset} with overlapping document buckets {list(a.buckets)} and {list(b.buckets)}; "
                        f"roles over one text must take disjoint buckets")


def _tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def _encode(tok, doc) -> list[int]:
    if doc.messages is not None and getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template(doc.messages, tokenize=True)
        if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding (a UserDict, not a dict)
            ids = ids["input_ids"]
        return list(ids)
    return tok(doc.text, add_special_tokens=False)["input_ids"]


def main(config: dict[str, Any]) -> dict[str, Any]:
    """The worker command: an expected refusal becomes a `failure` event and {"ok": false}."""
    try:
        return {"ok": True, **run(config)}
    except policy.CalibRefused as e:
        log(str(e))
        emit("failure", reason="calib-refused", message=str(e))
    except SourceUnavailable as e:
        log(str(e))
        emit("failure", reason="source-unavailable", message=str(e))
    except SourceError as e:  # a locked file's bytes differ, or its download failed
        log(str(e))
        emit("failure", reason=e.reason, message=str(e), **e.facts)
    return {"ok": False}


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Check every declaration, then read, tokenise and write; raises CalibRefused / SourceUnavailable."""
    out = Path(config["out"])
    model_dir = str(config["model_dir"])
    decls = [SourceDecl.from_json(s) for s in config["sources"]]
    check_declarations(decls)
    tok = _tokenizer(model_dir)
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.pad_token_id
    entries = []
    for n, d in enumerate(decls):
        ids_docs: list[list[int]] = []
        doc_ids: list[str] = []
        text_hash = hashlib.sha256()
        n_tokens = 0
        locked = (config.get("pins") or {}).get(d.name)
        for doc in documents(d, config.get("cache_dir"), locked):
            if not (d.buckets[0] <= bucket(d.dataset, doc.doc_id) < d.buckets[1]):
                continue
            ids = _encode(tok, doc)
            if d.max_tokens is not None and n_tokens + len(ids) > d.max_tokens:
                ids = ids[: d.max_tokens - n_tokens]
            if not ids:
                break
            text_hash.update(doc.doc_id.encode() + b"\0" + doc.text.encode() + b"\0")
            ids_docs.append(ids)
            doc_ids.append(doc.doc_id)
            n_tokens += len(ids)
            if len(ids_docs) >= d.rows or (d.max_tokens is not None and n_tokens >= d.max_tokens):
                break
        if not ids_docs:
            raise policy.CalibRefused(f"source {d.name!r}: no documents fell in buckets {list(d.buckets)}")
        rel = f"tokens/{d.role}/{d.name}.safetensors"
        write_tokens(out / rel, ids_docs)
        entry = {
            "name": d.name, "kind": d.kind, "dataset": d.dataset, "config": d.config, "split": d.split,
            "revision": d.revision, **({"commit": locked["commit"]} if locked else {}), "role": d.role, "rows_declared": d.rows, "buckets": list(d.buckets),
            "documents": len(ids_docs), "tokens": n_tokens, "text_sha256": text_hash.hexdigest(),
            "document_ids": doc_ids if len(doc_ids) <= 2000 else None,
            "document_ids_sha256": hashlib.sha256("\n".join(doc_ids).encode()).hexdigest(),
            "file": rel, "sha256": sha256_file(out / rel), "bytes": (out / rel).stat().st_size,
        }
        entries.append(entry)
        log(f"fetch-calib: {d.name} ({d.role}): {len(ids_docs)} documents, {n_tokens} tokens")
        emit("progress", done=n + 1, total=len(decls), what=d.name)
    _check_disjoint_ids(entries)
    tok_files = {p.name: sha256_file(p) for p in sorted(Path(model_dir).iterdir())
                 if p.name.startswith("tokenizer") or p.name in ("chat_template.jinja", "special_tokens_map.json")}
    manifest = {
        "format": FORMAT,
        "tokenizer": {"eos_id": eos, "vocab_size": len(tok), "files": tok_files},
        "rules": {
            "benchmark_patterns": [label for label, _ in policy.BENCHMARK_PATTERNS],
            "held_splits": policy.HELD_SPLIT.pattern,
            "statement": "benchmark data and validation/test/dev splits may only have the role 'evaluation'; "
                         "nothing with that role reaches quantize or a choice of defaults",
        },
        "sources": entries,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    totals = {r: sum(e["tokens"] for e in entries if e["role"] == r) for r in policy.ROLES}
    return {"manifest": MANIFEST, "sources": len(entries), "tokens_by_role": totals}


def _check_disjoint_ids(entries: list[dict[str, Any]]) -> None:
    """Belt and braces after the bucket check: no document id of one text in two roles."""
    seen: dict[tuple, tuple[str, str]] = {}
    for e in entries:
        for doc_id in e["document_ids"] or []:
            key = (e["kind"], e["dataset"], e["config"], e["split"], e["revision"], doc_id)
            if key in seen and seen[key][1] != e["role"]:
                raise policy.CalibRefused(f"document {doc_id!r} of {e['dataset']} is in {seen[key][0]!r} "
                                          f"({seen[key][1]}) and {e['name']!r} ({e['role']})")
            seen[key] = (e["name"], e["role"])
