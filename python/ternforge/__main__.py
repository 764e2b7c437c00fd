"""`python -m ternforge <command> --config <file.json>`.

Each command is a `main(config: dict) -> dict | None` function named in COMMANDS as "module:function",
imported only when called (no import-time effects). Its return value becomes the final `result` event.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback

from .events import emit, log

COMMANDS: dict[str, str] = {
    "fetch-model": "ternforge.sources.fetch:main",
    "hub-resolve": "ternforge.sources.hub_lock:main",
    "quantize": "ternforge.quant.run:main",
    "fetch-calib": "ternforge.calib.fetch:main",
    "quality": "ternforge.quality:main",
    "preflight": "ternforge.preflight:main",
    "harness": "ternforge.harness:main",
    "math-verify": "ternforge.mathcheck:main",
    "fetch-eval": "ternforge.sources.eval_data:main",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ternforge")
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("--config", required=True, help="JSON file with the command's parameters")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as f:
        config = json.load(f)
    module_name, func_name = COMMANDS[args.command].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    try:
        result = func(config)
    except KeyboardInterrupt:
        log(f"{args.command}: interrupted")
        return 130
    except Exception:  # a worker bug or bad input: the tail of stderr reaches the user
        log(traceback.format_exc())
        return 1
    emit("result", **(result or {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
