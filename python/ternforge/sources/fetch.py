"""`python -m ternforge fetch-model --config <json>`: one command, the source chosen by `source`.

Config: {"source": "tiny" | "smol" | "hub", "out_dir": ..., plus the source's own fields}. An expected
failure (bad revision, hash mismatch, ...) is reported as a `failure` event with its reason and facts and
the command returns {"ok": false}; the stage turns that into a stage-failed Failure.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from ..events import emit, log
from .checkpoint import SourceError

SOURCES: dict[str, str] = {
    "tiny": "ternforge.sources.tiny",
    "smol": "ternforge.sources.smol",
    "hub": "ternforge.sources.hub",
}


def main(config: dict[str, Any]) -> dict[str, Any]:
    source = str(config.get("source"))
    if source not in SOURCES:
        emit("failure", reason="unknown-source", message=f"unknown source {source!r}", expected=sorted(SOURCES), actual=source)
        return {"ok": False}
    Path(config["out_dir"]).mkdir(parents=True, exist_ok=True)
    try:
        result = importlib.import_module(SOURCES[source]).main(config)
    except SourceError as e:
        log(str(e))
        emit("failure", reason=e.reason, message=str(e), **e.facts)
        return {"ok": False}
    return {"ok": True, **result}
