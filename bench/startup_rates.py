"""The measured rates behind the start-up budget (lib/submission/startup-budget.ts), on this machine.

    $TERNFORGE_VENV/bin/python bench/startup_rates.py                       # sha256, dequantize, bf16 write
    $TERNFORGE_VENV/bin/python bench/startup_rates.py --wheels DIR --python python3.12 --lock LOCK
                                                                            # and the install, as serve.sh runs it

Rewrites the `measured` part of bench/startup-rates.json (the `estimated` part, for what needs a GPU, is
kept as it is). Each rate is taken with the server's own code where there is one:
  sha256      loader.sha256_file over a 1 GiB file just written (page cache warm, as after a copy)
  dequantize  packing.unpack_2bit + packing.dequantize to bf16 at group size 32, one 4B-sized matrix
              ([9216, 2560], the MLP's up projection) at a time, torch on one thread and on all
  write       safetensors.torch.save_file of bf16 tensors into /dev/shm (tmpfs), 1 GiB
  install     serve.sh's command: uv (unpacked from its wheel) installs the lock offline into a fresh
              --target with a cold cache on the same file system; the wheel bytes and the installed bytes
Every rate is given per wall second and per CPU second (the process's user + system time); the budget
uses the wall figure of the measured run, and the CPU figure shows how much was lost to other work
running at the same time (`load_average`).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
OUT = ROOT / "bench" / "startup-rates.json"


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(fn, children: bool = False) -> tuple[float, float]:
    clock = cpu_children if children else cpu_self
    c0, t0 = clock(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, clock() - c0


def measure_sha256(scratch: Path) -> dict:
    from ternforge_server.loader import sha256_file
    path = scratch / "shard.bin"
    size = 1 << 30
    with open(path, "wb") as f:
        block = os.urandom(16 << 20)
        for _ in range(size // len(block)):
            f.write(block)
    sha256_file(path)  # once to warm the page cache, as the copied submission is
    wall, cpu = timed(lambda: sha256_file(path))
    path.unlink()
    return {"bytes": size, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "gb_per_wall_s": round(size / 1e9 / wall, 3), "gb_per_cpu_s": round(size / 1e9 / cpu, 3),
            "code": "python/ternforge_server/loader.py sha256_file (hashlib, 8 MiB reads, one thread)"}


def measure_dequantize() -> dict:
    import torch
    from ternforge_server.packing import dequantize, pack_2bit, unpack_2bit
    out, cols, g = 9216, 2560, 32
    t = torch.randint(-1, 2, (out, cols), dtype=torch.int8)
    codes, scale = pack_2bit(t), torch.rand(out, cols // g, dtype=torch.float32)
    reps = 8
    rows = {}
    for threads in (1, torch.get_num_threads()):
        torch.set_num_threads(threads)
        dequantize(unpack_2bit(codes, cols), scale, g, torch.bfloat16)  # warm-up

        def run() -> None:
            for _ in range(reps):
                dequantize(unpack_2bit(codes, cols), scale, g, torch.bfloat16)
        wall, cpu = timed(run)
        n = out * cols * reps
        rows[f"threads_{threads}"] = {"threads": threads, "weights": n, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                                      "weights_per_wall_s": round(n / wall), "weights_per_cpu_s": round(n / cpu)}
    return {**rows, "shape": [out, cols], "group_size": g,
            "code": "python/ternforge_server/packing.py unpack_2bit + dequantize(dtype=bfloat16), torch CPU "
                    f"{__import__('torch').__version__}"}


def measure_write(shm: Path) -> dict:
    import torch
    from safetensors.torch import save_file
    tensors = {f"layer{i}.weight": torch.randn(9216, 2560).to(torch.bfloat16) for i in range(23)}
    size = sum(t.numel() * 2 for t in tensors.values())
    d = Path(tempfile.mkdtemp(dir=shm, prefix="ternforge-rate-"))

    def raw() -> None:  # as export-bf16 writes: tensor by tensor, bytes appended to one file
        with open(d / "raw.safetensors", "wb") as f:
            for t in tensors.values():
                f.write(t.contiguous().cpu().view(torch.uint8).numpy().tobytes())
    try:
        wall, cpu = timed(lambda: save_file(tensors, str(d / "model.safetensors")))
        (d / "model.safetensors").unlink()
        raw_wall, raw_cpu = timed(raw)
    finally:
        shutil.rmtree(d)
    return {"bytes": size, "target": str(shm), "wall_s": round(raw_wall, 3), "cpu_s": round(raw_cpu, 3),
            "gb_per_wall_s": round(size / 1e9 / raw_wall, 3), "gb_per_cpu_s": round(size / 1e9 / raw_cpu, 3),
            "code": "export-bf16's write: per tensor .view(torch.uint8).numpy().tobytes() appended to one file in tmpfs",
            "save_file": {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "gb_per_cpu_s": round(size / 1e9 / cpu, 3),
                          "code": "safetensors.torch.save_file, for comparison"}}


def measure_install(wheels: Path, python: str, lock: Path, scratch: Path) -> dict:
    """serve.sh's install: uv from its wheel, offline, hash-checked, --target on the cache's file system."""
    uv_whl = next(wheels.glob("uv-*.whl"))
    uv = scratch / "uv"
    with zipfile.ZipFile(uv_whl) as z:
        name = next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))
        uv.write_bytes(z.read(name))
    uv.chmod(0o755)
    reqs = scratch / "requirements.txt"
    lines = [l for l in lock.read_text().splitlines() if l.strip() and not l.startswith("#") and not l.startswith("uv==")]
    reqs.write_text("\n".join(lines) + "\n")
    target, cache = scratch / "packages", scratch / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update(UV_CACHE_DIR=str(cache), UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1")
    cmd = [str(uv), "pip", "install", "--offline", "--no-index", "--no-config", "--find-links", str(wheels),
           "--require-hashes", "--only-binary", ":all:", "--target", str(target), "--python", python, "-q", "-r", str(reqs)]
    subprocess.run(["sync"], check=True)
    wall, cpu = timed(lambda: subprocess.run(cmd, check=True, env=env), children=True)
    rm_wall, _ = timed(lambda: shutil.rmtree(cache))
    wheel_bytes = sum(p.stat().st_size for p in wheels.glob("*.whl") if not p.name.startswith("uv-"))
    files = installed = 0
    for root, _, names in os.walk(target):
        for n in names:
            files += 1
            installed += os.lstat(os.path.join(root, n)).st_size
    shutil.rmtree(target)
    return {"wheels": len(lines), "wheel_bytes": wheel_bytes, "installed_bytes": installed, "installed_files": files,
            "wall_s": round(wall + rm_wall, 3), "uv_wall_s": round(wall, 3), "cache_removal_s": round(rm_wall, 3),
            "cpu_s": round(cpu, 3), "wheel_gb_per_wall_s": round(wheel_bytes / 1e9 / (wall + rm_wall), 4),
            "wheel_gb_per_cpu_s": round(wheel_bytes / 1e9 / cpu, 4),
            "python": subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True).stdout.strip(),
            "command": "serve.sh: uv pip install --offline --no-index --find-links wheels --require-hashes --target <staging> --python <python3.12>"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheels", type=Path, help="a wheels/ directory to measure the install with")
    ap.add_argument("--python", default="python3.12", help="the interpreter the install is for")
    ap.add_argument("--lock", type=Path, help="the locked requirements (name==version --hash=...) of --wheels")
    ap.add_argument("--label", default="", help="what --wheels is (recorded)")
    ap.add_argument("--only", choices=["install", "rates"], help="measure only this part")
    args = ap.parse_args()
    doc = json.loads(OUT.read_text()) if OUT.exists() else {"measured": {}, "estimated": {}}
    m = doc.setdefault("measured", {})
    m["machine"] = {"cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="ternforge-rates-") as tmp:
        scratch = Path(tmp)
        if args.only != "install":
            m["sha256"] = measure_sha256(scratch)
            m["dequantize"] = measure_dequantize()
            m["write_bf16"] = measure_write(Path("/dev/shm") if Path("/dev/shm").is_dir() else scratch)
        if args.wheels is not None and args.only != "rates":
            if args.lock is None:
                sys.exit("--wheels needs --lock")
            m["install"] = {**measure_install(args.wheels, args.python, args.lock, scratch), "label": args.label}
    m["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(m, indent=2))


if __name__ == "__main__":
    main()
