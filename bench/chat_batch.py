"""Bench (not CI): what the teacher's generation batch costs when it writes distillation transcripts
(chatdata.answer), side by side in one process: the same requests answered greedily at each batch size,
alternating the sizes round by round, in the profile's dtype. Reports transcripts per second, how many
stopped, and how many transcripts are identical to the first size's (left padding differs with the batch,
so bfloat16 rounding may differ). Writes bench/results/chat-batch.json.

    nice $TERNFORGE_VENV/bin/python bench/chat_batch.py [MODEL_DIR] [--batches 16,64] [--requests 64]

MODEL_DIR: a fetched checkpoint, default .ternforge/smol/fetch-model/outputs/model (`tsx pipeline.ts
fetch-model --profile smol`). The requests are generic chat requests written here (none of the answer set's
kinds).
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
from ternforge.quant.chatdata import answer, load_tokenizer  # noqa: E402
from ternforge.quant.model import load_float_model  # noqa: E402

TOPICS = ["the sea", "a compiler", "sleeping well", "photosynthesis", "a job interview", "learning to cook",
          "saving money", "a rainy day", "version control", "a city garden", "running a marathon", "a first novel"]
FORMS = ["Write a short poem about {}.", "Explain {} to a beginner.", "Give three tips about {}.",
         "Write a short story that involves {}.", "What should I know about {}?", "Plan a week around {}."]


def requests(n: int) -> list[str]:
    return [FORMS[i % len(FORMS)].format(TOPICS[(i // len(FORMS) + i) % len(TOPICS)]) for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", nargs="?", default=str(root / ".ternforge" / "smol" / "fetch-model" / "outputs" / "model"))
    ap.add_argument("--batches", default="16,64")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    a = ap.parse_args()
    model_dir = Path(a.model_dir)
    if not (model_dir / "config.json").exists():
        sys.exit(f"bench/chat_batch: no checkpoint at {model_dir} (run: npx tsx pipeline.ts fetch-model --profile smol)")
    sizes = [int(b) for b in a.batches.split(",")]
    tok = load_tokenizer(model_dir)
    teacher = load_float_model(model_dir, getattr(torch, a.dtype))
    for p in teacher.parameters():
        p.requires_grad_(False)
    reqs = requests(a.requests)
    times: dict[int, list[float]] = {b: [] for b in sizes}
    out: dict[int, list[list[int]]] = {}
    stopped: dict[int, int] = {}
    for r in range(a.rounds):
        for b in sizes:
            t0 = time.monotonic()
            out[b], stopped[b] = answer(teacher, tok, reqs, a.max_new, batch_size=b)
            times[b].append(time.monotonic() - t0)
            print(f"round {r + 1} batch {b}: {times[b][-1]:.1f} s, {stopped[b]} stopped", flush=True)
    med = {b: statistics.median(t) for b, t in times.items()}
    first = sizes[0]
    res = {"model_dir": str(model_dir.relative_to(root)) if model_dir.is_relative_to(root) else str(model_dir),
           "torch": torch.__version__, "threads": torch.get_num_threads(), "dtype": a.dtype, "rounds": a.rounds,
           "requests": len(reqs), "max_new": a.max_new, "seconds": {str(b): t for b, t in times.items()},
           "median_s": {str(b): m for b, m in med.items()},
           "transcripts_per_s": {str(b): len(reqs) / m for b, m in med.items()},
           f"speedup_over_{first}": {str(b): med[first] / med[b] for b in sizes},
           "stopped": {str(b): s for b, s in stopped.items()},
           f"identical_to_{first}": {str(b): sum(x == y for x, y in zip(out[first], out[b])) for b in sizes}}
    dest = root / "bench" / "results" / "chat-batch.json"
    dest.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: res[k] for k in ("median_s", f"speedup_over_{first}", "stopped", f"identical_to_{first}")}, indent=1))


if __name__ == "__main__":
    main()
