"""Bench (not CI): activation-aware channel equalization (AWQ's scaling, Lin et al. 2024) before ternary GPTQ.
Each linear's input channel j is scaled by s_j = mean|x_j|^alpha (normalised by sqrt(max s * min s)) and the
inverse is folded into what produces that input, so the float model computes the same function: the RMSNorm
gains before q/k/v and gate/up, up_proj's rows before down_proj, and v_proj's rows before o_proj (one scale
per key-value head channel, shared by the query heads that read it). Then GPTQ (the profile's settings and
float budget) and the held-out comparison against the float model, for each spec.

    $TERNFORGE_VENV/bin/python bench/gptq_equalization.py MODEL_DIR CALIB_DIR [--profile smol]
        [SPEC ...]   SPEC: alpha or alpha:site,site (sites: attn, mlp, down, o; default all)

Writes bench/results/gptq-equalization.json unless --out says otherwise. Llama-shaped models (smol) only.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from ternforge.calib.tokens import load_role, sequences  # noqa: E402
from ternforge.quality import compare  # noqa: E402
from ternforge.quant.calibration import eos_of, prepare  # noqa: E402
from ternforge.quant.config import parse  # noqa: E402
from ternforge.quant.gptq import run_gptq  # noqa: E402
from ternforge.quant.model import decoder_layers, load_float_model  # noqa: E402

SITES = ("attn", "mlp", "down", "o")


@torch.no_grad()
def input_abs_mean(model: nn.Module, batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """mean |x| per input channel of every linear in the decoder layers, over the calibration batches."""
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and ".layers." in name:
            def hook(_m, inp, _out, name=name):
                x = inp[0].reshape(-1, inp[0].shape[-1]).float()
                sums[name] = sums.get(name, 0) + x.abs().sum(0)
                counts[name] = counts.get(name, 0) + x.shape[0]
            hooks.append(mod.register_forward_hook(hook))
    for b in batches:
        model(input_ids=b, use_cache=False)
    for h in hooks:
        h.remove()
    return {k: sums[k] / counts[k] for k in sums}


def scales(a: torch.Tensor, alpha: float) -> torch.Tensor:
    s = a.clamp(min=1e-5) ** alpha
    return s / (s.max() * s.min()).sqrt()


@torch.no_grad()
def equalize(model: nn.Module, stats: dict[str, torch.Tensor], alpha: float, sites: tuple[str, ...]) -> None:
    name, layers = decoder_layers(model)
    nh, nkv = model.config.num_attention_heads, model.config.num_key_value_heads
    hd = model.config.hidden_size // nh
    for i, layer in enumerate(layers):
        p = f"{name}.{i}."
        attn, mlp = layer.self_attn, layer.mlp
        if "attn" in sites:
            s = scales(stats[p + "self_attn.q_proj"], alpha).to(attn.q_proj.weight.dtype)
            layer.input_layernorm.weight.div_(s)
            for lin in (attn.q_proj, attn.k_proj, attn.v_proj):
                lin.weight.mul_(s)
        if "mlp" in sites:
            s = scales(stats[p + "mlp.gate_proj"], alpha).to(mlp.gate_proj.weight.dtype)
            layer.post_attention_layernorm.weight.div_(s)
            for lin in (mlp.gate_proj, mlp.up_proj):
                lin.weight.mul_(s)
        if "down" in sites:
            s = scales(stats[p + "mlp.down_proj"], alpha).to(mlp.down_proj.weight.dtype)
            mlp.up_proj.weight.div_(s[:, None])
            mlp.down_proj.weight.mul_(s)
        if "o" in sites:
            per_kv = stats[p + "self_attn.o_proj"].reshape(nkv, nh // nkv, hd).mean(1)
            s = scales(per_kv.reshape(-1), alpha).to(attn.v_proj.weight.dtype)
            attn.v_proj.weight.div_(s[:, None])
            attn.o_proj.weight.mul_(s.reshape(nkv, 1, hd).expand(nkv, nh // nkv, hd).reshape(-1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("calib_dir")
    ap.add_argument("specs", nargs="*", default=["0", "0.25", "0.5", "0.5:attn,mlp"])
    ap.add_argument("--profile", default="smol")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gptq-equalization.json"))
    a = ap.parse_args()
    section = json.loads((ROOT / "profiles" / f"{a.profile}.json").read_text())["stages"]["quantize"]
    cfg, _ = parse({**section, "model_dir": a.model_dir, "out_dir": "unused", "calib_dir": a.calib_dir})
    ref = load_float_model(a.model_dir, torch.float32)
    cal = cfg.calibration
    held = sequences(load_role(a.calib_dir, "heldout"), cal.seq_len, cal.sequences, eos_of(ref))
    rows = {}
    for spec in a.specs:
        alpha_s, _, sites_s = spec.partition(":")
        alpha, sites = float(alpha_s), tuple(sites_s.split(",")) if sites_s else SITES
        unknown = set(sites) - set(SITES)
        if unknown:
            sys.exit(f"{spec}: unknown sites {sorted(unknown)}; known: {SITES}")
        t0 = time.monotonic()
        prep = prepare(a.model_dir, a.calib_dir, cfg)
        if alpha:
            equalize(prep.model, input_abs_mean(prep.model, prep.batches), alpha, sites)
        equal = compare(ref, prep.model.float(), held[:cal.batch_size], cal.batch_size)["kl"]
        prep.model.to(torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32)
        _, report = run_gptq(prep, cfg)
        r = compare(ref, prep.model.float(), held, cal.batch_size)
        errs = list(report["gptq_rel_err"].values())
        rows[spec] = {"alpha": alpha, "sites": list(sites), "float_kl_after_equalization": equal,
                      "ppl_ratio": round(r["ppl_ratio"], 4), "top1_agreement": round(r["top1_agreement"], 4),
                      "kl": round(r["kl"], 4), "gptq_rel_err_mean": round(sum(errs) / len(errs), 5),
                      "seconds": round(time.monotonic() - t0, 1)}
        print(f"{spec:>14}: held-out ppl {r['ppl_ratio']:.2f}x, KL {r['kl']:.3f}, top-1 {r['top1_agreement']:.3f}, "
              f"GPTQ's mean relative output error {rows[spec]['gptq_rel_err_mean']:.4f} "
              f"(float KL after equalization {equal:.1e})", flush=True)
    Path(a.out).write_text(json.dumps({"profile": a.profile, "group_size": cfg.group_size, "rows": rows}, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
