"""quantize.launch (quant/dist.py, PLAN.md section 4): the quantize worker under real torchrun processes with
the gloo backend on the tiny checkpoint, against one process.

- GPTQ under 2 ranks writes the bytes of one process: interchange, index and report.
- Distillation under 2 ranks takes the steps of one process at the same global batch and micro-batch: the
  same losses and the same latents, scales and Adam moments.
- A 2-rank distillation whose rank 1 is killed mid-run (torchrun names it) and resumed by one process ends
  where the uninterrupted one ends.
- launch.shard fsdp resumes one process's checkpoint on 2 ranks and ends within float tolerance of it.

Each rank runs with one CPU thread (torchrun sets OMP_NUM_THREADS=1), and so do the one-process runs here: a
CPU matmul's rounding can depend on the thread count (gptq_rel_err in the report does at 1e-8), which is no
matter of ranks. bench/scaleout.py measures the runs at other settings (the default micro-batch, the default
thread count) and their largest differences.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT = "kd-checkpoint.safetensors"


def quantize_config(fetch: Path, calib: Path, run: Path, method: str, **sections: dict) -> dict:
    """The tiny profile's quantize section (calibration shortened) plus the stage's paths under `run`."""
    c: dict = {"method": method, "group_size": 32, "seed": 0, "gptq": {"percdamp": 0.1, "actorder": True},
               "calibration": {"seq_len": 64, "sequences": 8, "batch_size": 4},
               "kd": {"steps": 4, "batch_size": 4, "checkpoint_every": 2, "micro_batch": 2},
               "model_dir": str(fetch / "model"), "source_json": str(fetch / "source.json"), "calib_dir": str(calib),
               "work_dir": str(run / "work"), "out_dir": str(run / "out")}
    for k, v in sections.items():
        c[k] = {**c.get(k, {}), **v}
    return c


def torchrun(nproc: int) -> list[str]:
    """The interpreter's arguments before a script or `-m`: torchrun with `nproc` ranks, or none for one."""
    return [] if nproc == 1 else ["-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
                                  "--max-restarts", "0", "--standalone"]


def start(config: dict, run: Path, nproc: int, threads: str | None = "1") -> subprocess.Popen:
    """`python -m ternforge quantize`, under torchrun with `nproc` ranks when more than one (the stage's
    launcher, lib/torchrun.ts torchrunArgs), stdout and stderr into files under `run`; OMP_NUM_THREADS=`threads`
    (None: the default, torch's thread count for one process, torchrun's 1 per rank)."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "out").mkdir(exist_ok=True)
    if nproc > 1:
        config = {**config, "launch": {**config.get("launch", {}), "nproc_per_node": nproc}}
    (run / "config.json").write_text(json.dumps(config))
    launcher = torchrun(nproc)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update({"PYTHONPATH": str(REPO / "python")}, **({} if threads is None else {"OMP_NUM_THREADS": threads}))
    return subprocess.Popen([sys.executable, *launcher, "-m", "ternforge", "quantize", "--config", str(run / "config.json")],
                            cwd=REPO, env=env, stdout=(run / "stdout").open("w"), stderr=(run / "stderr").open("w"))


def finish(p: subprocess.Popen, run: Path) -> dict:
    """The worker's result event, once it exited 0."""
    assert p.wait(timeout=600) == 0, (run / "stderr").read_text()[-4000:]
    events = [json.loads(line) for line in (run / "stdout").read_text().splitlines()]
    results = [e for e in events if e["event"] == "result"]
    assert len(results) == 1, "one result event (rank 0's) on the shared stdout"
    return results[0]


def quantize(config: dict, run: Path, nproc: int, threads: str | None = "1") -> dict:
    return finish(start(config, run, nproc, threads), run)


def files(run: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((run / "out").iterdir())}


