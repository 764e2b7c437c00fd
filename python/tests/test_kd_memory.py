"""Gradient checkpointing keeps a distillation step's memory within the measured model (quant/PLAN.md).

The model, fitted on Qwen3.5-4B's width (bench/memprobe.py, bench/results/kd-memory.jsonl): with
checkpointing a step keeps each decoder layer's input hidden state ([tokens, hidden]) plus one layer's
intermediates while that layer is recomputed; without it, every layer's intermediates at once. Here the
same at a small width, every figure measured side by side in fresh processes (peak resident set of the
second step above the steady state, memprobe.py): one layer of each kind without checkpointing gives the
one-layer figure; an 8-layer student must then stay within that plus 8 hidden states per token with
checkpointing on, and exceeds it with checkpointing off (so this test fails if checkpointing stops working).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ternforge.quant.memprobe import Probe, measure

SMALL = tuple(sorted({"hidden_size": 256, "intermediate_size": 768, "num_attention_heads": 2, "num_key_value_heads": 1,
                      "head_dim": 128, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                      "linear_key_head_dim": 64, "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4}.items()))
LIN, FULL = "linear_attention", "full_attention"
LAYERS = (LIN, LIN, LIN, FULL, LIN, LIN, LIN, FULL)
SEQ = 512


def _probe(layers: tuple[str, ...], checkpointing: bool) -> int:
    return measure(Probe(layers=layers, seq_len=SEQ, checkpointing=checkpointing, dims=SMALL, dtype="float32",
                         logit_chunk=128), timeout=900)["step_peak_bytes"]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_checkpointing_keeps_a_step_within_the_measured_model() -> None:
    one_layer = max(_probe((LIN,), False), _probe((FULL,), False))
    hidden = dict(SMALL)["hidden_size"]
    kept = len(LAYERS) * SEQ * hidden * 4  # one fp32 hidden state per layer and token
    allowed = 1.3 * (one_layer + 2 * kept) + (8 << 20)  # margins: allocator rounding, the chunked head
    on = _probe(LAYERS, True)
    off = _probe(LAYERS, False)
    assert on <= allowed, f"checkpointing on: {on / 2**20:.1f} MiB > allowed {allowed / 2**20:.1f} MiB"
    assert off > allowed, f"without checkpointing the step should exceed the model: {off / 2**20:.1f} MiB"
    assert off > 2.5 * on
