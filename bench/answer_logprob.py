"""Bench (not CI): a continuous answer measure beside the answer set's right-or-wrong count. The full-precision
model answers every question of the answer set greedily (chatdata.answer, the distillation's own transcript
writer); each packed model then reads those transcripts teacher-forced, and per kind this reports the mean
negative log-likelihood of the float model's reply tokens and how many of them the packed model would have
picked itself (greedy agreement). Computed over all questions and over those whose float reply contains an
accepted spelling (a plain word match, not lib/eval/answer-score.ts: use bench/answers.ts for the score). For
those it also reads the one token where the float reply's first accepted spelling begins ("Paris" in "The
capital of France is Paris."): its NLL under each model and whether the model would pick it there (answer
top-1): whether the student still knows the answer once it has written the float model's words up to it.
The answer set is only measured here, never fitted. Writes bench/results/answer-logprob.json (--out).

    $TERNFORGE_VENV/bin/python bench/answer_logprob.py NAME=PACK_DIR [NAME=PACK_DIR ...] [--model-dir M]
        [--float-from EARLIER.json]

--float-from takes the float model's transcripts from an earlier run's output (written with the same answer
set, model and --max-new: refused otherwise) instead of writing them again (about 400 s on 2 cores).
"""
import argparse
import hashlib
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
from ternforge.sources.checkpoint import sha256_file  # noqa: E402
from ternforge_server.loader import load_model  # noqa: E402


def first_accepted(reply: str, accept: list[str]) -> int | None:
    """Where the first accepted spelling in `reply` begins (a character offset), None when there is none."""
    text = reply.lower()
    starts = []
    for a in accept:
        m = re.search(rf"(?<!\w){re.escape(a.lower())}(?!\w)", text)
        if m:
            starts.append(m.start())
    return min(starts, default=None)


def token_at(tok, reply_ids: list[int], char: int) -> int:
    """The index in `reply_ids` of the token whose decoded text holds character `char` of the decoded reply."""
    for i in range(len(reply_ids)):
        if len(tok.decode(reply_ids[:i + 1], skip_special_tokens=True)) > char:
            return i
    raise ValueError(f"no token holds character {char} of the reply")


def reply_terms(model, ids: list[int], start: int, at: int | None) -> list[float | None]:
    """Mean NLL of ids[start:] under `model` given what precedes each and the share it would pick greedily; then
    the NLL of reply token `at` and whether it is the model's pick there (None, None without one)."""
    x = torch.tensor([ids])
    logits = model(input_ids=x).logits[0, start - 1:-1].float()
    target = x[0, start:]
    nll = F.cross_entropy(logits, target, reduction="none")
    pick = (logits.argmax(-1) == target).float()
    point = [None, None] if at is None else [float(nll[at]), float(pick[at])]
    return [float(nll.mean()), float(pick.mean()), *point]


def summarise(rows: list[dict], names: list[str]) -> dict:
    out: dict = {}
    for kind in sorted({r["kind"] for r in rows}) + ["all"]:
        for subset in ("all", "float_contains_answer"):
            pick = [r for r in rows if (kind == "all" or r["kind"] == kind) and (subset == "all" or r["contains"])]
            if not pick:
                continue
            out.setdefault(kind, {})[subset] = {"questions": len(pick), **{
                n: {"nll": sum(r[n][0] for r in pick) / len(pick), "agree": sum(r[n][1] for r in pick) / len(pick),
                    **({"answer_nll": sum(r[n][2] for r in pick) / len(pick),
                        "answer_top1": sum(r[n][3] for r in pick) / len(pick)} if subset != "all" else {})}
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
    ap.add_argument("--float-from", help="an earlier output whose float transcripts to reuse")
    a = ap.parse_args()
    packs = dict(p.split("=", 1) for p in a.packs)
    answers_bytes = Path(a.answers).read_bytes()
    questions = json.loads(answers_bytes)["questions"]
    source = {"answers_sha256": hashlib.sha256(answers_bytes).hexdigest(),
              "weights_sha256": {f.name: sha256_file(f) for f in sorted(Path(a.model_dir).glob("*.safetensors"))},
              "max_new": a.max_new}
    tok = load_tokenizer(a.model_dir)
    ref = load_float_model(a.model_dir)
    t0 = time.monotonic()
    if a.float_from:
        earlier = json.loads(Path(a.float_from).read_text())
        if earlier.get("source") != source:
            sys.exit(f"answer_logprob: {a.float_from} was written from another answer set, model or --max-new "
                     f"({earlier.get('source')} against {source})")
        transcripts, stopped = earlier["transcripts"], earlier["float_stopped"]
    else:
        transcripts, stopped = answer(ref, tok, [q["question"] for q in questions], a.max_new)
    # Where each reply begins: its prompt, tokenized as the transcript's own start (a transcript of --float-from
    # written with another tokenizer or template would not begin with it, and every figure would be off by a shift).
    prompts = []
    for q, ids in zip(questions, transcripts):
        p = prompt_ids(tok, q["question"])
        if ids[:len(p)] != p:
            sys.exit(f"answer_logprob: the float transcript of {q['id']} does not begin with its templated question "
                     f"under {a.model_dir}'s tokenizer")
        prompts.append(len(p))
    print(f"float answers: {stopped} of {len(questions)} stopped within {a.max_new} tokens "
          f"({time.monotonic() - t0:.0f} s)")
    rows, points = [], []
    for q, ids, start in zip(questions, transcripts, prompts):
        reply = tok.decode(ids[start:], skip_special_tokens=True)
        char = first_accepted(reply, q["accept"])
        points.append(None if char is None else token_at(tok, ids[start:], char))
        rows.append({"id": q["id"], "kind": q["kind"], "reply": reply[:200], "contains": char is not None,
                     "float": reply_terms(ref, ids, start, points[-1])})
    del ref
    with tempfile.TemporaryDirectory(prefix="ternforge-answer-logprob-") as tmp:
        for name, pack in packs.items():
            model = load_model(assemble_submission(pack, a.model_dir, Path(tmp) / name), "cpu", torch.float32)[0]
            for r, ids, start, at in zip(rows, transcripts, prompts, points):
                r[name] = reply_terms(model, ids, start, at)
            del model
    names = ["float", *packs]
    summary = summarise(rows, names)
    res = {"packs": packs, "max_new": a.max_new, "source": source, "float_stopped": stopped, "summary": summary,
           "rows": rows, "transcripts": transcripts}
    Path(a.out).write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    for subset in ("all", "float_contains_answer"):
        point = subset != "all"
        print(f"\n{subset}: kind, n, " + ", ".join(f"{n} nll/agree" + ("/answer nll/answer top-1" if point else "")
                                                   for n in names))
        for kind, s in summary.items():
            if subset in s:
                cells = [s[subset][n] for n in names]
                print(f"  {kind}, {s[subset]['questions']}, " + ", ".join(
                    f"{c['nll']:.3f}/{c['agree']:.3f}"
                    + (f"/{c['answer_nll']:.3f}/{c['answer_top1']:.3f}" if point else "") for c in cells))


if __name__ == "__main__":
    main()
