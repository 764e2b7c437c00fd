"""Start-up assembly: choose the engine (vLLM when asked and possible, else built-in), load, warm up."""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .controller import ControllerConfig, ReasoningController


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


def build_serving(sub: Path, args: argparse.Namespace) -> Serving:
    import torch

    from .loader import resolve_device

    device = resolve_device(args.device)
    cfg = controller_config(args)
    if device.type == "cpu":
        # Intra-op threads: OpenMP barriers stall every small decode op when cores are shared (measured on a
        # loaded 2-core box: 64 tokens took 16 s with 2 threads, 1.1 s with 1), so use half the cores.
        import os

        threads = args.threads or max(1, min(8, (os.cpu_count() or 2) // 2))
        torch.set_num_threads(threads)
    if args.engine == "vllm":
        from .engine_vllm import try_vllm

        got = try_vllm(sub, device, args)
        if got is not None:
            engine, tokenizer, report = got
            return Serving(engine, tokenizer, ReasoningController(engine, tokenizer, cfg), report)
        _log("vLLM unavailable: falling back to the built-in engine")

    from .engine import BatchEngine, Sampling
    from .loader import load_model

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
    return Serving(engine, tokenizer, ReasoningController(engine, tokenizer, cfg), report)
