"""Where calibration text comes from: documents as (doc_id, text) pairs, in a stable order.

Two kinds:
- `package-text`: real English prose shipped inside installed packages, no network. `pydoc-topics` is
  CPython's own `pydoc_data/topics.py` (the language reference's topics, one document per topic);
  `stdlib-docstrings` are the module and function docstrings of the standard library's `.py` files, read
  with `ast` (never imported), one document per module. `revision` names the Python minor version
  (`python-3.11`) whose files were read; the text's sha256 is recorded in the data manifest.
- `hub-files`: files of a dataset repository on the Hugging Face hub. `revision` is the ref the profile asks
  for (a branch, tag or commit); the stage's lock entry (profiles/<profile>.lock.json, see
  ternforge/sources/hub_lock.py) names the commit it resolved to and each file's sha256. Files are fetched
  with `huggingface_hub.hf_hub_download` at that commit (no `datasets` library) and refused when their bytes
  differ from the lock. `.jsonl`/`.json` rows are read with the standard library, `.parquet` with pyarrow
  (pinned in python/requirements.txt). Without a lock entry, or offline, this refuses with
  `SourceUnavailable`.
"""
from __future__ import annotations

import ast
import json
import sys
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SourceUnavailable(RuntimeError):
    """A declared source cannot be read here (offline, missing reader); the message says what is needed."""


@dataclass(frozen=True)
class SourceDecl:
    """One entry of the profile's `fetch-calib.sources`."""

    name: str
    kind: str  # "package-text" | "hub-files"
    dataset: str
    split: str
    revision: str
    role: str
    rows: int
    config: str | None = None
    buckets: tuple[int, int] = (0, 100)  # documents whose hash bucket (of 100) lies in [lo, hi)
    files: tuple[str, ...] = ()
    format: str = "text"  # hub rows: "text" | "messages" | "sharegpt" | "fields"
    fields: tuple[str, ...] = ("text",)
    max_tokens: int | None = None

    @staticmethod
    def from_json(d: dict[str, Any]) -> "SourceDecl":
        return SourceDecl(
            name=d["name"], kind=d["kind"], dataset=d["dataset"], split=d["split"], revision=d["revision"],
            role=d["role"], rows=int(d["rows"]), config=d.get("config"),
            buckets=tuple(d.get("buckets", (0, 100))),  # type: ignore[arg-type]
            files=tuple(d.get("files", ())), format=d.get("format", "text"),
            fields=tuple(d.get("fields", ("text",))), max_tokens=d.get("max_tokens"))


@dataclass
class Document:
    doc_id: str
    text: str = field(repr=False)
    messages: list[dict[str, str]] | None = field(default=None, repr=False)


def _python_revision() -> str:
    return f"python-{sys.version_info.major}.{sys.version_info.minor}"


def _pydoc_topics() -> Iterator[Document]:
    from pydoc_data.topics import topics

    for key in sorted(topics):
        yield Document(doc_id=key, text=topics[key])


def _stdlib_docstrings() -> Iterator[Document]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        parts = []
        for node in [tree, *ast.walk(tree)]:
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    parts.append(doc)
        text = "\n\n".join(dict.fromkeys(parts))
        if len(text) > 200:
            yield Document(doc_id=path.name, text=text)


PACKAGE_TEXTS: dict[str, Callable[[], Iterator[Document]]] = {
    "pydoc-topics": _pydoc_topics,
    "stdlib-docstrings": _stdlib_docstrings,
}


def _package_documents(decl: SourceDecl) -> Iterator[Document]:
    if decl.dataset not in PACKAGE_TEXTS:
        raise SourceUnavailable(f"source {decl.name!r}: unknown package text {decl.dataset!r} "
                                f"(known: {', '.join(sorted(PACKAGE_TEXTS))})")
    if decl.revision != _python_revision():
        raise SourceUnavailable(f"source {decl.name!r}: declared revision {decl.revision!r} but this Python "
                                f"ships {_python_revision()!r}; the text differs between Python versions")
    return PACKAGE_TEXTS[decl.dataset]()


def _row_text(row: dict[str, Any], decl: SourceDecl) -> Document | None:
    if decl.format == "text":
        return Document(doc_id="", text="\n\n".join(str(row[f]) for f in decl.fields if row.get(f)))
    if decl.format == "fields":
        return Document(doc_id="", text="\n\n".join(f"{row[f]}" for f in decl.fields if row.get(f)))
    if decl.format in ("messages", "sharegpt"):
        raw = row.get(decl.fields[0]) or []
        msgs = []
        for m in raw:
            if decl.format == "sharegpt":
                role = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                        "system": "system"}.get(str(m.get("from")), "user")
                msgs.append({"role": role, "content": str(m.get("value", ""))})
            else:
                msgs.append({"role": str(m.get("role", "user")), "content": str(m.get("content", ""))})
        if not msgs:
            return None
        return Document(doc_id="", text="\n\n".join(m["content"] for m in msgs), messages=msgs)
    raise ValueError(f"source {decl.name!r}: unknown row format {decl.format!r} (text, fields, messages, sharegpt)")


def _read_rows(path: Path) -> Iterator[dict[str, Any]]:
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)
    elif path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        yield from (data if isinstance(data, list) else data.get("rows", []))
    elif path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # type: ignore[import-not-found]
        except ImportError as e:
            raise SourceUnavailable(f"{path.name}: reading parquet needs pyarrow in the workers' environment "
                                    f"(add an exact pin to python/requirements.txt)") from e
        for batch in pq.ParquetFile(str(path)).iter_batches(batch_size=256):
            yield from batch.to_pylist()
    else:
        raise SourceUnavailable(f"{path.name}: unsupported file type (jsonl, json, parquet)")


def _hub_documents(decl: SourceDecl, cache_dir: str | None, locked: dict[str, Any] | None) -> Iterator[Document]:
    from ..sources.hub_lock import download

    if not decl.files:
        raise SourceUnavailable(f"source {decl.name!r}: declare the dataset files to read (`files`)")
    if locked is None:
        raise SourceUnavailable(f"source {decl.name!r}: {decl.dataset}@{decl.revision} has no lock entry; "
                                f"`tsx pipeline.ts lock fetch-calib` resolves it (a run does so on its first fetch)")
    asked = locked["request"]
    if asked["repo"] != decl.dataset or asked["ref"] != decl.revision:
        raise SourceUnavailable(f"source {decl.name!r}: the lock pins {asked['repo']}@{asked['ref']}, the profile asks "
                                f"for {decl.dataset}@{decl.revision}; run `tsx pipeline.ts lock fetch-calib`")
    for fname in decl.files:
        local = download(locked, fname, cache_dir)  # SourceError: download failed, or bytes differ from the lock
        for i, row in enumerate(_read_rows(local)):
            doc = _row_text(row, decl)
            if doc is not None and doc.text.strip():
                doc.doc_id = f"{fname}#{i}"
                yield doc


def documents(decl: SourceDecl, cache_dir: str | None = None, locked: dict[str, Any] | None = None) -> Iterator[Document]:
    """All documents of a source, in a stable order (before bucket selection and the row limit).
    `locked`: the source's lock entry (hub-files only)."""
    if decl.kind == "package-text":
        return _package_documents(decl)
    if decl.kind == "hub-files":
        return _hub_documents(decl, cache_dir, locked)
    raise SourceUnavailable(f"source {decl.name!r}: unknown kind {decl.kind!r} (package-text, hub-files)")
