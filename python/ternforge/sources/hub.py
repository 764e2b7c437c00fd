"""`hub`: the locked revision of a hub repository (Qwen/Qwen3.5-4B), downloaded or copied from a local path.

Download mode needs the stage's lock entry (`locked`: the commit the profile's `revision` resolved to and
every file's size and sha256 or git blob sha1 as the hub lists them; see hub_lock.py and the engine's
`lock` command). Each locked file is fetched with `hf_hub_download` at the locked commit and refused when
its bytes differ from the lock. Local mode needs a full 40-hex commit id and copies from a directory whose
revision is known: a hub cache snapshot directory (`.../snapshots/<commit>/`) or one holding a `REVISION`
file with the commit. Every copied file is hashed while it is copied; when the profile lists expected sha256
values, every copied file must be listed and match, or the copy is refused (the file is removed, nothing half-written stays). A checkpoint stored as one
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
from .hub_lock import ALLOW_PATTERNS  # the files fetch-model copies

COMMIT = re.compile(r"^[0-9a-f]{40}$")


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


def fetch(out_dir: Path, repo: str, revision: str, expected_sha256: dict[str, str] | None = None, local_path: str | None = None,
          locked: dict[str, Any] | None = None, cache_dir: str | None = None) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    if local_path:
        check_revision(revision)
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

    if locked is None:
        raise SourceError("unlocked", f"{repo}@{revision} has no lock entry; `tsx pipeline.ts lock --profile <profile> fetch-model` "
                          f"resolves it (a run does so on its first fetch)", repo=repo, ref=revision)
    asked = locked["request"]
    if asked["repo"] != repo or asked["ref"] != revision:
        raise SourceError("stale-lock", f"the lock pins {asked['repo']}@{asked['ref']}, the profile asks for {repo}@{revision}",
                          expected=f"{repo}@{revision}", actual=f"{asked['repo']}@{asked['ref']}")
    import huggingface_hub

    from .hub_lock import download  # network only here

    with tempfile.TemporaryDirectory(prefix="hub-", dir=out_dir) as tmp:
        names = sorted(locked["files"])
        log(f"hub: downloading {repo}@{revision} = commit {locked['commit']} ({len(names)} files, checked against the lock)")
        for i, name in enumerate(names, start=1):
            path = download(locked, name, cache_dir)
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(path, Path(tmp) / name)
            progress(i, len(names), f"download {name}")
        origin = {"kind": "hub", "repo": repo, "ref": revision, "revision": locked["commit"], "huggingface_hub": huggingface_hub.__version__}
        return _copy_tree(Path(tmp), out_dir, expected_sha256, origin, lock_checked=True)


def _copy_tree(src: Path, out_dir: Path, expected: dict[str, str] | None, origin: dict[str, Any], lock_checked: bool = False) -> dict[str, Any]:
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
    return write_source_record(out_dir, base, extra={"renamed": renames, "hash_checked": bool(expected) or lock_checked})


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
        locked=config.get("locked") or None,
        cache_dir=config.get("cache_dir") or None,
    )
    return {"source": "hub", "tensor_count": record["tensor_count"], "total_size": record["total_size"], "origin": record["origin"]}

