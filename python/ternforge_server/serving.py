"""Start-up assembly.

The controller process (`python -m ternforge_server`) never holds the model: it checks the GPU, picks the
engine, starts the upstream process on a loopback port, waits until that upstream answers, and then puts the
reasoning controller in front of it (`UpstreamEngine`, a client of the upstream's token-id /v1/completions).

    --engine builtin   `python -m ternforge_server upstream ...` (the built-in engine, `build_builtin` below)
    --engine vllm      vLLM's OpenAI server on a bf16 checkpoint dequantized from the audited shards
                       (engine_vllm.py); the built-in engine when vLLM is absent, cannot import, or is not
                       ready within its share of the start-up budget (logged, and named in the report)
    --engine auto      vllm on a GPU, builtin on a CPU (vLLM on a CPU only with --vllm-on-cpu, for the bench)

A build made for CUDA (torch.version.cuda set) that finds no usable GPU refuses to start (`check_gpu`):
the 4B model in float32 on a CPU would answer /health and time out every request.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .children import Children, child_env, free_port, wait_healthy
from .controller import ControllerConfig, ReasoningController

#: Tests only: pretend torch is a CUDA build of this version (the CPU wheel has torch.version.cuda None), to
#: exercise the refusal a CUDA build without a usable GPU must give. Never set in a submission.
SIMULATE_CUDA_BUILD_ENV = "TERNFORGE_TEST_SIMULATE_CUDA_BUILD"


def _log(msg: str) -> None:
    sys.stderr.write(f"[server] {msg}\n")
    sys.stderr.flush()


@dataclass
class Serving:
    engine: Any
    tokenizer: Any
    controller: ReasoningController
    report: dict


def controller_config(args: argparse.Namespace) -> ControllerConfig:
    reserve = dict(ControllerConfig().reserve)
    for item in args.reserve:
        kind, _, n = item.partition("=")
        if kind not in reserve or not n.isdigit():
            raise ValueError(f"--reserve wants KIND=N with KIND in {sorted(reserve)}, got {item!r}")
        reserve[kind] = int(n)
    return ControllerConfig(reserve=reserve, request_timeout_s=args.request_timeout)


# ------------------------------------------------------------------------------------------ the built-in engine


def build_builtin(sub: Path, args: argparse.Namespace) -> tuple[Any, Any, dict]:
    """Load the submission into the built-in BatchEngine and warm it up: (engine, tokenizer, report)."""
    import torch

    from .engine import BatchEngine, Sampling
    from .loader import load_model, resolve_device

    device = resolve_device(args.device)
    if device.type == "cpu":
        # Intra-op threads: OpenMP barriers stall every small decode op when cores are shared (measured on a
        # loaded 2-core box: 64 tokens took 16 s with 2 threads, 1.1 s with 1), so use half the cores.
        threads = args.threads or max(1, min(8, (os.cpu_count() or 2) // 2))
        torch.set_num_threads(threads)
    model, tokenizer, load_report = load_model(sub, device, args.dtype)
    report = {"engine": "builtin", **load_report.to_json()}
    if device.type == "cpu" and getattr(args, "cpu_linear", "decode") == "decode":
        from . import cpu_linear

        report["cpu_linear"] = {"mode": "decode", "modules": cpu_linear.apply(model)}
    max_batch = args.max_batch or (64 if device.type == "cuda" else 16)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    engine = BatchEngine(model, max_batch=max_batch, max_queue=args.max_queue, pad_id=int(pad)).start()
    report["max_batch"] = max_batch
    if not args.no_warmup:
        t0 = time.perf_counter()
        ids = tokenizer.encode("Hello", add_special_tokens=False) or [0]
        tokens, reason = engine.generate(ids, 4, (), None, Sampling()).wait(600)
        if reason not in ("length", "stop"):
            raise RuntimeError(f"warm-up generation failed: {reason}")
        if device.type == "cuda":
            torch.cuda.synchronize()
        report["phases"]["warmup"] = round(time.perf_counter() - t0, 4)
    return engine, tokenizer, report


# ------------------------------------------------------------------------------------------ the GPU check


def driver_version() -> str:
    """The NVIDIA driver's version from nvidia-smi, /proc, or libcuda's cuDriverGetVersion; else 'not found'."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0] + " (nvidia-smi)"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        line = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        return line.strip() + " (/proc/driver/nvidia/version)"
    except OSError:
        pass
    try:
        import ctypes

        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return f"supports CUDA {v.value // 1000}.{(v.value % 1000) // 10} (libcuda cuDriverGetVersion)"
    except OSError:
        pass
    return "not found"


