"""Fits quant/PLAN.md's memory model to bench/results/kd-memory.jsonl (bench/memprobe.py's runs).

    python bench/memfit.py     (prints the fitted figures as JSON)

Per decoder layer kind, without checkpointing: step(T) = a * T + s, T tokens per micro-batch, `s` the
layer's straight-through copies (its weights as fp32 W_u and bf16 W, kept for the backward pass),
`a` its activations per token. Fitted from the 1024- and 2048-token runs of a linear-attention layer; the
full-attention layer's `s` is taken as the same bytes per weight. With checkpointing: each layer keeps
its input hidden state (`k` per token per layer) and one layer at a time holds the rest.
"""
import json
from pathlib import Path

rows = [json.loads(line) for line in (Path(__file__).resolve().parent / "results" / "kd-memory.jsonl").open()]


def pick(layers, seq, ckpt, batch=1, latent="float32"):
    for r in rows:
        p = r.get("probe")
        if p and tuple(p["layers"]) == layers and p["seq_len"] == seq and p["checkpointing"] == ckpt \
                and p["batch"] == batch and p["latent_dtype"] == latent:
            return r
    return None


L, F = ("linear_attention",), ("full_attention",)
out = {}
lo1, lo2 = pick(L, 1024, False), pick(L, 2048, False)
if lo1 and lo2:
    a = (lo2["step_peak_bytes"] - lo1["step_peak_bytes"]) / 1024
    s = lo2["step_peak_bytes"] - a * 2048
    out["linear_off"] = {"per_token_bytes": a, "fixed_bytes": s, "per_weight_fixed_bytes": s / lo2["latent_params"]}
    fo = pick(F, 2048, False)
    if fo:
        s_f = s / lo2["latent_params"] * fo["latent_params"]
        out["full_off"] = {"per_token_bytes": (fo["step_peak_bytes"] - s_f) / 2048, "fixed_bytes": s_f}
lc1, lc2 = pick(L, 1024, True), pick(L, 2048, True)
if lc1 and lc2:
    a = (lc2["step_peak_bytes"] - lc1["step_peak_bytes"]) / 1024
    out["linear_on"] = {"per_token_bytes": a, "fixed_bytes": lc2["step_peak_bytes"] - a * 2048}
fc = pick(F, 2048, True)
if fc:
    out["full_on_2048"] = fc["step_peak_bytes"]
two = pick(L + F, 2048, True)
if two:
    out["lin_full_on_2048"] = two["step_peak_bytes"]
mb = pick(L, 2048, True, batch=2)
if mb:
    out["lin_on_batch2_micro1"] = mb["step_peak_bytes"]
bf = pick(L, 2048, True, latent="bfloat16")
if bf:
    out["lin_on_bf16_latents"] = bf["step_peak_bytes"]
pass  # printed at the end

# --- Qwen3.5-4B at the profile's settings (quant/PLAN.md section 3) ---------------------------------------
GB = 1e9
AUDITED, EMBED, LINEAR = 3_570_052_096, 248_320 * 2_560, 3_569_090_560
G, TARGET = 32, 0.955
codes = TARGET * AUDITED / (1 - TARGET / G)  # ternary weights (latent U) at the float budget's target
scales = codes / G
fixed = {
    "teacher (bf16 text model)": (AUDITED + EMBED) * 2,
    "student frozen parts (bf16 embedding/head, float tensors)": (EMBED + AUDITED - codes) * 2,
    "scales, their gradient and 2 Adam moments (fp32)": scales * 4 * 4,
}
per_token_kept = None
if "linear_on" in out and "lin_full_on_2048" in out and "full_on_2048" in out:
    # With checkpointing, a second layer adds its kept input per token (plus nothing else at its turn).
    per_token_kept = max(0.0, (out["lin_full_on_2048"] - max(pick(L, 2048, True)["step_peak_bytes"], out["full_on_2048"])) / 2048)
    out["kept_per_token_per_layer_bytes"] = per_token_kept
if "linear_off" in out and "full_off" in out:
    lin, full = out["linear_off"], out["full_off"]
    lin_g, full_g = dict(lin), dict(full)
    # A single-micro-batch run peaks before the layer's gradient is whole (zero_grad freed it, backward
    # regrows it); with micro-batches (the profile's) the gradient is already whole when the next peak
    # comes: count one layer's gradient of U on top (measured: batch 2 in micro-batches of 1 vs batch 1).
    if mb:
        out["micro_batch_extra_bytes"] = mb["step_peak_bytes"] - pick(L, 2048, True)["step_peak_bytes"]
    lin_g["fixed_bytes"] += 4 * lo2["latent_params"]
    full_g["fixed_bytes"] += 4 * pick(F, 2048, False)["latent_params"]
    one_layer = lambda T: max(lin_g["per_token_bytes"] * T + lin_g["fixed_bytes"],
                              full_g["per_token_bytes"] * T + full_g["fixed_bytes"])
    # Each layer's kept input is a bf16 hidden state (5 KiB per token). The two-layer run adds no measurable
    # peak (the peak comes while the bottom layer is recomputed, after the upper layers' inputs are freed),
    # so the table counts twice the hidden state per layer and token as a bound.
    kept = 2_560 * 2 * 2
    head = 6.0e6 * 1024  # chunked head and KL: ~6 MB per position of a 1024-position chunk
    table = {}
    for latent, b in (("float32", 4), ("bfloat16", 2)):
        f = sum(fixed.values()) + codes * b * 4  # U, its gradient, 2 Adam moments
        rows_m = {}
        for m in (1, 2, 4, 8, 16):
            T = m * 2048
            rows_m[m] = {"no_checkpointing": (f + 24 * (lin["per_token_bytes"] * T + lin["fixed_bytes"])
                                              + 8 * (full["per_token_bytes"] * T + full["fixed_bytes"]) + head) / GB,
                         "checkpointing": (f + one_layer(T) + 32 * kept * T + head) / GB}
        table[latent] = {"fixed_GB": f / GB, "by_micro_batch_rows": rows_m}
    out["qwen3.5-4b"] = {"codes": codes, "fixed_parts_GB": {k: v / GB for k, v in fixed.items()}, "table": table}
    print(json.dumps(out["qwen3.5-4b"], indent=1))
print(json.dumps(out, indent=1))
