"""`python -m ternforge quality --config <json>`: how far the packed model is from full precision.

Config:
    pack_dir        pack's output: quantization_manifest.json and weights/
    model_dir       fetch-model's `model/`: the full-precision reference, and the config.json, tokenizer
                    and chat template files the loader reads beside the manifest
    calib_dir       fetch-calib's output: the `heldout` role is measured (never calibration text)
    out             where quality.json goes
    seq_len, sequences, batch_size, device, dtype

The packed model is loaded by the server's own loader (`ternforge_server.loader.load_model`), so the
numbers describe exactly the weights that will be served. Measured on the held-out sequences:
- perplexity of both models and their ratio;
- top-1 next-token agreement (share of positions where both argmax tokens are equal);
- mean KL(full precision || packed) of the next-token distributions;
and per tensor, straight from the packed shards against the source checkpoint: relative Frobenius error
||W - T*s|| / ||W|| and the share of zero codes.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .events import emit, log, progress


LOGIT_CHUNK = 1024
"""Positions whose logits exist at once: the full [batch, seq, vocab] logits of the 4B (4 x 2048 x 248,320
fp32, 8 GB a copy, several copies) never do; a chunk is 1 GB."""


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    out = model(input_ids=ids, use_cache=False)
    return (out.logits if hasattr(out, "logits") else out[0]).float()


def _hidden_and_head(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, torch.nn.Module]:
    """The base model's normed final hidden states [batch, seq, hidden] and the head that maps them to logits."""
    out = model.model(input_ids=ids, use_cache=False)
    return out.last_hidden_state, model.get_output_embeddings()


@torch.no_grad()
def compare(reference: torch.nn.Module, candidate: torch.nn.Module | None, seqs: torch.Tensor,
            batch_size: int, device: str = "cpu", chunk: int = LOGIT_CHUNK) -> dict[str, float]:
    """Perplexities, top-1 agreement and KL(reference || candidate) on [n, seq_len] sequences. The heads run
    over `chunk` positions at a time, so full logits never exist; a progress event follows each batch."""
    nll_ref = nll_cand = kl = 0.0
    agree = positions = 0
    n = seqs.shape[0]
    for i in range(0, n, batch_size):
        ids = seqs[i:i + batch_size].to(device)
        target = ids[:, 1:].reshape(-1)
        h_r, head_r = _hidden_and_head(reference, ids)
        h_r = h_r[:, :-1].reshape(-1, h_r.shape[-1])
        h_c = head_c = None
        if candidate is not None:
            h_c, head_c = _hidden_and_head(candidate, ids)
            h_c = h_c[:, :-1].reshape(-1, h_c.shape[-1])
        for j in range(0, target.numel(), chunk):
            t = target[j:j + chunk]
            lr = head_r(h_r[j:j + chunk]).float()
            nll_ref += float(F.cross_entropy(lr, t, reduction="sum"))
            if candidate is not None:
                lc = head_c(h_c[j:j + chunk]).float()
                nll_cand += float(F.cross_entropy(lc, t, reduction="sum"))
                agree += int((lr.argmax(-1) == lc.argmax(-1)).sum())
                kl += float(F.kl_div(F.log_softmax(lc, -1), F.log_softmax(lr, -1), log_target=True, reduction="sum"))
                del lc
            del lr
        positions += target.numel()
        progress(min(i + batch_size, n), n, "quality: held-out sequences")
    res = {"positions": positions, "ppl_reference": math.exp(nll_ref / positions)}
    if candidate is not None:
        res.update({"ppl": math.exp(nll_cand / positions), "top1_agreement": agree / positions,
                    "kl": kl / positions})
        res["ppl_ratio"] = res["ppl"] / res["ppl_reference"]
    return res


@torch.no_grad()
def perplexity(model: torch.nn.Module, seqs: torch.Tensor, batch_size: int, device: str = "cpu") -> float:
    nll, n = 0.0, 0
    for i in range(0, seqs.shape[0], batch_size):
        ids = seqs[i:i + batch_size].to(device)
        logits = _logits(model, ids)[:, :-1]
        nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum"))
        n += ids[:, 1:].numel()
    return math.exp(nll / n)


