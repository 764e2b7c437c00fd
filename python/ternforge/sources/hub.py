"""`hub`: the pinned revision of a hub repository (Qwen/Qwen3.5-4B), downloaded or copied from a local path.

The revision must be a full 40-hex commit id. Download mode calls `huggingface_hub.snapshot_download` at that
commit. Local mode copies from a directory whose revision is known: a hub cache snapshot directory
(`.../snapshots/<commit>/`) or one holding a `REVISION` file with the commit. Every copied file is hashed
while it is copied; when the profile lists expected sha256 values, every copied file must be listed and
match, or the copy is refused (the file is removed, nothing half-written stays). A checkpoint stored as one
`model.safetensors` is renamed to `model-00001-of-00001.safetensors` and given an index, so every source
has the same layout.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from ..events import log, progress
from .checkpoint import INDEX_NAME, SourceError, shard_name, write_json, write_source_record

COMMIT = re.compile(r"^[0-9a-f]{40}$")
# The files fetch-model copies: weights, index, config, tokenizer, chat template, processor configs.
ALLOW_PATTERNS = (
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "*.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
)


def check_revision(revision: str) -> None:
    if not COMMIT.match(revision):
        raise SourceError(
            "bad-revision",
            f"revision {revision!r} is not a full 40-hex commit id (branches and tags move; pin the commit)",
            expected="40 lowercase hex digits",
            actual=revision,
        )


def local_revision(path: Path) -> str | None:
    """The commit a local directory holds: its name under `snapshots/`, or its REVISION file."""
    if path.parent.name == "snapshots" and COMMIT.match(path.name):
        return path.name
    marker = path / "REVISION"
    if marker.is_file():
        return marker.read_text(encoding="utf-8").strip()
    return None


def selected_files(src: Path) -> list[str]:
    return sorted(
        p.relative_to(src).as_posix()
        for p in src.rglob("*")
        if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in ALLOW_PATTERNS) and "/." not in "/" + p.relative_to(src).as_posix()
    )


def copy_verified(src: Path, dst: Path, expected: str | None) -> str:
    """Copy `src` to `dst` through a temp file, hashing on the way; refuse a hash mismatch. Returns sha256."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
                out.write(chunk)
        actual = h.hexdigest()
        if expected is not None and actual != expected:
            raise SourceError("hash-mismatch", f"{dst.name}: expected sha256 {expected}, actual {actual}", file=dst.name, expected=expected, actual=actual)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dst)
        return actual
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fetch(out_dir: Path, repo: str, revision: str, expected_sha256: dict[str, str] | None = None, local_path: str | None = None) -> dict[str, Any]:
    check_revision(revision)
    out_dir.mkdir(parents=True, exist_ok=True)
    if local_path:
        src = Path(local_path)
        if not src.is_dir():
            raise SourceError("missing-local-path", f"local path {src} is not a directory", path=str(src))
        found = local_revision(src)
        if found != revision:
            raise SourceError(
                "revision-mismatch",
                f"{src} holds revision {found or 'unknown (no snapshots/<commit> name, no REVISION file)'}, the profile pins {revision}",
                path=str(src),
                expected=revision,
                actual=found,
            )
        origin = {"kind": "local", "repo": repo, "revision": revision, "path": str(src.resolve())}
        return _copy_tree(src, out_dir, expected_sha256, origin)

    from huggingface_hub import snapshot_download  # network only here

    with tempfile.TemporaryDirectory(prefix="hub-", dir=out_dir) as tmp:
        log(f"hub: downloading {repo}@{revision}")
        snapshot_download(repo_id=repo, revision=revision, local_dir=tmp, allow_patterns=list(ALLOW_PATTERNS))
        import huggingface_hub

        origin = {"kind": "hub", "repo": repo, "revision": revision, "huggingface_hub": huggingface_hub.__version__}
        return _copy_tree(Path(tmp), out_dir, expected_sha256, origin)


def _copy_tree(src: Path, out_dir: Path, expected: dict[str, str] | None, origin: dict[str, Any]) -> dict[str, Any]:
    names = selected_files(src)
    if "config.json" not in names:
        raise SourceError("missing-file", f"{src} has no config.json", path=str(src / "config.json"))
    if expected:
        unlisted = [n for n in names if n not in expected]
        if unlisted:
            raise SourceError("unlisted-file", f"{unlisted[0]} is not in the profile's expected hashes ({len(unlisted)} unlisted)", file=unlisted[0], unlisted=unlisted)
        missing = sorted(set(expected) - set(names))
        if missing:
            raise SourceError("missing-file", f"{missing[0]} is listed in the profile but absent from the source", file=missing[0], missing=missing)
    model_dir = out_dir / "model"
    renames: dict[str, str] = {}
    single = "model.safetensors" in names and "model.safetensors.index.json" not in names
    for i, name in enumerate(names, start=1):
        target = shard_name(1, 1) if (single and name == "model.safetensors") else name
        if target != name:
            renames[name] = target
        copy_verified(src / name, model_dir / target, expected.get(name) if expected else None)
        progress(i, len(names), name)
    if single:
        _write_single_index(model_dir)
    base = {"base_model": origin["repo"], **origin}
    return write_source_record(out_dir, base, extra={"renamed": renames, "hash_checked": bool(expected)})


def _write_single_index(model_dir: Path) -> None:
    from safetensors import safe_open

    shard = shard_name(1, 1)
    total = 0
    weight_map = {}
    with safe_open(str(model_dir / shard), framework="pt") as f:
        for name in f.keys():
            sl = f.get_slice(name)
            n = 1
            for d in sl.get_shape():
                n *= d
            total += n * {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I8": 1, "U8": 1, "I32": 4, "I64": 8}[sl.get_dtype()]
            weight_map[name] = shard
    write_json(model_dir / INDEX_NAME, {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})


def main(config: dict[str, Any]) -> dict[str, Any]:
    record = fetch(
        Path(config["out_dir"]),
        repo=str(config["repo"]),
        revision=str(config["revision"]),
        expected_sha256=config.get("expected_sha256") or None,
        local_path=config.get("local_path") or None,
    )
    return {"source": "hub", "tensor_count": record["tensor_count"], "total_size": record["total_size"], "origin": record["origin"]}

