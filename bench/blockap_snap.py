"""Bench (not CI): does the distillation after Block-AP need the latents set to their codes? From one Block-AP
output (a quantize work dir's `block-ap/layer-<i>.safetensors`: each layer's U and scales as Adam left them),
the student is distilled for a few steps on calibration text with smol's recipe (rates, cosine schedule,
hidden_cos, norm gains, stop weight) twice: with the latents as they were and with each set to its code
(`TernaryLinear.snap`; the weights T * scale are the same). Prints the share of latents within 0.1 of a
rounding threshold and both KL series.

    $TERNFORGE_VENV/bin/python bench/blockap_snap.py BLOCK_AP_DIR MODEL_DIR CALIB_DIR [--steps 16]

Stop 28 ran it on the 380-step Block-AP candidate's work dir (docs/experiments.md, "Block-AP").
"""
import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from ternforge.calib.tokens import load_role, sequences  # noqa: E402
from ternforge.quant.config import KDConfig  # noqa: E402
from ternforge.quant.distill import distill, make_student, tuned_floats  # noqa: E402
from ternforge.quant.interchange import TernaryTensor  # noqa: E402
from ternforge.quant.model import decoder_layers, load_float_model  # noqa: E402

RECIPE = KDConfig(steps=480, lr=0.025, scale_lr=4e-4, norm_lr=3e-3, schedule="cosine", warmup=3, hidden_cos=50,
                  batch_size=4, seq_len=128, grad_checkpointing=False, stop_weight=20, checkpoint_every=1000)


def latents(block_dir: Path, layers_name: str) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(U, scale) by module name from every layer file."""
    out = {}
    for f in sorted(block_dir.glob("layer-*.safetensors")):
        i = f.stem.split("-")[1]
        t = load_file(str(f))
        for key in t:
            if key.endswith(".U"):
                local = key[:-2]
                out[f"{layers_name}.{i}.{local}"] = (t[key], t[local + ".scale"])
    return out


def run(block_dir: Path, model_dir: str, calib_dir: str, steps: int, snap: bool) -> tuple[float, list[float]]:
    torch.manual_seed(0)
    teacher = load_float_model(model_dir, torch.bfloat16)
    for p in teacher.parameters():
        p.requires_grad_(False)
    model = load_float_model(model_dir, torch.bfloat16)
    saved = latents(block_dir, decoder_layers(model)[0])
    init = {n: TernaryTensor(W_q=torch.round(torch.clamp(U, -1, 1)).to(torch.int8), scale=s, group_size=32)
            for n, (U, s) in saved.items()}
    student = make_student(model, init)
    near = sum(int(((U.abs() - 0.5).abs() < 0.1).sum()) for U, _ in saved.values()) / sum(U.numel() for U, _ in saved.values())
    if not snap:
        with torch.no_grad():
            for n, tl in student.items():
                tl.U.copy_(saved[n][0])
    seqs = sequences(load_role(calib_dir, "calibration"), RECIPE.seq_len, 400, 0)
    history = distill(teacher, model, student, seqs, RECIPE, first=0, last=steps, tuned=tuned_floats(model, RECIPE))
    return near, [round(r["kl"], 3) for r in history]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("block_dir", type=Path)
    ap.add_argument("model_dir")
    ap.add_argument("calib_dir")
    ap.add_argument("--steps", type=int, default=16)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for snap in (False, True):
        near, kl = run(a.block_dir, a.model_dir, a.calib_dir, a.steps, snap)
        print(json.dumps({"snapped": snap, "near_threshold": round(near, 4), "kl": kl}), flush=True)


if __name__ == "__main__":
    main()