def _loader_summary(report: Any) -> dict[str, Any] | None:
    data = report.to_json() if hasattr(report, "to_json") else report
    if not isinstance(data, dict):
        return None
    return {"architecture": data.get("architecture"), "loaded_count": data.get("loaded_count"),
            "shards": data.get("shards"), "phases": data.get("phases")}


def tensor_errors(submission_dir: str | Path, model_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Per packed tensor: relative Frobenius error against the source and the share of zero codes."""
    from safetensors import safe_open

    from ternforge_server.packing import dequantize, unpack_2bit

    from .quant.model import source_tensor_names

    submission_dir, model_dir = Path(submission_dir), Path(model_dir)
    manifest = json.loads((submission_dir / "quantization_manifest.json").read_text())
    index = model_dir / "model.safetensors.index.json"
    where = (json.loads(index.read_text())["weight_map"] if index.exists()
             else {k: "model.safetensors" for k in source_tensor_names(model_dir)})
    out: dict[str, dict[str, Any]] = {}
    for name, t in sorted(manifest["tensors"].items()):
        if t["encoding"] != "packed_2bit" or name not in where:
            continue
        with safe_open(str(submission_dir / t["shard"]), framework="pt") as sf:
            codes = sf.get_tensor(t["codes_key"])
            scale = sf.get_tensor(t["scale_key"])
        with safe_open(str(model_dir / where[name]), framework="pt") as sf:
            W = sf.get_tensor(name).float()
        T = unpack_2bit(codes, int(t["shape"][1]))
        W_r = dequantize(T, scale, int(t["group_size"]), torch.float32)
        out[name] = {"rel_frobenius": float(torch.linalg.norm(W - W_r) / torch.linalg.norm(W).clamp(min=1e-30)),
                     "zero_share": float((T == 0).float().mean())}
    return out


SUBMISSION_FILES_FROM_MODEL = ("config.json", "generation_config.json", "chat_template.jinja")


def assemble_submission(pack_dir: str | Path, model_dir: str | Path, into: str | Path) -> Path:
    """A submission-shaped directory of symbolic links: pack's manifest and weights/, fetch-model's config
    and tokenizer files. Nothing is copied, so the loader reads exactly pack's bytes."""
    pack_dir, model_dir, into = Path(pack_dir).resolve(), Path(model_dir).resolve(), Path(into)
    into.mkdir(parents=True, exist_ok=True)
    for name in ("quantization_manifest.json", "weights"):
        (into / name).symlink_to(pack_dir / name)
    for p in sorted(model_dir.iterdir()):
        if p.name in SUBMISSION_FILES_FROM_MODEL or p.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")):
            (into / p.name).symlink_to(p)
    return into


def main(config: dict[str, Any]) -> dict[str, Any]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ternforge-quality-") as tmp:
        sub = assemble_submission(config["pack_dir"], config["model_dir"], Path(tmp) / "submission")
        return measure({**config, "submission_dir": str(sub)})


def measure(config: dict[str, Any]) -> dict[str, Any]:
    """As main, with `submission_dir` a complete submission-shaped directory."""
    from ternforge_server.loader import load_model

    from .calib.tokens import load_role, read_manifest, sequences
    from .quant.model import load_float_model

    t0 = time.time()
    device = config.get("device", "cpu")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[config.get("dtype", "float32")]
    torch.manual_seed(int(config.get("seed", 0)))
    eos = int(read_manifest(config["calib_dir"])["tokenizer"]["eos_id"])
    seqs = sequences(load_role(config["calib_dir"], "heldout"), int(config.get("seq_len", 256)),
                     config.get("sequences"), eos)
    batch_size = int(config.get("batch_size", 4))

    reference = load_float_model(config["model_dir"], dtype, device)
    loaded = load_model(config["submission_dir"], device, dtype)
    candidate = loaded[0]
    candidate.eval()
    emit("progress", done=1, total=3, what="loaded")
    metrics = compare(reference, candidate, seqs, batch_size, device)
    emit("progress", done=2, total=3, what="measured")
    per_tensor = tensor_errors(config["submission_dir"], config["model_dir"])
    emit("progress", done=3, total=3, what="tensor errors")
    rel = [v["rel_frobenius"] for v in per_tensor.values()]
    report = {
        "format": "ternforge-quality/1",
        "heldout": {"sequences": int(seqs.shape[0]), "seq_len": int(seqs.shape[1]), "role": "heldout"},
        "metrics": metrics,
        "tensors": {"count": len(per_tensor), "mean_rel_frobenius": sum(rel) / len(rel) if rel else None,
                    "max_rel_frobenius": max(rel) if rel else None, "per_tensor": per_tensor},
        "loader": _loader_summary(loaded[2]),
        "seconds": round(time.time() - t0, 1),
    }
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "quality.json").write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    log(f"quality: ppl {metrics['ppl']:.3f} vs {metrics['ppl_reference']:.3f} (x{metrics['ppl_ratio']:.3f}), "
        f"top-1 agreement {metrics['top1_agreement']:.3f}")
    return {"quality": "quality.json", **{k: metrics[k] for k in ("ppl", "ppl_reference", "ppl_ratio", "top1_agreement", "kl")}}


