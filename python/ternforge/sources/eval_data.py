"""`python -m ternforge fetch-eval`: the graded benchmarks' real splits, as locked hub files, for the eval stage.

Each declared source (role `evaluation` only: the stage's schema allows no other) names a dataset, a revision
that the engine's pins hook resolved once to a commit and file hashes (profiles/<profile>.lock.json), and the
files of each split. Each file is downloaded with huggingface_hub at that commit, refused when its bytes differ
from the lock (hub_lock.download), and copied to `<out>/<source>/<file>`. `<out>/eval-data.json` lists what is
there, as lib/eval/harness-data.ts reads it: per source its benchmark, format, commit, and each split's files
(relative to `out`) with their sha256. Only the eval stage reads these outputs (DESIGN.md: the data-role graph).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from ..events import emit, log, progress
from .checkpoint import SourceError

INDEX = "eval-data.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def run(config: dict[str, Any]) -> dict[str, Any]:
    from .hub_lock import download

    out = Path(config["out"])
    pins = config.get("pins") or {}
    sources = config.get("sources") or []
    listed = []
    total = sum(len(files) for s in sources for files in s["splits"].values())
    done = 0
    for s in sources:
        locked = pins.get(s["name"])
        if locked is None:
            raise SourceError("unlocked-source", f"eval source {s['name']!r}: {s['dataset']}@{s['revision']} has no lock entry; `tsx pipeline.ts lock fetch-eval` resolves it (a run does so on its first fetch)", source=s["name"])
        asked = locked["request"]
        if asked["repo"] != s["dataset"] or asked["ref"] != s["revision"]:
            raise SourceError("lock-mismatch", f"eval source {s['name']!r}: the lock pins {asked['repo']}@{asked['ref']}, the profile asks for {s['dataset']}@{s['revision']}; run `tsx pipeline.ts lock fetch-eval`", source=s["name"])
        splits: dict[str, list[dict[str, str]]] = {}
        for split, files in s["splits"].items():
            for name in files:
                local = download(locked, name, config.get("cache_dir"))
                dest = out / s["name"] / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(local, dest)
                splits.setdefault(split, []).append({"path": str(dest.relative_to(out)), "sha256": _sha256(dest)})
                done += 1
                progress(done, total, f"{s['name']}/{name}")
        listed.append({"name": s["name"], "benchmark": s["benchmark"], "dataset": s["dataset"], "commit": locked["commit"], "format": s["format"], "role": s["role"], "splits": splits})
        log(f"fetch-eval: {s['name']} ({s['benchmark']}) {s['dataset']}@{locked['commit'][:12]}: {sum(len(v) for v in splits.values())} file(s)")
    (out / INDEX).write_text(json.dumps({"version": 1, "sources": listed}, indent=2) + "\n")
    return {"sources": len(listed), "index": INDEX}


def main(config: dict[str, Any]) -> dict[str, Any]:
    """The worker command: a refused or failed download is a `failure` event naming the source and file."""
    try:
        return {"ok": True, **run(config)}
    except SourceError as e:
        log(str(e))
        emit("failure", reason=e.reason, message=str(e), **e.facts)
    return {"ok": False}
