"""Bench (not CI): which matrices the float budget should keep, by two measures of sensitivity.

The quantize stage ranks each ternary-eligible matrix by its own calibration output error under TWN
rounding, per parameter (floatplan.twn_output_error: "output error"). This bench also ranks them by what
the whole model loses when that matrix alone is rounded, with TWN (--score twn) or with GPTQ on the
calibration batches' inputs (--score gptq): KL(float || model) per position, on windows of calibration text
and of the teacher's chat transcripts, per parameter ("model KL"). It prints the plans floatplan.allocate
makes from each score (at each group size of --groups and each target fraction of --targets), then runs
GPTQ alone with each plan and compares the results with the float model on held-out documentation
(fetch-calib's heldout role) and held-out chat windows (windows of the transcripts the scores did not see).

    $TERNFORGE_VENV/bin/python bench/float_sensitivity.py MODEL_DIR CALIB_DIR [--profile smol]
        [--text 4] [--chat 4] [--chat-prompts 16] [--chat-self-prompts 16] [--spread 20]
        [--score twn|gptq] [--groups 32,64] [--targets 0.955] [--out F]

Writes bench/results/float-sensitivity.json unless --out says otherwise.
"""
import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from ternforge.calib.tokens import load_role, sequences  # noqa: E402
from ternforge.quality import compare  # noqa: E402
from ternforge.quant import twn  # noqa: E402
from ternforge.quant.calibration import eos_of, prepare  # noqa: E402
from ternforge.quant.chatdata import windows  # noqa: E402
from ternforge.quant.config import parse  # noqa: E402
from ternforge.quant.distill import kd_sequences  # noqa: E402
from ternforge.quant.floatplan import AllocConfig, allocate  # noqa: E402
from ternforge.quant.gptq import GPTQ, GPTQConfig, run_gptq  # noqa: E402
from ternforge.quant.model import DTYPES, load_float_model  # noqa: E402