def test_gptq_under_two_ranks_writes_the_bytes_of_one_process(tiny_fetch_dir: Path, tiny_calib: Path, tmp_path: Path) -> None:
    # 12 sequences in batches of 4: three batches, so rank 0 holds two and rank 1 one (a round without a batch).
    cfg = quantize_config(tiny_fetch_dir, tiny_calib, tmp_path, "gptq", calibration={"sequences": 12})
    one = quantize({**cfg, "work_dir": str(tmp_path / "one" / "work"), "out_dir": str(tmp_path / "one" / "out")},
                   tmp_path / "one", 1)
    two = quantize({**cfg, "work_dir": str(tmp_path / "two" / "work"), "out_dir": str(tmp_path / "two" / "out")},
                   tmp_path / "two", 2)
    a, b = files(tmp_path / "one"), files(tmp_path / "two")
    assert sorted(a) == ["index.json", "interchange-00001-of-00001.safetensors", "quantize_report.json"]
    assert {n: a[n] == b[n] for n in a} == {n: True for n in a}
    assert "distributed" not in one
    d = two["distributed"]
    assert (d["world_size"], d["backend"], [r["rank"] for r in d["ranks"]]) == (2, "gloo", [0, 1])
    assert all(r["total_s"] >= r["gptq_s"] > 0 for r in d["ranks"])
    assert {k: v for k, v in two.items() if k != "distributed"} == one


def _kd_config(fetch: Path, calib: Path, run: Path) -> dict:
    # The teacher's chat data in two batches (chatdata.ANSWER_BATCH 16) of answers to 20 snippet requests and
    # of 4 x 5 self-written draws: rank 0 writes the first batch of each, rank 1 the second. (tiny's random
    # teacher never ends a request, so no draw is kept: test_chat_batches_split_by_rank covers the keeping.)
    return quantize_config(fetch, calib, run, "gptq+kd",
                           kd={"steps": 10, "chat_prompts": 20, "chat_self_prompts": 5, "chat_max_new": 6})


def state(run: Path) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """The distillation's last checkpoint: U, scales and Adam moments, and the losses of every step."""
    work = run / "work"
    return load_file(str(work / CHECKPOINT)), json.loads((work / "kd-checkpoint.json").read_text())["history"]


