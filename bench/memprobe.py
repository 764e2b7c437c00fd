"""Bench (not CI): peak memory of one distillation step at Qwen3.5-4B's width on the CPU, the figures
python/ternforge/quant/PLAN.md's memory table is fitted from. Writes bench/results/kd-memory.jsonl.

    nice -n 10 $TERNFORGE_VENV/bin/python bench/memprobe.py [--quick]
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from ternforge.quant.memprobe import Probe, measure  # noqa: E402

LIN, FULL = "linear_attention", "full_attention"
RUNS = [
    Probe(layers=(LIN,), seq_len=2048, checkpointing=False),
    Probe(layers=(LIN,), seq_len=2048, checkpointing=True),
    Probe(layers=(FULL,), seq_len=2048, checkpointing=False),
    Probe(layers=(FULL,), seq_len=2048, checkpointing=True),
    Probe(layers=(LIN,), seq_len=1024, checkpointing=False),
    Probe(layers=(LIN,), seq_len=1024, checkpointing=True),
    Probe(layers=(LIN, FULL), seq_len=2048, checkpointing=True),
    Probe(layers=(LIN,), seq_len=2048, batch=2, micro_batch=1, checkpointing=True),
    Probe(layers=(LIN,), seq_len=2048, checkpointing=True, latent_dtype="bfloat16"),
    {"vocab": 248320, "hidden": 2560, "positions": 1024, "chunk": 256},
    {"vocab": 248320, "hidden": 2560, "positions": 1024, "chunk": 512},
    # kd.hidden_cos: the same two layers without and with the term, side by side
    Probe(layers=(LIN, FULL), seq_len=2048, checkpointing=True),
    Probe(layers=(LIN, FULL), seq_len=2048, checkpointing=True, hidden_cos=50.0),
]

out = Path(__file__).resolve().parent / "results" / "kd-memory.jsonl"
with out.open("a") as f:
    for r in RUNS[int(sys.argv[1]) if len(sys.argv) > 1 else 0:]:
        res = measure(r)
        f.write(json.dumps(res, sort_keys=True) + "\n")
        f.flush()
        print(json.dumps({k: v for k, v in res.items() if k != "probe"}), flush=True)