@torch.no_grad()
def logprobs(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(model(input_ids=ids, use_cache=False).logits.float(), -1)


@torch.no_grad()
def model_kl(model: torch.nn.Module, ids: torch.Tensor, ref: torch.Tensor) -> float:
    return float(F.kl_div(logprobs(model, ids), ref, log_target=True, reduction="sum")) / (ids.shape[0] * ids.shape[1])


@torch.no_grad()
def capture_hessians(model: torch.nn.Module, batches: list[torch.Tensor], names: dict[str, str]) -> dict[str, GPTQ]:
    """Each named linear's GPTQ Hessian from the float model's inputs on the calibration batches."""
    mods = dict(model.named_modules())
    hs = {m: GPTQ(mods[m].weight) for m in names}
    hooks = [mods[m].register_forward_hook(lambda _mod, inp, _out, m=m: hs[m].add_batch(inp[0])) for m in names]
    try:
        for b in batches:
            model(input_ids=b, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return hs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("calib_dir")
    ap.add_argument("--profile", default="smol")
    ap.add_argument("--text", type=int, default=4, help="calibration-text windows of kd.seq_len scored on")
    ap.add_argument("--chat", type=int, default=4, help="chat windows of kd.seq_len scored on")
    ap.add_argument("--chat-prompts", type=int, default=16)
    ap.add_argument("--chat-self-prompts", type=int, default=16)
    ap.add_argument("--spread", type=int, default=20,
                    help="chat windows spread evenly over the transcripts: the even ones (up to --chat) are scored "
                         "on, the odd ones held out")
    ap.add_argument("--score", choices=("twn", "gptq"), default="twn",
                    help="round the one matrix with TWN, or with GPTQ on the calibration batches' inputs")
    ap.add_argument("--groups", type=lambda v: [int(x) for x in v.split(",")], default=[32, 64])
    ap.add_argument("--targets", type=lambda v: [float(x) for x in v.split(",")], default=[0.955])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "float-sensitivity.json"))
    a = ap.parse_args()
    section = json.loads((ROOT / "profiles" / f"{a.profile}.json").read_text())["stages"]["quantize"]
    cfg, _ = parse({**section, "model_dir": a.model_dir, "out_dir": "unused", "calib_dir": a.calib_dir})
    kd = dataclasses.replace(cfg.kd, chat_prompts=a.chat_prompts, chat_self_prompts=a.chat_self_prompts)
    t0 = time.monotonic()
    prep = prepare(a.model_dir, a.calib_dir, cfg)  # cfg.dtype: the scores are measured in the stage's dtype
    model = prep.model
    data = kd_sequences(model, a.model_dir, a.calib_dir, kd, eos_of(model), cfg.device)
    chat = windows(data.transcripts, kd.seq_len)
    pick = torch.linspace(0, chat.shape[0] - 1, a.spread).round().long()
    scored_chat, held_chat = chat[pick[::2][:a.chat]], chat[pick[1::2]]
    ids = torch.cat([data.seqs[:a.text], scored_chat])
    ref = logprobs(model, ids)
    print(f"{len(data.transcripts)} transcripts; scoring on {ids.shape[0]} windows of {kd.seq_len} "
          f"({time.monotonic() - t0:.0f} s)", flush=True)

    g = cfg.group_size
    mods = dict(model.named_modules())
    cands = {m: s for m, s in prep.m2s.items() if s in prep.allocation.scores}
    if not cands:
        sys.exit(f"profile {a.profile}: no matrix has an output-error score (quantize.allocation.sensitivity off, "
                 "or no calibration batches), so there is nothing to compare")
    hessians = capture_hessians(model, prep.batches, cands) if a.score == "gptq" else {}
    gcfg = GPTQConfig(group_size=g, blocksize=cfg.gptq.blocksize, percdamp=cfg.gptq.percdamp,
                      actorder=cfg.gptq.actorder, scale_search=cfg.gptq.scale_search)
    kl_scores: dict[str, float] = {}
    kl_raw: dict[str, float] = {}
    for i, (m, s) in enumerate(sorted(cands.items())):
        lin = mods[m]
        W = lin.weight.data.clone()
        if a.score == "gptq":
            res = hessians.pop(m).fasterquant(W, gcfg)
            W_q, scale = res.W_q, res.scale
        else:
            W_q, scale = twn.quantize(W.float(), twn.TWNConfig(group_size=g))
        lin.weight.data.copy_(twn.dequantize(W_q, scale, g).to(W.dtype))
        kl_raw[s] = model_kl(model, ids, ref)
        kl_scores[s] = kl_raw[s] / W.numel()
        lin.weight.data.copy_(W)
        if i % 20 == 0:
            print(f"  {i + 1}/{len(cands)} {s}: KL {kl_raw[s]:.4f} ({time.monotonic() - t0:.0f} s)", flush=True)

    out_scores = dict(prep.allocation.scores)
    shapes = prep.shapes
    al = cfg.allocation

    def plan(scores: dict[str, float], group: int, target: float):
        return allocate(shapes, AllocConfig(group_size=group, target_fraction=target,
                                            min_relative_score=al.min_relative_score, keep_float=cfg.keep_float), scores)

    # name -> (group size, plan); the stage's own plan first
    plans = {f"output error g{g} t{al.target_fraction}": (g, prep.allocation)}
    for group in a.groups:
        for target in a.targets:
            plans[f"model KL g{group} t{target}"] = (group, plan(kl_scores, group, target))
            if group != g and target == al.target_fraction:
                # the stage's own plan at that group size scores its output error with that rounding
                plans[f"output error g{group} t{target}"] = (group, prepare(
                    a.model_dir, a.calib_dir, dataclasses.replace(cfg, group_size=group)).allocation)
    for k, (_, p) in plans.items():
        print(f"{k}: fraction {p.fraction:.4f}, float {p.chosen_float}", flush=True)
    rank_out = sorted(out_scores, key=lambda n: -out_scores[n])
    rank_kl = sorted(kl_scores, key=lambda n: -kl_scores[n])
    print("top 12 by model KL per parameter:", *(f"{n} KL {kl_raw[n]:.4f}" for n in rank_kl[:12]), sep="\n  ")

    # GPTQ alone with each plan, against the float model (float32) on held-out docs and chat.
    del model, prep
    fref = load_float_model(a.model_dir, torch.float32)
    held_docs = sequences(load_role(a.calib_dir, "heldout"), cfg.calibration.seq_len, cfg.calibration.sequences,
                          eos_of(fref))
    rows = {}
    for name, (group, allocation) in plans.items():
        gcfg = dataclasses.replace(cfg, group_size=group)
        p = prepare(a.model_dir, a.calib_dir, gcfg)
        p.allocation = allocation
        run_gptq(p, gcfg)
        p.model.float()
        row = {"float": allocation.chosen_float, "fraction": round(allocation.fraction, 5)}
        for what, seqs in (("heldout_docs", held_docs), ("heldout_chat", held_chat)):
            r = compare(fref, p.model, seqs, 4)
            row[what] = {k: round(r[k], 4) for k in ("ppl_ratio", "top1_agreement", "kl")}
        rows[name] = row
        print(f"GPTQ alone, plan by {name}: docs {row['heldout_docs']} | chat {row['heldout_chat']}", flush=True)
        del p
    out = {"profile": a.profile, "group_size": g, "score": a.score, "scored_windows": {"text": a.text, "chat": a.chat, "seq_len": kd.seq_len},
           "transcripts": len(data.transcripts), "heldout_chat_windows": int(held_chat.shape[0]),
           "plans": {k: {"fraction": round(p.fraction, 5), "float": p.chosen_float} for k, (_, p) in plans.items()},
           "model_kl": {n: round(kl_raw[n], 5) for n in rank_kl},
           "top_by_model_kl": [{"tensor": n, "kl": round(kl_raw[n], 5), "kl_rank": i, "output_error_rank": rank_out.index(n)}
                               for i, n in enumerate(rank_kl[:20])],
           "rank_correlation": spearman(rank_out, rank_kl),
           "gptq_alone": rows, "wall_s": round(time.monotonic() - t0)}
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {a.out}")


def spearman(a: list[str], b: list[str]) -> float:
    n = len(a)
    pos = {x: i for i, x in enumerate(b)}
    d2 = sum((i - pos[x]) ** 2 for i, x in enumerate(a))
    return round(1 - 6 * d2 / (n * (n * n - 1)), 4)


if __name__ == "__main__":
    main()