@pytest.fixture(scope="module")
def one_process_kd(tiny_fetch_dir: Path, tiny_calib: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("kd-one")
    quantize(_kd_config(tiny_fetch_dir, tiny_calib, run), run, 1)
    return run


def test_distillation_under_two_ranks_takes_the_steps_of_one_process(one_process_kd: Path, tiny_fetch_dir: Path,
                                                                      tiny_calib: Path, tmp_path: Path) -> None:
    two = quantize(_kd_config(tiny_fetch_dir, tiny_calib, tmp_path), tmp_path, 2)
    (t1, h1), (t2, h2) = state(one_process_kd), state(tmp_path)
    assert [r["step"] for r in h2] == list(range(1, 11))
    # Equal: each rank's micro-batch is one of one process's, and a sum of two fp32 gradients is one rounding.
    assert [(r["loss"], r["kl"], r["grad_norm"]) for r in h1] == [(r["loss"], r["kl"], r["grad_norm"]) for r in h2]
    assert sorted(t1) == sorted(t2) and all(torch.equal(t1[k], t2[k]) for k in t1)
    assert files(one_process_kd) == files(tmp_path)
    assert [set(r) for r in two["distributed"]["ranks"]] == [{"rank", "total_s", "teacher_data_s", "gptq_s",
                                                              "block_ap_s", "distill_s"}] * 2


def _rank_pid(torchrun: int, rank: int) -> int | None:
    """The pid of the worker torchrun started as `rank` (its environment says RANK=<rank>)."""
    children = Path(f"/proc/{torchrun}/task/{torchrun}/children")
    for pid in children.read_text().split() if children.exists() else []:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return int(pid)
    return None


def test_a_run_killed_at_a_rank_resumes_at_another_rank_count_where_the_whole_run_ends(
        one_process_kd: Path, tiny_fetch_dir: Path, tiny_calib: Path, tmp_path: Path) -> None:
    cfg = _kd_config(tiny_fetch_dir, tiny_calib, tmp_path)
    p = start(cfg, tmp_path, 2)
    checkpoint = tmp_path / "work" / "kd-checkpoint.json"
    deadline = time.monotonic() + 300
    while not checkpoint.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = _rank_pid(p.pid, 1)
    assert pid is not None, (tmp_path / "stderr").read_text()[-3000:]
    os.kill(pid, signal.SIGKILL)
    assert p.wait(timeout=120) != 0
    stderr = (tmp_path / "stderr").read_text()
    cause = stderr.split("Root Cause (first observed failure):")[1]
    assert "rank      : 1 (local_rank: 1)" in cause and "exitcode  : -9" in cause, cause
    steps = json.loads(checkpoint.read_text())["step"]
    assert 2 <= steps < 10, "killed mid-distillation"

    resumed = quantize(cfg, tmp_path, 1)  # one process from the 2-rank run's checkpoint
    assert "distributed" not in resumed
    (t1, h1), (t2, h2) = state(one_process_kd), state(tmp_path)
    assert h1 == h2
    assert all(torch.equal(t1[k], t2[k]) for k in t1)
    assert files(one_process_kd) == files(tmp_path)


def test_fsdp_resumes_one_process_checkpoint_sharded_and_ends_within_tolerance(
        one_process_kd: Path, tiny_fetch_dir: Path, tiny_calib: Path, tmp_path: Path) -> None:
    """launch.shard fsdp: one process distils 4 of the 10 steps (a constant rate lets `steps` grow on resume);
    2 ranks resume its checkpoint scattered into row shards of U, the scales and their Adam moments, and end
    where one process's 10 steps end, within float tolerance: FSDP's reduce-scatter averages over the ranks
    and the stage multiplies back, and the gradient norm is summed from shards (largest differences measured
    here: U 1.2e-7, loss 0, on 4 steps; bench/scaleout.py has 10 steps from scratch)."""
    cfg = _kd_config(tiny_fetch_dir, tiny_calib, tmp_path)
    quantize({**cfg, "kd": {**cfg["kd"], "steps": 4}}, tmp_path, 1)
    sharded = quantize({**cfg, "launch": {"shard": "fsdp"}}, tmp_path, 2)
    assert sharded["distributed"]["world_size"] == 2
    (t1, h1), (t2, h2) = state(one_process_kd), state(tmp_path)
    assert [r["step"] for r in h2] == list(range(1, 11)) and h2[:4] == h1[:4]
    worst_loss = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(h1, h2))
    worst = {kind: max(float((t1[k].double() - t2[k].double()).abs().max()) for k in t1 if k.endswith(kind))
             for kind in (".U", ".scale")}
    assert worst_loss <= 1e-5 and worst[".U"] <= 1e-4 and worst[".scale"] <= 1e-5, (worst_loss, worst)


def _chat(fetch: Path, run: Path, nproc: int) -> dict:
    """scaleout_chat.py's line, as one process or under torchrun (one thread per process, as above)."""
    run.mkdir(parents=True, exist_ok=True)
    launcher = torchrun(nproc)
    env = {**os.environ, "PYTHONPATH": str(REPO / "python"), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, *launcher, str(Path(__file__).with_name("scaleout_chat.py")), str(fetch)],
                       cwd=run, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_chat_batches_split_by_rank_and_every_rank_gets_one_process_data(tiny_fetch_dir: Path, tmp_path: Path) -> None:
    """chatdata.by_rank: 2 ranks generate alternate batches of the teacher's self-written requests (4 kept,
    of at most 16 draws in batches of 3; most draws are dropped) and of its answers (6, of
    several lengths, in batches of 2), and every rank ends with one process's requests and transcripts."""
    one, two = _chat(tiny_fetch_dir, tmp_path / "one", 1), _chat(tiny_fetch_dir, tmp_path / "two", 2)
    assert len(one["requests"]) == 4 and len(one["transcripts"]) == 6
    assert len({len(t) for t in one["transcripts"]}) > 2
    assert {k: two[k] for k in ("requests", "transcripts", "stopped")} == \
        {k: one[k] for k in ("requests", "transcripts", "stopped")}
    # Each rank made about half the generate() calls; the last round of draws may add one that is not used.
    (calls,), (r0, r1) = one["calls"], two["calls"]
    assert r0 + r1 in (calls, calls + 1) and r0 - r1 in (0, 1) and r1 >= 2, (calls, r0, r1)