def check_gpu(device_arg: str) -> str:
    """'cuda' or 'cpu' for the upstream. Raises LoadError('no-usable-gpu') when torch is a CUDA build, the
    device is auto or cuda, and no GPU can be used; the error names torch's CUDA, the driver, the reason."""
    import torch

    from .loader import LoadError

    simulated = os.environ.get(SIMULATE_CUDA_BUILD_ENV, "")
    cuda_build = simulated or torch.version.cuda
    if device_arg == "cpu":
        if cuda_build:
            _log(f"--device cpu on a CUDA {cuda_build} build: serving on the CPU as asked")
        return "cpu"
    if not cuda_build:
        if device_arg.startswith("cuda"):
            raise LoadError("no-usable-gpu", f"--device {device_arg} but torch {torch.__version__} is a CPU build",
                            torch=torch.__version__, torch_cuda=None, driver=driver_version())
        return "cpu"
    if not simulated and torch.cuda.is_available():
        return "cuda"
    try:
        torch.cuda.init()
        reason = "torch.cuda.is_available() is False"
    except Exception as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
    if simulated:
        reason = f"simulated CUDA {simulated} build ({SIMULATE_CUDA_BUILD_ENV}); {reason}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        reason += "; CUDA_VISIBLE_DEVICES is empty"
    driver = driver_version()
    raise LoadError("no-usable-gpu",
                    f"this is a CUDA build (torch {torch.__version__}, CUDA {cuda_build}) and no GPU is usable: "
                    f"{reason}; NVIDIA driver: {driver}. Refusing to serve on the CPU instead",
                    torch=torch.__version__, torch_cuda=cuda_build, driver=driver, cause=reason)


# ------------------------------------------------------------------------------------------ assembly


def start_builtin(sub: Path, args: argparse.Namespace, children: Children, device: str, name: str,
                  report_dir: Path) -> tuple[subprocess.Popen, int, dict]:
    port = free_port()
    child_report = report_dir / f"upstream-{os.getpid()}-{port}.json"
    argv = [sys.executable, "-m", "ternforge_server", "upstream", "--dir", str(sub), "--port", str(port),
            "--device", device, "--dtype", args.dtype, "--model-name", name, "--max-queue", str(args.max_queue),
            "--max-batch", str(args.max_batch), "--max-model-len", str(args.max_model_len),
            "--threads", str(args.threads), "--cpu-linear", args.cpu_linear, "--report", str(child_report)]
    if args.no_warmup:
        argv.append("--no-warmup")
    proc = children.spawn(argv, child_env())
    ok, why = wait_healthy(port, proc, timeout=1800)
    try:
        got = json.loads(child_report.read_text()) if child_report.is_file() else {}
    finally:
        child_report.unlink(missing_ok=True)
    if not ok:
        from .loader import LoadError

        err = got.get("error") or {}
        if err.get("reason"):
            raise LoadError(err["reason"], err.get("message", "the built-in upstream refused to load"),
                            **{k: v for k, v in err.items() if k not in ("reason", "message")})
        raise RuntimeError(f"the built-in upstream {why}")
    return proc, port, got


def build_serving(sub: Path, args: argparse.Namespace, children: Children, name: str,
                  budget_s: float, t_start: float) -> tuple[Serving, subprocess.Popen]:
    """Start the upstream for args.engine and put the controller in front of it."""
    from transformers import AutoTokenizer

    from .upstream_client import UpstreamEngine

    cfg = controller_config(args)
    device = check_gpu(args.device)
    engine_name = args.engine
    if engine_name == "auto":
        engine_name = "vllm" if device == "cuda" else "builtin"
        _log(f"--engine auto on {device}: {engine_name}")
    report: dict = {"device": device, "engine_requested": args.engine, "phases": {}}
    proc: subprocess.Popen | None = None
    if engine_name == "vllm":
        from .engine_vllm import VllmUnavailable, start_vllm

        try:
            notes = report["vllm_path"] = {}
            proc, port, vreport = start_vllm(sub, args, children, device, name, budget_s, t_start, notes)
            report.update(vreport)
            report["engine"] = "vllm"
        except (VllmUnavailable, OSError) as e:  # an OSError: a read-only or full disk, a missing file
            why = str(e) if isinstance(e, VllmUnavailable) else f"{type(e).__name__}: {e}"
            _log(f"vLLM not used: {why}; falling back to the built-in engine")
            report["engine_fallback"] = {"from": "vllm", "reason": why}
    if proc is None:
        report_dir = Path(args.startup_report).parent if args.startup_report else Path(sub)
        if not os.access(report_dir, os.W_OK):
            import tempfile

            report_dir = Path(tempfile.gettempdir())
        report_dir.mkdir(parents=True, exist_ok=True)
        proc, port, breport = start_builtin(sub, args, children, device, name, report_dir)
        phases = {**report["phases"], **breport.pop("phases", {})}
        report.update({k: v for k, v in breport.items() if k not in ("status", "ready_s")})
        report["phases"] = phases
        report["engine"] = "builtin"
    report["upstream"] = {"engine": report["engine"], "url": f"http://127.0.0.1:{port}", "pid": proc.pid}
    tokenizer = AutoTokenizer.from_pretrained(str(sub), local_files_only=True)
    engine = UpstreamEngine("127.0.0.1", port, name, label=f"{report['engine']} upstream")
    return Serving(engine, tokenizer, ReasoningController(engine, tokenizer, cfg), report), proc
