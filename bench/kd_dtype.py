"""Bench (not CI): what the quantize section's `dtype` costs on this CPU, float32 against bfloat16, side by
side in one process: a distillation step (TWN-initialised student, the smol profile's batch of 4 x 128, no
layer checkpointing) and the teacher's greedy chat transcripts (16 requests at batch 16), alternating the two
dtypes round by round. Also how far the bfloat16 teacher's transcripts differ from the float32 ones (share of
identical transcripts; both are greedy). Writes bench/results/kd-dtype.json.

    nice $TERNFORGE_VENV/bin/python bench/kd_dtype.py [MODEL_DIR] [--rounds N]

MODEL_DIR: a fetched checkpoint, default .ternforge/smol/fetch-model/outputs/model (`tsx pipeline.ts
fetch-model --profile smol`).
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root / "python"))
from ternforge.quant import twn  # noqa: E402
from ternforge.quant.chatdata import answer, load_tokenizer  # noqa: E402
from ternforge.quant.config import KDConfig  # noqa: E402
from ternforge.quant.distill import distill, make_student  # noqa: E402
from ternforge.quant.interchange import TernaryTensor  # noqa: E402
from ternforge.quant.model import load_float_model, module_to_source, source_tensor_names  # noqa: E402

REQUESTS = ["Write a short poem about the sea.", "Explain what a compiler does.", "Give three tips for sleeping well.",
            "What is photosynthesis?"] * 4
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def student_of(model_dir: Path, dtype: torch.dtype):
    model = load_float_model(model_dir, dtype)
    mods = dict(model.named_modules())
    init = {}
    for m in module_to_source(model, source_tensor_names(model_dir)):
        if m.rsplit(".", 1)[-1] in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
            W_q, scale = twn.quantize(mods[m].weight.detach().float(), twn.TWNConfig(group_size=32))
            init[m] = TernaryTensor(W_q=W_q, scale=scale, group_size=32)
    return model, make_student(model, init)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", nargs="?", default=str(root / ".ternforge" / "smol" / "fetch-model" / "outputs" / "model"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="timed distillation steps per round (after one untimed)")
    ap.add_argument("--max-new", type=int, default=96)
    a = ap.parse_args()
    model_dir = Path(a.model_dir)
    if not (model_dir / "config.json").exists():
        sys.exit(f"bench/kd_dtype: no checkpoint at {model_dir} (run: npx tsx pipeline.ts fetch-model --profile smol)")
    tok = load_tokenizer(model_dir)
    teachers = {n: load_float_model(model_dir, d) for n, d in DTYPES.items()}
    for t in teachers.values():
        for p in t.parameters():
            p.requires_grad_(False)
    seqs = torch.randint(0, int(teachers["float32"].config.vocab_size), (4 * (a.steps + 1), 128),
                         generator=torch.Generator().manual_seed(1))
    times: dict[str, dict[str, list[float]]] = {n: {"step_s": [], "transcripts_s": []} for n in DTYPES}
    transcripts: dict[str, list[list[int]]] = {}
    for r in range(a.rounds):
        for name, dtype in DTYPES.items():
            t0 = time.monotonic()
            transcripts[name], _ = answer(teachers[name], tok, REQUESTS, a.max_new, batch_size=16)
            times[name]["transcripts_s"].append(time.monotonic() - t0)
            model, student = student_of(model_dir, dtype)
            stamps: list[float] = []
            distill(teachers[name], model, student, seqs, KDConfig(steps=a.steps + 1, lr=0.025, batch_size=4,
                    grad_checkpointing=False, stop_weight=20), on_step=lambda rec: stamps.append(time.monotonic()))
            times[name]["step_s"].append((stamps[-1] - stamps[0]) / a.steps)
            del model, student
            print(f"round {r + 1} {name}: step {times[name]['step_s'][-1]:.2f} s, "
                  f"transcripts {times[name]['transcripts_s'][-1]:.1f} s", flush=True)
    med = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in times.items()}
    same = sum(x == y for x, y in zip(transcripts["float32"], transcripts["bfloat16"]))
    res = {"model_dir": str(model_dir.relative_to(root)) if model_dir.is_relative_to(root) else str(model_dir),
           "torch": torch.__version__, "threads": torch.get_num_threads(), "rounds": a.rounds, "steps": a.steps,
           "batch": [4, 128], "requests": len(REQUESTS), "max_new": a.max_new, "times": times, "median": med,
           "ratio_float32_over_bfloat16": {k: med["float32"][k] / med["bfloat16"][k] for k in med["float32"]},
           "identical_transcripts": same}
    out = root / "bench" / "results" / "kd-dtype.json"
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({"median": med, "ratio_float32_over_bfloat16": res["ratio_float32_over_bfloat16"],
                      "identical_transcripts": f"{same}/{len(REQUESTS)}"}, indent=1))


if __name__ == "__main__":
    main()
