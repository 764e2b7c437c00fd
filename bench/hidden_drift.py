"""Bench (not CI): how far packed ternary models' hidden states are from the full-precision model's, beside
their logit KL: per decoder layer, 1 - cos(student, teacher) averaged over positions (the quantity the
distillation's `kd.hidden_cos` term trains), on windows of calibration text (what distillation saw) and of
held-out text. Each packed model is loaded by the server's loader, as the quality stage loads it. Writes
bench/results/hidden-drift.json.

    $TERNFORGE_VENV/bin/python bench/hidden_drift.py CALIB_DIR NAME=PACK_DIR [NAME=PACK_DIR ...]

CALIB_DIR: fetch-calib's output (tokens/ and data_manifest.json); PACK_DIR: a pack stage output
(quantization_manifest.json and weights/). The reference is fetch-model's checkpoint (--model-dir).
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root / "python"))
from ternforge.calib.tokens import load_role, sequences  # noqa: E402
from ternforge.quality import assemble_submission, read_manifest_eos  # noqa: E402
from ternforge.quant.distill import kd_loss  # noqa: E402
from ternforge.quant.model import load_float_model  # noqa: E402
from ternforge_server.loader import load_model  # noqa: E402


def drift(model, ids: torch.Tensor, ref) -> dict:
    o = model(input_ids=ids, output_hidden_states=True)
    per = [float((1 - F.cosine_similarity(a.float(), b.float(), dim=-1)).mean())
           for a, b in zip(o.hidden_states[1:], ref.hidden_states[1:])]
    kl = kd_loss(o.logits, ref.logits, 1.0)[1]  # KL(float || packed) per position, the figure distillation reports
    return {"kl": float(kl), "cos_distance_mean": sum(per) / len(per), "cos_distance_per_layer": per}


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("calib_dir")
    ap.add_argument("packs", nargs="+", metavar="NAME=PACK_DIR")
    ap.add_argument("--model-dir", default=str(root / ".ternforge" / "smol" / "fetch-model" / "outputs" / "model"))
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    a = ap.parse_args()
    packs = dict(p.split("=", 1) for p in a.packs)
    eos = read_manifest_eos(a.calib_dir)
    data = {role: sequences(load_role(a.calib_dir, role), a.seq_len, a.windows, eos)[:a.windows]
            for role in ("calibration", "heldout")}
    ref = load_float_model(a.model_dir)
    refs = {role: ref(input_ids=ids, output_hidden_states=True) for role, ids in data.items()}
    res: dict = {"windows": a.windows, "seq_len": a.seq_len, "packs": packs, "models": {}}
    with tempfile.TemporaryDirectory(prefix="ternforge-drift-") as tmp:
        for name, pack in packs.items():
            model = load_model(assemble_submission(pack, a.model_dir, Path(tmp) / name), "cpu", torch.float32)[0]
            res["models"][name] = {role: drift(model, ids, refs[role]) for role, ids in data.items()}
            del model
            row = res["models"][name]
            print(f"{name}: " + ", ".join(f"{role} KL {r['kl']:.3f}, 1-cos {r['cos_distance_mean']:.4f}"
                                          for role, r in row.items()), flush=True)
    (root / "bench" / "results" / "hidden-drift.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
