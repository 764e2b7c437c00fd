"""The requests a quantize run's teacher wrote itself (kd.chat_self_prompts, Magpie), all of them, and how
many coincide with an evaluation question of the answer set.

The quantize report keeps only the first 12 (`kd.data.chat_self_examples`). This writes them again with the
stage's own function, teacher, dtype and seed, checks that its first 12 equal the report's (so they are the
requests the run trained on), and counts, for every question of the answer set, whether a request equals it
or contains it (after lower-casing and dropping punctuation). The answer set is read here only to report
overlap; nothing in the quantize stage reads it.

    OMP_NUM_THREADS=1 python bench/self_requests.py <quantize store dir> --profile profiles/smol.json \
        --model-dir <fetch-model outputs/model> --out bench/results/self-requests-X.json

Run it with the thread count of the quantize run (1 in the sweeps of docs/experiments.md): bfloat16 sampling on CPU may
differ between thread counts, and the check on the first 12 says so.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from ternforge.quant.chatdata import load_tokenizer, self_requests  # noqa: E402
from ternforge.quant.config import parse  # noqa: E402
from ternforge.quant.model import DTYPES, load_float_model  # noqa: E402


def norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path, help="the quantize stage's outputs (holds quantize_report.json)")
    ap.add_argument("--profile", type=Path, required=True)
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--answers", type=Path, default=Path(__file__).resolve().parents[1] / "data/answers/everyday.json")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()

    kd = json.loads((a.store / "quantize_report.json").read_text())["kd"]
    section = json.loads(a.profile.read_text())["stages"]["quantize"]
    cfg = parse({**section, "model_dir": str(a.model_dir), "out_dir": str(a.out.parent)})[0]  # the stage's defaults
    openers = cfg.kd.chat_self_openers
    teacher = load_float_model(a.model_dir, DTYPES[cfg.dtype], "cpu")
    tok = load_tokenizer(a.model_dir)
    t0 = time.monotonic()
    written = self_requests(teacher, tok, kd["chat_self_prompts"], cfg.seed, openers=openers)
    seconds = time.monotonic() - t0
    reported = kd["data"]["chat_self_examples"]
    same = written[:len(reported)] == reported
    questions = json.loads(a.answers.read_text())["questions"]
    mine = [norm(w) for w in written]
    equal = [x["question"] for x in questions if norm(x["question"]) in mine]
    inside = [x["question"] for x in questions if any(norm(x["question"]) in w for w in mine)]
    out = {"store": a.store.name, "openers": list(openers), "requests": len(written),
           "first_equal_report": same, "seconds": round(seconds, 1),
           "answer_set": {"questions": len(questions), "equal": equal, "contained": inside},
           "written": written}
    a.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(written)} requests in {seconds:.0f} s; first {len(reported)} equal the report's: {same}; "
          f"answer-set questions equal to one: {len(equal)}, contained in one: {len(inside)}")
    if not same:
        sys.exit("the regenerated requests differ from the report's: another thread count or dtype?")


if __name__ == "__main__":
    main()
