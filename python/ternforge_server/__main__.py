"""`python -m ternforge_server --dir <submission> [--engine builtin|vllm] [--device auto|cpu|cuda]
[--startup-report path]`.

The HTTP server binds at once (`/health` answers 503 while loading); the model is verified, loaded and
warmed up on a background thread, then `/health` turns 200. A refusal to load (LoadError) is written to the
start-up report and ends the process with exit code 2. HOST (default 0.0.0.0), PORT (8000) and MODEL_NAME
come from the environment unless given as flags.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path


def _log(msg: str) -> None:
    sys.stderr.write(f"[server] {msg}\n")
    sys.stderr.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ternforge_server")
    p.add_argument("--dir", required=True, help="submission directory (manifest, weights/, config, tokenizer)")
    p.add_argument("--engine", choices=["builtin", "vllm"], default=os.environ.get("TERNFORGE_ENGINE", "builtin"))
    p.add_argument("--device", default=os.environ.get("TERNFORGE_DEVICE", "auto"), help="auto | cpu | cuda[:N]")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, float32 on CPU) | float32 | bfloat16")
    p.add_argument("--host", default=os.environ.get("HOST", "0.0.0.0"))
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    p.add_argument("--model-name", default=os.environ.get("MODEL_NAME", ""))
    p.add_argument("--startup-report", default=os.environ.get("TERNFORGE_STARTUP_REPORT", ""))
    p.add_argument("--max-batch", type=int, default=0, help="running sequences (0: 64 on GPU, 16 on CPU)")
    p.add_argument("--max-queue", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=32768)
    p.add_argument("--default-max-tokens", type=int, default=4096)
    p.add_argument("--presence-penalty", type=float, default=None,
                   help="for requests that name none (default: architecture.json serving.sampling_defaults, else 0)")
    p.add_argument("--frequency-penalty", type=float, default=None, help="likewise")
    p.add_argument("--request-timeout", type=float, default=280.0, help="wall-clock seconds per request")
    p.add_argument("--reserve", action="append", default=[], metavar="KIND=N",
                   help="answer reserve in tokens for a prompt kind (choice, math, code, default)")
    p.add_argument("--threads", type=int, default=0, help="CPU intra-op threads (0: half the cores)")
    p.add_argument("--cpu-linear", choices=["decode", "plain"], default="decode",
                   help="CPU only: decode-shaped linears as W @ x^T (cpu_linear.py), or plain F.linear")
    p.add_argument("--no-warmup", action="store_true")
    return p.parse_args(argv)


def _write_report(path: str, report: dict) -> None:
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def sampling_defaults(sub: Path, args: argparse.Namespace) -> dict[str, float]:
    """The penalties for requests that name none: the flags, else architecture.json's
    `serving.sampling_defaults` (what the profile asked emit to ship), else none."""
    from .app import PENALTY_RANGE
    try:
        shipped = json.loads((sub / "architecture.json").read_text(encoding="utf-8"))["serving"]["sampling_defaults"]
    except (FileNotFoundError, KeyError, TypeError):
        shipped = {}
    out = {}
    for key in ("presence_penalty", "frequency_penalty"):
        flag = getattr(args, key)
        value = float(flag if flag is not None else shipped.get(key, 0.0))
        lo, hi = PENALTY_RANGE
        if not lo <= value <= hi:
            raise SystemExit(f"{key} must be between {lo:g} and {hi:g}, got {value}")
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import uvicorn

    # The HTTP event loop shares the GIL with the engine thread, whose Python between tensor ops would
    # otherwise keep /health waiting up to the default 5 ms switch interval per hand-over, several times over.
    sys.setswitchinterval(0.0005)

    from .app import ServerState, build_app

    sub = Path(args.dir).resolve()
    name = args.model_name or sub.name
    defaults = sampling_defaults(sub, args)
    state = ServerState(model_name=name, max_model_len=args.max_model_len,
                        default_max_tokens=args.default_max_tokens, **defaults)
    config = uvicorn.Config(build_app(state), host=args.host, port=args.port, log_level="warning",
                            timeout_keep_alive=75, access_log=False)
    server = uvicorn.Server(config)
    exit_code = {"code": 0}
    report: dict = {"submission": str(sub), "engine_requested": args.engine, "phases": {},
                    "sampling_defaults": defaults}
    install_s = os.environ.get("TERNFORGE_INSTALL_SECONDS")
    if install_s:
        try:
            report["phases"]["install"] = float(install_s)
        except ValueError:
            pass

    def start_up() -> None:
        t_all = time.perf_counter()
        try:
            from .serving import build_serving

            built = build_serving(sub, args)
            phases = {**report["phases"], **built.report.get("phases", {})}  # keep serve.sh's install
            report.update(built.report)
            report["phases"] = phases
            state.tokenizer, state.engine = built.tokenizer, built.engine
            state.controller = built.controller
            report["ready_s"] = round(time.perf_counter() - t_all, 3)
            report["status"] = "ready"
            _write_report(args.startup_report, report)
            _log(f"ready: {name} on {built.report.get('device')} via {built.report.get('engine')} "
                 f"in {report['ready_s']} s; phases {report['phases']}")
        except Exception as e:  # LoadError or a bug: refuse to serve
            from .loader import LoadError

            state.load_error = str(e)
            report["status"] = "refused"
            report["error"] = e.to_json() if isinstance(e, LoadError) else {"reason": "start-up-failed",
                                                                          "message": repr(e)}
            _write_report(args.startup_report, report)
            _log("refusing to serve: " + str(e))
            if not isinstance(e, LoadError):
                _log(traceback.format_exc())
            exit_code["code"] = 2
            server.should_exit = True

    threading.Thread(target=start_up, name="ternforge-startup", daemon=True).start()
    server.run()
    if state.engine is not None and hasattr(state.engine, "shutdown"):
        state.engine.shutdown()
    return exit_code["code"]


if __name__ == "__main__":
    sys.exit(main())