# --- bench: `npm run bench:quality` (bench/quality.ts) drives these two steps around the TypeScript pack ---


def bench_quantize(config: dict[str, Any]) -> dict[str, Any]:
    """The data-free and GPTQ bench methods on one float model and one float plan, each written as an
    interchange under `<work>/<method>/interchange` by the quantize command's own writer. GPTQ+KD is the
    pipeline's own quantize stage (the bench runs it first), which starts from this same GPTQ computation."""
    import dataclasses

    from .quant import absmean, twn
    from .quant.calibration import prepare
    from .quant.config import parse
    from .quant.gptq import run_gptq
    from .quant.interchange import TernaryTensor
    from .quant.methods import Outcome
    from .quant.run import write_outcome

    work, model_dir, calib_dir = Path(config["work"]), config["model_dir"], config["calib_dir"]
    cfg, paths0 = parse({**config["params"], "model_dir": model_dir, "out_dir": str(work)})
    g = cfg.group_size
    timings: dict[str, float] = {}
    t0 = time.time()
    prep = prepare(model_dir, calib_dir, cfg)
    timings["prepare"] = time.time() - t0
    reports: dict[str, Any] = {"allocation": {"fraction": prep.allocation.fraction,
                                              "chosen_float": prep.allocation.chosen_float,
                                              "forced_float": len(prep.allocation.forced_float)}}

    def export(method: str, codes) -> None:
        paths = dataclasses.replace(paths0, out_dir=str(work / method / "interchange"))
        write_outcome(dataclasses.replace(cfg, method=method), paths, Outcome(prep.allocation, codes),
                      lambda *a: None, config.get("base_model", "smol"), config.get("revision", "bench"))

    t0 = time.time()
    export("absmean", lambda t, W: TernaryTensor(*absmean.quantize(W, absmean.AbsmeanConfig(group_size=g)), group_size=g))
    timings["absmean"] = time.time() - t0
    emit("progress", done=1, total=3, what="absmean")

    t0 = time.time()
    tcfg = twn.TWNConfig(group_size=g, search=cfg.twn.search)
    export("twn", lambda t, W: TernaryTensor(*twn.quantize(W.float(), tcfg), group_size=g))
    timings["twn"] = time.time() - t0
    emit("progress", done=2, total=3, what="twn")

    t0 = time.time()
    gptq_out, rep = run_gptq(prep, cfg, lambda d, n: emit("progress", done=d, total=n, what="gptq layer"))
    export("gptq", lambda t, W: gptq_out[t.name])
    timings["gptq"] = time.time() - t0
    reports["gptq"] = {"mean_rel_err": sum(rep["gptq_rel_err"].values()) / max(1, len(rep["gptq_rel_err"]))}
    emit("progress", done=3, total=3, what="gptq")

    result = {"timings_s": {k2: round(v, 1) for k2, v in timings.items()}, "reports": reports}
    (work / "quantize.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def read_manifest_eos(calib_dir: str | Path) -> int:
    from .calib.tokens import read_manifest

    return int(read_manifest(calib_dir)["tokenizer"]["eos_id"])


@torch.no_grad()
def bench_measure(config: dict[str, Any]) -> dict[str, Any]:
    """Every packed method loaded by the server's loader, all measured in one pass over the same held-out
    sequences against one full-precision reference."""
    import tempfile

    from ternforge_server.loader import load_model

    from .calib.tokens import load_role, sequences
    from .quant.model import load_float_model

    t0 = time.time()
    model_dir, calib_dir = config["model_dir"], config["calib_dir"]
    seqs = sequences(load_role(calib_dir, "heldout"), int(config.get("seq_len", 256)), config.get("sequences"),
                     read_manifest_eos(calib_dir))
    bs = int(config.get("batch_size", 4))
    reference = load_float_model(model_dir)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ternforge-bench-") as tmp:
        models = {}
        for method, pack_dir in config["packed"].items():
            sub = assemble_submission(pack_dir, model_dir, Path(tmp) / method.replace("+", "_"))
            models[method] = load_model(sub, "cpu", torch.float32)[0]
            results[method] = {"tensors": tensor_errors(sub, model_dir)}
        acc = {m: {"nll": 0.0, "agree": 0, "kl": 0.0} for m in models}
        nll_ref, n = 0.0, 0
        for i in range(0, seqs.shape[0], bs):
            ids = seqs[i:i + bs]
            target = ids[:, 1:].reshape(-1)
            lr = _logits(reference, ids)[:, :-1]
            lr = lr.reshape(-1, lr.shape[-1])
            lp_ref = F.log_softmax(lr, -1)
            nll_ref += float(F.cross_entropy(lr, target, reduction="sum"))
            n += target.numel()
            for m, model in models.items():
                lc = _logits(model, ids)[:, :-1].reshape(-1, lr.shape[-1])
                acc[m]["nll"] += float(F.cross_entropy(lc, target, reduction="sum"))
                acc[m]["agree"] += int((lr.argmax(-1) == lc.argmax(-1)).sum())
                acc[m]["kl"] += float(F.kl_div(F.log_softmax(lc, -1), lp_ref, log_target=True, reduction="sum"))
            emit("progress", done=min(i + bs, seqs.shape[0]), total=seqs.shape[0], what="held-out batches")
    ppl_ref = math.exp(nll_ref / n)
    for m, a in acc.items():
        per = results[m]["tensors"]
        rel = [v["rel_frobenius"] for v in per.values()]
        results[m] = {"ppl": math.exp(a["nll"] / n), "ppl_ratio": math.exp(a["nll"] / n) / ppl_ref,
                      "top1_agreement": a["agree"] / n, "kl": a["kl"] / n,
                      "mean_rel_frobenius": sum(rel) / len(rel), "ternary_tensors": len(per),
                      "zero_share": sum(v["zero_share"] for v in per.values()) / len(per)}
    out = {"heldout": {"sequences": int(seqs.shape[0]), "seq_len": int(seqs.shape[1]), "positions": n},
           "ppl_reference": ppl_ref, "methods": results, "seconds": round(time.time() - t0, 1)}
    return out


if __name__ == "__main__":  # python -m ternforge.quality bench-quantize|bench-measure <config.json> <out.json>
    import sys

    step = {"bench-quantize": bench_quantize, "bench-measure": bench_measure}[sys.argv[1]]
    res = step(json.loads(Path(sys.argv[2]).read_text()))
    Path(sys.argv[3]).write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
