"""`python -m ternforge_server --dir <submission> [--engine auto|vllm|builtin] [--device auto|cpu|cuda]
[--startup-report path]`: the reasoning controller serving the OpenAI API on HOST:PORT.

The HTTP server binds at once (`/health` answers 503 while loading). A start-up thread checks the GPU, starts
the upstream process (vLLM or the built-in engine, see serving.py) on a loopback port and waits until it
answers; then `/health` turns 200 and the controller serves through it. A refusal (LoadError: the shards fail
the audit, a CUDA build finds no GPU) is written to the start-up report and ends the process with exit code
2; an upstream that dies later ends it with exit code 3. On SIGTERM/SIGINT the upstream is stopped too.
HOST (default 0.0.0.0), PORT (8000) and MODEL_NAME come from the environment unless given as flags.

Other entry points of the same module (used by the controller itself):
    python -m ternforge_server upstream --dir D --port N ...       the built-in engine (upstream.py)
    python -m ternforge_server export-bf16 --dir D --out O         the bf16 checkpoint for vLLM (engine_vllm.py)
    python -m ternforge_server exec-child -- CMD ...               exec CMD, SIGTERMed when its spawner dies
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
    from .contract import STARTUP_LIMIT_S

    p = argparse.ArgumentParser(prog="python -m ternforge_server")
    p.add_argument("--dir", required=True, help="submission directory (manifest, weights/, config, tokenizer)")
    p.add_argument("--engine", choices=["auto", "vllm", "builtin"], default=os.environ.get("TERNFORGE_ENGINE", "auto"),
                   help="auto: vLLM on a GPU (the built-in engine if vLLM cannot serve), built-in on a CPU")
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
    p.add_argument("--body-timeout", type=float, default=30.0,
                   help="seconds to receive a request's whole body after its headers (else 408)")
    p.add_argument("--reserve", action="append", default=[], metavar="KIND=N",
                   help="answer reserve in tokens for a prompt kind (choice, math, code, default)")
    p.add_argument("--threads", type=int, default=0, help="CPU intra-op threads (0: half the cores)")
    p.add_argument("--cpu-linear", choices=["decode", "plain"], default="decode",
                   help="CPU only: decode-shaped linears as W @ x^T (cpu_linear.py), or plain F.linear")
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--vllm-on-cpu", action="store_true", default=os.environ.get("TERNFORGE_VLLM_ON_CPU") == "1",
                   help="let --engine vllm start vLLM's CPU build on a CPU (bench/vllm_cpu.py; Llama models only)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM's share of GPU memory")
    p.add_argument("--startup-budget", type=float, default=float(os.environ.get("TERNFORGE_STARTUP_BUDGET", str(STARTUP_LIMIT_S))),
                   help="seconds from launch to ready that the grader allows (vLLM's share is derived from it)")
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
    from .contract import PENALTY_RANGE, SUBMISSION
    try:
        shipped = json.loads((sub / SUBMISSION["architecture"]).read_text(encoding="utf-8"))["serving"]["sampling_defaults"]
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


def context_length(sub: Path, args: argparse.Namespace) -> dict:
    """Lower args.max_model_len to the model's max_position_embeddings when it is above it (vLLM refuses a
    longer one; the built-in engine would run past the trained positions), so the controller and either
    engine use one value. {requested, model, used}."""
    from .engine_vllm import effective_max_model_len
    from .loader import LoadError

    requested = args.max_model_len
    try:
        used, model = effective_max_model_len(sub, requested)
    except (LoadError, OSError, ValueError):
        return {"requested": requested, "model": None, "used": requested}  # the loader names the fault
    if used != requested:
        _log(f"--max-model-len {requested} is above the model's max_position_embeddings {model}: serving {used}")
    args.max_model_len = used
    return {"requested": requested, "model": model, "used": used}


def exec_child(argv: list[str]) -> int:
    """Ask the kernel to SIGTERM this process when the thread that spawned it dies, then exec argv."""
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.stderr.write("exec-child needs a command\n")
        return 2
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: stop_all on exit still ends the child
    os.execv(argv[0], argv)
    return 127  # not reached


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["upstream"]:
        from .upstream import main as upstream_main

        return upstream_main(argv[1:])
    if argv[:1] == ["export-bf16"]:
        from .engine_vllm import export_main

        return export_main(argv[1:])
    if argv[:1] == ["exec-child"]:
        return exec_child(argv[1:])
    t_start = time.monotonic()
    args = parse_args(argv)
    import uvicorn

    from .app import ServerState, build_app
    from .children import Children

    sub = Path(args.dir).resolve()
    name = args.model_name or sub.name
    defaults = sampling_defaults(sub, args)
    max_len = context_length(sub, args)
    state = ServerState(model_name=name, max_model_len=args.max_model_len,
                        default_max_tokens=args.default_max_tokens, body_timeout=args.body_timeout, **defaults)
    config = uvicorn.Config(build_app(state), host=args.host, port=args.port, log_level="warning",
                            timeout_keep_alive=75, access_log=False)
    server = uvicorn.Server(config)
    children = Children()
    exit_code = {"code": 0}
    report: dict = {"submission": str(sub), "engine_requested": args.engine, "phases": {},
                    "sampling_defaults": defaults, "max_model_len": max_len}
    install_s = os.environ.get("TERNFORGE_INSTALL_SECONDS")
    if install_s:
        try:
            report["phases"]["install"] = float(install_s)
        except ValueError:
            pass

    def start_up() -> None:
        # This thread spawns the upstream and lives as long as it does: PR_SET_PDEATHSIG fires when the
        # spawning thread ends, so it must not return while the upstream serves.
        t_all = time.perf_counter()
        try:
            from .serving import build_serving

            built, proc = build_serving(sub, args, children, name, args.startup_budget, t_start)
            phases = {**report["phases"], **built.report.get("phases", {})}  # keep serve.sh's install
            report.update(built.report)
            report["phases"] = phases
            state.tokenizer, state.engine = built.tokenizer, built.engine
            state.controller = built.controller
            report["ready_s"] = round(time.perf_counter() - t_all, 3)
            report["status"] = "ready"
            _write_report(args.startup_report, report)
            fallback = report.get("engine_fallback")
            _log(f"ready: {name} on {report.get('device')} via the {report['engine']} engine"
                 + (f" (vLLM not used: {fallback['reason']})" if fallback else "")
                 + f" in {report['ready_s']} s; phases {report['phases']}")
        except Exception as e:  # LoadError or a bug: refuse to serve
            from .loader import LoadError

            state.load_error = str(e)
            if children.closing:
                return
            report["status"] = "refused"
            report["error"] = e.to_json() if isinstance(e, LoadError) else {"reason": "start-up-failed",
                                                                          "message": repr(e)}
            _write_report(args.startup_report, report)
            _log("refusing to serve: " + str(e))
            if not isinstance(e, LoadError):
                _log(traceback.format_exc())
            exit_code["code"] = 2
            server.should_exit = True
            return
        code = proc.wait()
        if not children.closing:
            state.controller = None
            state.load_error = f"the upstream exited with code {code}"
            _log(f"the {report['engine']} upstream exited with code {code}; stopping")
            exit_code["code"] = 3
            server.should_exit = True

    threading.Thread(target=start_up, name="ternforge-startup", daemon=True).start()
    try:
        server.run()
    finally:
        children.stop_all()
    return exit_code["code"]


if __name__ == "__main__":
    sys.exit(main())
