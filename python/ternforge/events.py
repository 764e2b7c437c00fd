"""Worker I/O convention: JSON-lines events on stdout, human logs on stderr.

The TypeScript engine drains both streams concurrently; stdout lines are parsed as events
(`{"event": "progress", "done": 3, "total": 10}`, `{"event": "result", ...}`), stderr is kept as the log.
Nothing else may print to stdout.

Under torchrun (quant/dist.py) every rank shares those two streams: only rank 0 emits events, so the stage
reads one result and one progress line per step, and each log line names its rank.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any


def emit(event: str, **fields: Any) -> None:
    """Write one event as a JSON line on stdout and flush it (rank 0's only, under torchrun)."""
    if os.environ.get("RANK", "0") != "0":
        return
    sys.stdout.write(json.dumps({"event": event, **fields}, sort_keys=True) + "\n")
    sys.stdout.flush()


def progress(done: int, total: int, what: str = "") -> None:
    emit("progress", done=done, total=total, what=what)


def log(message: str) -> None:
    """One log line on stderr; under torchrun with several ranks each of its lines starts with `[rank N] `."""
    if os.environ.get("WORLD_SIZE", "1") != "1":
        tag = f"[rank {os.environ.get('RANK', '?')}] "
        message = "\n".join(tag + line for line in message.rstrip("\n").split("\n"))
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()
