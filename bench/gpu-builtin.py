"""The built-in engine on a GPU at the exact Qwen3.5-4B text shape: per decode step and per request times.

    python bench/gpu-builtin.py                 # on a lent GPU: 16 requests x 4096 new tokens (a few minutes)
    python bench/gpu-builtin.py --tokens 512    # shorter
    python bench/gpu-builtin.py --tiny          # the same code path on a CPU in seconds (a check of the script)

Needs torch and transformers only (no vLLM, no network, no checkpoint): the model is randomly initialised on
the device (bf16) with the 4B text config (32 layers, 3:1 Gated DeltaNet / gated full attention, hidden 2560,
vocab 248320, tied head), and the same `BatchEngine` the server's built-in upstream runs decodes 16
concurrent requests with no stop ids, so each request decodes exactly --tokens tokens. Prints one line per
256 steps while running, then step-time percentiles, each request's time, and the verdict against the
grader's 300 s for the whole burst. Writes the numbers as JSON to --out when given.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

BUDGET_S = 300.0


def config_4b(vocab: int = 248320) -> dict:
    """Qwen3.5-4B's text config (the shapes of every tensor in test/fixtures/safetensors/generate.ts)."""
    return dict(vocab_size=vocab, hidden_size=2560, intermediate_size=9216, num_hidden_layers=32,
                num_attention_heads=16, num_key_value_heads=4, head_dim=256,
                linear_num_key_heads=16, linear_key_head_dim=128, linear_num_value_heads=32,
                linear_value_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=4,
                layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(32)],
                hidden_act="silu", rms_norm_eps=1e-6, max_position_embeddings=262144, tie_word_embeddings=True,
                attention_bias=False, rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                                       "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                                                       "mrope_interleaved": True})


def config_tiny() -> dict:
    cfg = config_4b(vocab=512)
    cfg.update(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_key_head_dim=32,
               linear_num_value_heads=4, linear_value_head_dim=32,
               layer_types=["linear_attention"] * 3 + ["full_attention"])
    cfg["rope_parameters"] = dict(cfg["rope_parameters"], mrope_section=[2, 1, 1])
    return cfg


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true", help="a tiny model of the same architecture, on the CPU")
    ap.add_argument("--device", default="", help="default: cuda (cpu with --tiny)")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=0, help="new tokens per request (default 4096; 64 with --tiny)")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from ternforge_server.engine import BatchEngine, cache_keyword

    device = torch.device(args.device or ("cpu" if args.tiny else "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"no usable GPU (torch {torch.__version__}, CUDA {torch.version.cuda}); use --tiny for a CPU check",
              file=sys.stderr)
        return 2
    tokens = args.tokens or (64 if args.tiny else 4096)
    if device.type == "cpu":  # the server's CPU default (serving.build_builtin): half the cores
        import os

        torch.set_num_threads(max(1, min(8, (os.cpu_count() or 2) // 2)))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    cfg = config_tiny() if args.tiny else config_4b()
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
          f"device {device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))

    t0 = time.perf_counter()
    torch.manual_seed(args.seed)
    config = Qwen3_5TextConfig(**cfg)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3_5ForCausalLM(config)
    finally:
        torch.set_default_dtype(old)
    model.eval().requires_grad_(False)
    n_params = sum(p.numel() for p in model.parameters())
    if device.type == "cuda":
        torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    print(f"model: {n_params / 1e9:.3f} B parameters, {dtype}, built in {build_s:.1f} s; forward takes its cache "
          f"as `{cache_keyword(model)}`")

    step_s: list[float] = []
    running: list[int] = []

    class TimedEngine(BatchEngine):
        def _decode_step(self) -> None:  # each step ends in a .tolist() of the sampled ids: already synchronous
            t = time.perf_counter()
            super()._decode_step()
            step_s.append(time.perf_counter() - t)
            running.append(len(self._rows))
            if len(step_s) % 256 == 0:
                recent = step_s[-256:]
                print(f"  step {len(step_s)}: {len(self._rows)} running, median {statistics.median(recent) * 1e3:.1f} ms"
                      f" over the last 256", flush=True)

    engine = TimedEngine(model, max_batch=max(16, args.requests), max_queue=args.requests + 1,
                         max_prefill_tokens=args.requests * args.prompt_len).start()
    try:
        g = torch.Generator().manual_seed(args.seed)
        warm = engine.generate(torch.randint(0, cfg["vocab_size"], (args.prompt_len,), generator=g).tolist(), 8)
        warm.wait(600)
        step_s.clear()
        running.clear()
        prompts = [torch.randint(0, cfg["vocab_size"], (args.prompt_len,), generator=g).tolist()
                   for _ in range(args.requests)]
        t0 = time.perf_counter()
        streams = [engine.generate(p, tokens) for p in prompts]
        done_at = []
        for s in streams:
            got, reason = s.wait(3600)
            done_at.append((time.perf_counter() - t0, len(got), reason))
        wall = time.perf_counter() - t0
    finally:
        engine.shutdown()

    full = [s for s, r in zip(step_s, running) if r == args.requests] or step_s
    q = statistics.quantiles(full, n=100, method="inclusive") if len(full) > 2 else full * 99
    total = sum(n for _, n, _ in done_at)
    result = {
        "device": str(device), "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__, "transformers": transformers.__version__, "tiny": args.tiny,
        # the submission's serving set has no flash-linear-attention, so its built-in engine decodes with
        # transformers' own PyTorch delta rule; bench/gpu-check.sh runs this without fla for that reason
        "flash_linear_attention": importlib.util.find_spec("fla") is not None,
        "params": n_params, "dtype": str(dtype), "requests": args.requests, "tokens_per_request": tokens,
        "prompt_len": args.prompt_len, "build_s": round(build_s, 2), "wall_s": round(wall, 2),
        "tokens": total, "tok_s": round(total / wall, 1), "steps": len(step_s),
        "step_ms_at_full_batch": {"n": len(full), "p50": round(q[49] * 1e3, 2), "p90": round(q[89] * 1e3, 2),
                                  "p99": round(q[98] * 1e3, 2), "max": round(max(full) * 1e3, 2),
                                  "mean": round(statistics.fmean(full) * 1e3, 2)},
        "requests_s": [round(t, 2) for t, _, _ in done_at],
        "finish": sorted({r for _, _, r in done_at}),
        "within_300s": wall < BUDGET_S,
        "max_step_ms_for_300s": round(BUDGET_S / tokens * 1e3, 1),
    }
    print(f"\n{args.requests} requests x {tokens} tokens: {wall:.1f} s wall, {total} tokens, {result['tok_s']} tok/s, "
          f"{len(step_s)} decode steps")
    s = result["step_ms_at_full_batch"]
    print(f"decode step at batch {args.requests}: p50 {s['p50']} ms, p90 {s['p90']} ms, p99 {s['p99']} ms, "
          f"max {s['max']} ms, mean {s['mean']} ms (n={s['n']})")
    for i, (t, n, r) in enumerate(done_at):
        print(f"  request {i:2d}: {n} tokens, finished at {t:.2f} s ({r})")
    print(f"verdict: the burst {'fits' if result['within_300s'] else 'does NOT fit'} in {BUDGET_S:.0f} s "
          f"(a step must stay under about {result['max_step_ms_for_300s']} ms for {tokens} tokens)")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
