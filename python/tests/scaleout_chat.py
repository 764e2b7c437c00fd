"""Run by test_scaleout.py, as one process or under torchrun: the tiny teacher's self-written requests and
greedy answers (chatdata.py) in small batches, with an eighth of its vocabulary made stop tokens so that requests end
at several lengths and some draws are dropped. Rank 0 prints one JSON line: the requests, the transcripts, how
many stopped, and each rank's count of generate() calls.

    python scaleout_chat.py <tiny fetch dir>
"""
from __future__ import annotations

import json
import sys

import torch

from ternforge.quant import dist
from ternforge.quant.chatdata import answer, load_tokenizer, self_requests
from ternforge.quant.model import load_float_model


def main(fetch_dir: str) -> None:
    world = dist.join("gloo", "cpu", None)
    model_dir = f"{fetch_dir}/model"
    teacher = load_float_model(model_dir)
    teacher.generation_config.eos_token_id = list(range(0, teacher.config.vocab_size, 8))
    calls = [0]
    generate = teacher.generate

    def counted(*args, **kwargs):
        calls[0] += 1
        return generate(*args, **kwargs)

    teacher.generate = counted
    tok = load_tokenizer(model_dir)
    requests = self_requests(teacher, tok, 4, seed=3, max_tokens=5, temperature=2.0, batch_size=3, openers=("", "What"), world=world)
    transcripts, stopped = answer(teacher, tok, requests + ["Say one word."] * 2, 8, batch_size=2, world=world)
    per_rank = [int(c[0]) for c in world.gather_figures([float(calls[0])])]
    if world.reporter:
        print(json.dumps({"requests": requests, "transcripts": transcripts, "stopped": stopped, "calls": per_rank}))
    dist.leave(world)


if __name__ == "__main__":
    torch.manual_seed(0)
    main(sys.argv[1])
