"""Bench (not CI): quantize.launch against one process on the tiny checkpoint at the settings the tests leave
out (python/tests/test_scaleout.py pins one CPU thread and an explicit micro-batch, where the bytes are
equal): the default thread count, the default micro-batch (batch_size / ranks per rank), 4 ranks, launch.shard fsdp. Reports the
largest differences of the report's figures, the latents, scales and losses, and the codes that differ.
Writes bench/results/scaleout.json.

    nice -n 10 .ternforge/venv/bin/python bench/scaleout.py      (about 6 minutes on 2 cores)
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "python" / "tests")]

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from test_scaleout import files, quantize, quantize_config, state  # noqa: E402

INTERCHANGE = "interchange-00001-of-00001.safetensors"


def _run(tmp: Path, name: str, method: str, nproc: int, threads: str | None, **sections: dict) -> tuple[Path, float]:
    run = tmp / name
    cfg = quantize_config(tmp / "fetch", tmp / "calib", run, method, **sections)
    t0 = time.monotonic()
    quantize(cfg, run, nproc, threads)
    return run, round(time.monotonic() - t0, 1)


def _codes_differ(a: Path, b: Path) -> dict:
    ta, tb = load_file(str(a / "out" / INTERCHANGE)), load_file(str(b / "out" / INTERCHANGE))
    codes = [k for k in ta if ta[k].dtype == torch.int8]  # the interchange's ternary codes, int8 in {-1, 0, 1}
    scales = [k for k in ta if k.endswith(".scale")]
    return {"codes_differing": sum(int((ta[k] != tb[k]).sum()) for k in codes),
            "codes": sum(ta[k].numel() for k in codes),
            "max_abs_scale_diff": max(float((ta[k] - tb[k]).abs().max()) for k in scales)}


def _kd_diff(a: Path, b: Path) -> dict:
    (t1, h1), (t2, h2) = state(a), state(b)
    def worst(suffix: str) -> float:
        return max(float((t1[k].double() - t2[k].double()).abs().max()) for k in t1 if k.endswith(suffix))
    return {"max_abs_U_diff": worst(".U"), "max_abs_scale_diff": worst(".scale"),
            "max_abs_loss_diff": max(abs(x["loss"] - y["loss"]) for x, y in zip(h1, h2)),
            "max_rel_loss_diff": max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(h1, h2)),
            "steps": len(h1), **_codes_differ(a, b)}


def main() -> None:
    from ternforge.calib import fetch
    from ternforge.sources.tiny import generate

    out: dict = {"machine": "CPU (2 cores), torch " + torch.__version__ + ", gloo", "runs": {}}
    with tempfile.TemporaryDirectory(prefix="ternforge-scaleout-") as d:
        tmp = Path(d)
        generate(tmp / "fetch", seed=0, max_shard_bytes=2_000_000)
        profile = json.loads((ROOT / "profiles" / "tiny.json").read_text())
        assert fetch.main({"model_dir": str(tmp / "fetch" / "model"), "out": str(tmp / "calib"),
                           "sources": profile["stages"]["fetch-calib"]["sources"]})["ok"]
        # GPTQ at the default thread count (one process: torch's; each rank: 1).
        g1, s1 = _run(tmp, "gptq-1", "gptq", 1, None, calibration={"sequences": 12})
        g2, s2 = _run(tmp, "gptq-2", "gptq", 2, None, calibration={"sequences": 12})
        fa, fb = files(g1), files(g2)
        ra, rb = (json.loads(f["quantize_report.json"])["gptq_rel_err"] for f in (fa, fb))
        out["runs"]["gptq, 1 process (default threads) vs 2 ranks"] = {
            "seconds": [s1, s2], "interchange_identical": fa[INTERCHANGE] == fb[INTERCHANGE],
            "index_identical": fa["index.json"] == fb["index.json"],
            "max_abs_gptq_rel_err_diff": max(abs(ra[k] - rb[k]) for k in ra)}
        # Distillation at the default micro-batch: one process steps 4 rows at once, each rank 2.
        kd = {"kd": {"steps": 10, "micro_batch": 0}}
        k1, s1 = _run(tmp, "kd-1", "gptq+kd", 1, None, **kd)
        k2, s2 = _run(tmp, "kd-2", "gptq+kd", 2, None, **kd)
        out["runs"]["gptq+kd 10 steps, 1 process (micro-batch 4, default threads) vs 2 ranks (2 rows each)"] = {
            "seconds": [s1, s2], **_kd_diff(k1, k2)}
        # 4 ranks of 1 row against one process at micro-batch 1: gloo's 4-way sum is not one process's order.
        kd1 = {"kd": {"steps": 10, "micro_batch": 1}, "calibration": {"sequences": 16}}  # a GPTQ batch per rank
        m1, s1 = _run(tmp, "kd-mb1-1", "gptq+kd", 1, "1", **kd1)
        m4, s4 = _run(tmp, "kd-mb1-4", "gptq+kd", 4, "1", **kd1)
        out["runs"]["gptq+kd 10 steps, micro-batch 1, 1 thread: 1 process vs 4 ranks"] = {
            "seconds": [s1, s4], **_kd_diff(m1, m4)}
        # launch.shard fsdp from scratch, 2 ranks of 2 rows, against one process at micro-batch 2.
        kd2 = {"kd": {"steps": 10, "micro_batch": 2}}
        f1, s1 = _run(tmp, "kd-mb2-1", "gptq+kd", 1, "1", **kd2)
        f2, s2 = _run(tmp, "kd-mb2-2-fsdp", "gptq+kd", 2, "1", **kd2, launch={"shard": "fsdp"})
        out["runs"]["gptq+kd 10 steps, micro-batch 2, 1 thread: 1 process vs 2 ranks under launch.shard fsdp"] = {
            "seconds": [s1, s2], **_kd_diff(f1, f2)}
    path = ROOT / "bench" / "results" / "scaleout.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
