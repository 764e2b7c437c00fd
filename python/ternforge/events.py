"""Worker I/O convention: JSON-lines events on stdout, human logs on stderr.

The TypeScript engine drains both streams concurrently; stdout lines are parsed as events
(`{"event": "progress", "done": 3, "total": 10}`, `{"event": "result", ...}`), stderr is kept as the log.
Nothing else may print to stdout.
"""
from __future__ import annotations

import json
import sys
from typing import Any


def emit(event: str, **fields: Any) -> None:
    """Write one event as a JSON line on stdout and flush it."""
    sys.stdout.write(json.dumps({"event": event, **fields}, sort_keys=True) + "\n")
    sys.stdout.flush()


def progress(done: int, total: int, what: str = "") -> None:
    emit("progress", done=done, total=total, what=what)


def log(message: str) -> None:
    """One log line on stderr."""
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()
