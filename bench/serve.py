"""Serving benchmark: 16 concurrent requests vs one at a time vs one static batch-16 generate, /health p99,
and the cost of the proxy hop (controller -> upstream process) measured side by side.

    npm run bench:serve                                  # the tiny fixture submission, CPU
    npm run bench:serve -- --dir dist/smol               # an emitted submission
    npm run bench:serve -- --from-fetch .ternforge/smol/fetch-model/outputs/model   # smol's float weights
Prints a table and writes bench/results/serve.json. Requests go to /v1/completions with temperature 0 and
a fixed max_tokens, so every request decodes that many tokens unless it stops. They ask for no penalties
(plain greedy, like the static batch); one more concurrent row uses the submission's default penalties
(architecture.json serving.sampling_defaults) and shows what they cost.

Every row counts the same thing: completion tokens a client receives (usage.completion_tokens; the stop
token is not one). The static batch is one `generate` call with the server's stop ids; it runs until its
longest row ends, and the positions it pads after a row's stop are not counted (they are listed apart as
`padded_tokens`). Greedy decoding makes all three modes produce the same replies, so each row's token
counts are compared too (`same_lengths`).

The proxy hop: the server is the controller process in front of the upstream process that runs the engine.
The same 16 concurrent requests go through the controller (text prompt, as a client sends it) and straight
to the upstream (the same token ids the controller would send), then the static batch runs, in --rounds
alternating rounds; `proxy_hop.ratio` is controller tok/s over direct tok/s (medians), 1.0 meaning the hop
costs nothing. The concurrent_16 and static_batch_16 rows are medians over the rounds (each round listed), so
a shared machine's load swings hit the compared modes alike; one_at_a_time runs once (it is the slowest).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "python" / "tests")]

PROMPTS = [f"Question {i}: once upon a time there was a cat that sat on the mat and" for i in range(16)]


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def proxy_hop(srv, sub: Path, max_tokens: int, rounds: int, between=None) -> dict:
    """16 concurrent greedy requests through the controller vs straight to its upstream, alternating."""
    from transformers import AutoTokenizer

    from ternforge_server.controller import ReasoningController

    report = json.loads(srv.report_path.read_text())
    upstream = report["upstream"]["url"] + "/v1/completions"
    tok = AutoTokenizer.from_pretrained(str(sub), local_files_only=True)
    stops = sorted(ReasoningController(None, tok).eos_ids)  # what the controller asks the upstream to stop on

    def via_controller(p: str) -> int:
        body = {"model": "x", "prompt": p, "max_tokens": max_tokens, "temperature": 0,
                "presence_penalty": 0, "frequency_penalty": 0}
        return post(srv.url + "/v1/completions", body)["usage"]["completion_tokens"]

    def direct(p: str) -> int:
        body = {"model": "x", "prompt": tok.encode(p, add_special_tokens=False), "max_tokens": max_tokens,
                "temperature": 0, "presence_penalty": 0, "frequency_penalty": 0, "stop_token_ids": stops,
                "return_token_ids": True}
        return len(post(upstream, body)["choices"][0]["token_ids"])

    def burst(fn) -> tuple[int, float]:
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(16) as pool:
            n = sum(pool.map(fn, PROMPTS))
        return n, time.perf_counter() - t0

    ctl, dct = [], []
    lengths = {}
    for _ in range(rounds):
        for name, fn, acc in (("controller", via_controller, ctl), ("direct", direct, dct)):
            n, sec = burst(fn)
            acc.append(n / sec)
            lengths.setdefault(name, n)
        if between is not None:
            between()
    c, d = statistics.median(ctl), statistics.median(dct)
    return {"rounds": rounds, "controller_rounds": [round(x, 1) for x in ctl], "direct_rounds": [round(x, 1) for x in dct],
            "controller_tok_s": round(c, 1), "direct_tok_s": round(d, 1), "ratio": round(c / d, 3),
            "tokens": lengths}


def float_submission(model_dir: Path, out: Path) -> Path:
    """A submission the server loads from a plain Hugging Face model directory (fetch-model's output, e.g.
    .ternforge/smol/fetch-model/outputs/model): its shards linked under weights/, every tensor float-encoded."""
    import hashlib
    import shutil

    from safetensors import safe_open

    (out / "weights").mkdir(parents=True, exist_ok=True)
    shards, tensors = [], {}
    for src in sorted(model_dir.glob("*.safetensors")):
        dst = out / "weights" / src.name
        if not dst.exists():
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)
        h = hashlib.sha256()
        with open(dst, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        rel = f"weights/{src.name}"
        shards.append({"file": rel, "size": dst.stat().st_size, "sha256": h.hexdigest()})
        with safe_open(str(dst), framework="pt") as f:
            for key in f.keys():
                sl = f.get_slice(key)
                tensors[key] = {"encoding": "float", "shape": list(sl.get_shape()), "dtype": sl.get_dtype(),
                                "shard": rel, "data_key": key}
    if not shards:
        raise SystemExit(f"no *.safetensors in {model_dir}")
    emb = next((k for k in tensors if k.endswith("embed_tokens.weight")), None)
    if emb and not any(k.endswith("lm_head.weight") for k in tensors):  # a tied head is stored once, as emit does
        tensors[emb]["tied_to"] = ["lm_head.weight"]
    from ternforge_server.contract import MANIFEST_FORMAT, MANIFEST_PACKING

    manifest = {"format": MANIFEST_FORMAT, "base_model": model_dir.name, "revision": "fetch-model",
                "method": "none (float weights, for a serving benchmark)", "packing": dict(MANIFEST_PACKING),
                "shards": shards,
                "tensors": tensors}
    (out / "quantization_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for p in model_dir.iterdir():
        if p.is_file() and not p.name.startswith("model") and p.suffix in (".json", ".jinja", ".txt", ".model"):
            shutil.copyfile(p, out / p.name)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="")
    ap.add_argument("--from-fetch", default="", help="a Hugging Face model directory (fetch-model's output): its float weights "
                    "served as a float-encoded submission assembled in a temporary directory")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of (16 concurrent through the "
                    "controller, 16 concurrent straight to the upstream, the static batch); rows report medians")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cpu-linear", choices=["decode", "plain"], default="decode",
                    help="the server's --cpu-linear; the static batch uses the same")
    args = ap.parse_args()
    from server_fixtures import ServerProcess, build_submission
    from ternforge_server.__main__ import parse_args, sampling_defaults

    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    if args.from_fetch:
        sub = float_submission(Path(args.from_fetch).resolve(), tmp / "sub")
    else:
        sub = Path(args.dir).resolve() if args.dir else build_submission(tmp / "sub")
    # The static batch-16 generate runs in this process, through the same loader, between the server's rounds.
    import torch

    from ternforge_server.controller import ReasoningController
    from ternforge_server.loader import load_model

    torch.set_num_threads(max(1, min(8, (os.cpu_count() or 2) // 2)))  # the server's CPU default
    model, tok, _ = load_model(sub, args.device)
    if args.device == "cpu" and args.cpu_linear == "decode":
        from ternforge_server import cpu_linear

        cpu_linear.apply(model)
    stop_ids = sorted(ReasoningController(None, tok).eos_ids)  # what /v1/completions stops on
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    enc = tok(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)

    def static_batch() -> tuple[list[list[int]], float]:
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = model.generate(**enc, max_new_tokens=args.max_tokens, do_sample=False, eos_token_id=stop_ids,
                                 pad_token_id=tok.pad_token_id)
            return out[:, enc["input_ids"].shape[1]:].tolist(), time.perf_counter() - t0

    with torch.inference_mode():
        model.generate(**enc, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)

    srv = ServerProcess(sub, tmp / "server.log", "--device", args.device, "--cpu-linear", args.cpu_linear)
    try:
        srv.wait_ready(600)
        url = srv.url + "/v1/completions"

        def one(p: str, greedy: bool = True) -> int:
            body = {"model": "x", "prompt": p, "max_tokens": args.max_tokens, "temperature": 0}
            if greedy:  # plain greedy, like the static batch; else the submission's default penalties
                body.update(presence_penalty=0, frequency_penalty=0)
            return post(url, body)["usage"]["completion_tokens"]

        one(PROMPTS[0])  # warm
        t0 = time.perf_counter()
        seq_lengths = [one(p) for p in PROMPTS]
        seq_s = time.perf_counter() - t0

        lat: list[float] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                urllib.request.urlopen(srv.url + "/health", timeout=30).read()
                lat.append(time.perf_counter() - t)
                time.sleep(0.02)

        poller = threading.Thread(target=poll)
        t0 = time.perf_counter()
        poller.start()
        with cf.ThreadPoolExecutor(16) as pool:
            conc_lengths = list(pool.map(one, PROMPTS))
        conc_first_s = time.perf_counter() - t0
        stop.set()
        poller.join()
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(16) as pool:
            dflt_lengths = list(pool.map(lambda p: one(p, greedy=False), PROMPTS))
        dflt_s = time.perf_counter() - t0
        defaults = sampling_defaults(sub, parse_args(["--dir", str(sub)]))  # what the server applied
        static_runs: list[float] = []
        generated: list[list[int]] = []

        def static_round() -> None:
            nonlocal generated
            generated, sec = static_batch()
            static_runs.append(sec)

        hop = proxy_hop(srv, sub, args.max_tokens, args.rounds, between=static_round)
        startup = json.loads(srv.report_path.read_text())
    finally:
        srv.stop()

    static_s = statistics.median(static_runs)
    conc_tok_s = statistics.median([sum(conc_lengths) / conc_first_s] + hop["controller_rounds"])
    static_lengths = [next((k for k, t in enumerate(row) if t in stop_ids), len(row)) for row in generated]
    static_tokens, padded_tokens = sum(static_lengths), len(generated) * len(generated[0])
    seq_tokens, conc_tokens = sum(seq_lengths), sum(conc_lengths)
    conc_s = conc_tokens / conc_tok_s

    p99 = statistics.quantiles(lat, n=100, method="inclusive")[98] if len(lat) > 2 else max(lat)
    rows = {
        "one_at_a_time": {"tokens": seq_tokens, "seconds": round(seq_s, 3), "tok_s": round(seq_tokens / seq_s, 1)},
        "concurrent_16": {"tokens": conc_tokens, "seconds": round(conc_s, 3), "tok_s": round(conc_tok_s, 1),
                          "rounds_tok_s": [round(sum(conc_lengths) / conc_first_s, 1)] + hop["controller_rounds"]},
        "static_batch_16": {"tokens": static_tokens, "seconds": round(static_s, 3),
                            "tok_s": round(static_tokens / static_s, 1), "padded_tokens": padded_tokens,
                            "rounds_tok_s": [round(static_tokens / x, 1) for x in static_runs]},
        "concurrent_16_defaults": {"tokens": sum(dflt_lengths), "seconds": round(dflt_s, 3),
                                   "tok_s": round(sum(dflt_lengths) / dflt_s, 1), "sampling_defaults": defaults},
    }
    result = {
        "submission": str(sub), "device": args.device, "cpu_linear": args.cpu_linear, "max_tokens": args.max_tokens,
        "rows": rows,
        "same_lengths": seq_lengths == conc_lengths == static_lengths,
        "lengths": {"one_at_a_time": seq_lengths, "concurrent_16": conc_lengths, "static_batch_16": static_lengths},
        "speedup_vs_one_at_a_time": round(rows["concurrent_16"]["tok_s"] / rows["one_at_a_time"]["tok_s"], 2),
        "ratio_vs_static_batch": round(rows["concurrent_16"]["tok_s"] / rows["static_batch_16"]["tok_s"], 2),
        "health_under_load_ms": {"n": len(lat), "p50": round(statistics.median(lat) * 1000, 2),
                                 "p99": round(p99 * 1000, 2), "max": round(max(lat) * 1000, 2)},
        "proxy_hop": hop,
        "engine": startup.get("engine"),
        "load_average": os.getloadavg(),
    }
    print(f"{'mode':<24}{'tokens':>8}{'seconds':>10}{'tok/s':>10}")
    for k, v in rows.items():
        print(f"{k:<24}{v['tokens']:>8}{v['seconds']:>10}{v['tok_s']:>10}")
    print(f"rounds (tok/s): concurrent_16 {rows['concurrent_16']['rounds_tok_s']}, "
          f"static_batch_16 {rows['static_batch_16']['rounds_tok_s']} (the rows show medians)")
    print(f"16-concurrent / one-at-a-time: {result['speedup_vs_one_at_a_time']}x; "
          f"/ static batch: {result['ratio_vs_static_batch']}x")
    print(f"the first three rows decode greedily; concurrent_16_defaults uses the submission's default "
          f"penalties {defaults}, so its replies may differ")
    print(f"static batch: {padded_tokens} positions decoded, {static_tokens} of them before a row's stop; "
          f"per-request lengths {'agree' if result['same_lengths'] else 'DIFFER'} across the three modes")
    h = result["health_under_load_ms"]
    print(f"/health under load: n={h['n']} p50={h['p50']} ms p99={h['p99']} ms max={h['max']} ms")
    print(f"proxy hop ({hop['rounds']} alternating rounds of 16 concurrent): through the controller "
          f"{hop['controller_tok_s']} tok/s, straight to the {result['engine']} upstream {hop['direct_tok_s']} tok/s "
          f"(medians of {hop['controller_rounds']} and {hop['direct_rounds']}): ratio {hop['ratio']}")
    print(f"load average (1, 5, 15 min) at the end: {result['load_average']}")
    out_path = ROOT / "bench" / "results" / "serve.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out_path.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(result, indent=2) + "\n")
    tmp_out.replace(out_path)
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)  # the fixture or the assembled float submission
    return 0


if __name__ == "__main__":
    sys.exit(main())
