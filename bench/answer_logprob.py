"""Bench (not CI): a continuous answer measure beside the answer set's right-or-wrong count. The full-precision
model answers every question of the answer set greedily (chatdata.answer, the distillation's own transcript
writer); each packed model then reads those transcripts teacher-forced, and per kind this reports the mean
negative log-likelihood of the float model's reply tokens and how many of them the packed model would have
picked itself (greedy agreement). Computed over all questions and over those whose float reply contains an
accepted spelling (a plain word match, not lib/eval/answer-score.ts: use bench/answers.ts for the score).
The answer set is only measured here, never fitted. Writes bench/results/answer-logprob.json (--out).

    $TERNFORGE_VENV/bin/python bench/answer_logprob.py NAME=PACK_DIR [NAME=PACK_DIR ...] [--model-dir M]
"""
import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root / "python"))
from ternforge.quality import assemble_submission  # noqa: E402
from ternforge.quant.chatdata import answer, load_tokenizer, prompt_ids  # noqa: E402
from ternforge.quant.model import load_float_model  # noqa: E402
from ternforge_server.loader import load_model  # noqa: E402


def contains_accepted(reply: str, accept: list[str]) -> bool:
    text = reply.lower()
    return any(re.search(rf"(?<!\w){re.escape(a.lower())}(?!\w)", text) for a in accept)


def reply_terms(model, ids: list[int], start: int) -> tuple[float, float]:
    """Mean NLL of ids[start:] under `model` given what precedes each, and the share it would pick greedily."""
    x = torch.tensor([ids])
    logits = model(input_ids=x).logits[0, start - 1:-1].float()
    target = x[0, start:]
    return float(F.cross_entropy(logits, target)), float((logits.argmax(-1) == target).float().mean())


def summarise(rows: list[dict], names: list[str]) -> dict:
    out: dict = {}
    for kind in sorted({r["kind"] for r in rows}) + ["all"]:
        for subset in ("all", "float_contains_answer"):
            pick = [r for r in rows if (kind == "all" or r["kind"] == kind) and (subset == "all" or r["contains"])]
            if not pick:
                continue
            out.setdefault(kind, {})[subset] = {"questions": len(pick), **{
                n: {"nll": sum(r[n][0] for r in pick) / len(pick), "agree": sum(r[n][1] for r in pick) / len(pick)}
                for n in names}}
    return out


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("packs", nargs="+", metavar="NAME=PACK_DIR")
    ap.add_argument("--model-dir", default=str(root / ".ternforge" / "smol" / "fetch-model" / "outputs" / "model"))
    ap.add_argument("--answers", default=str(root / "data" / "answers" / "everyday.json"))
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--out", default=str(root / "bench" / "results" / "answer-logprob.json"))
    a = ap.parse_args()
    packs = dict(p.split("=", 1) for p in a.packs)
    questions = json.loads(Path(a.answers).read_text())["questions"]
    tok = load_tokenizer(a.model_dir)
    ref = load_float_model(a.model_dir)
    t0 = time.monotonic()
    transcripts, stopped = answer(ref, tok, [q["question"] for q in questions], a.max_new)
    prompts = [len(prompt_ids(tok, q["question"])) for q in questions]
    print(f"float answers: {stopped} of {len(questions)} stopped within {a.max_new} tokens "
          f"({time.monotonic() - t0:.0f} s)")
    rows = []
    for q, ids, start in zip(questions, transcripts, prompts):
        reply = tok.decode(ids[start:], skip_special_tokens=True)
        rows.append({"id": q["id"], "kind": q["kind"], "reply": reply[:200],
                     "contains": contains_accepted(reply, q["accept"]), "float": reply_terms(ref, ids, start)})
    del ref
    with tempfile.TemporaryDirectory(prefix="ternforge-answer-logprob-") as tmp:
        for name, pack in packs.items():
            model = load_model(assemble_submission(pack, a.model_dir, Path(tmp) / name), "cpu", torch.float32)[0]
            for r, ids, start in zip(rows, transcripts, prompts):
                r[name] = reply_terms(model, ids, start)
            del model
    names = ["float", *packs]
    summary = summarise(rows, names)
    res = {"packs": packs, "max_new": a.max_new, "float_stopped": stopped, "summary": summary, "rows": rows}
    Path(a.out).write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    for subset in ("all", "float_contains_answer"):
        print(f"\n{subset}: kind, n, " + ", ".join(f"{n} nll/agree" for n in names))
        for kind, s in summary.items():
            if subset in s:
                print(f"  {kind}, {s[subset]['questions']}, "
                      + ", ".join(f"{s[subset][n]['nll']:.3f}/{s[subset][n]['agree']:.3f}" for n in names))


if __name__ == "__main__":
    main()
