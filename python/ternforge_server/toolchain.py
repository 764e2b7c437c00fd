"""The C toolchain Triton needs, checked before vLLM is started.

Triton (3.6, `triton/runtime/build.py`) compiles a small C launcher for every kernel it loads, with `$CC`,
else `gcc`, else `clang` from PATH, and `-I` the interpreter's include directory (sysconfig's, `Python.h`):
every Gated DeltaNet kernel of vLLM and every torch.compile kernel goes through it. A fresh Ubuntu 24.04 has
neither gcc nor python3.12-dev, and vLLM would find out minutes into its start-up. `check_toolchain` compiles
one file that includes Python.h, with the compiler Triton would pick and the flags it passes, in a fraction of
a second, and says which piece is missing.

When the box's own toolchain fails the check, `resolve_toolchain` uses the one the submission ships:
vendor-wheels puts the CPython headers of the target's Python (a pinned distribution package, extracted into
`toolchain/include/`, described by `toolchain/toolchain.json`) in the submission, and the serving lock has
the `ziglang` wheel (Zig's clang, a C compiler as a Python package). A two-line `cc` script in the cache root
runs `python -m ziglang cc` with the shipped headers after whatever `-I` Triton passes (a system Python.h,
when there is one, wins), and CC points at it for vLLM and everything it starts.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

_PROBE = '#include <Python.h>\nint ternforge_probe(void) { return PY_VERSION_HEX > 0; }\n'


class ToolchainMissing(Exception):
    """No working C compiler, or no Python headers; the message says which and how to get it."""


def python_include() -> str:
    """The include directory Triton passes (sysconfig's, with Debian's posix_local mapped as Triton does)."""
    scheme = sysconfig.get_default_scheme()
    if scheme == "posix_local":
        scheme = "posix_prefix"
    return sysconfig.get_paths(scheme=scheme)["include"]


def find_cc(env: dict) -> str | None:
    """The compiler Triton would use under `env`: $CC, else gcc, else clang on env's PATH."""
    if env.get("CC"):
        return env["CC"]
    path = env.get("PATH", os.defpath)
    return shutil.which("gcc", path=path) or shutil.which("clang", path=path)


def check_toolchain(env: dict, timeout: float = 20.0) -> dict:
    """{cc, python_include, seconds} when a shared object including Python.h builds under `env`; else
    ToolchainMissing naming the missing piece."""
    t0 = time.perf_counter()
    cc = find_cc(env)
    include = python_include()
    if cc is None:
        raise ToolchainMissing("no C compiler: CC is unset and neither gcc nor clang is on PATH "
                               "(Ubuntu: apt install gcc)")
    with tempfile.TemporaryDirectory(prefix="ternforge-cc-") as tmp:
        src, so = Path(tmp) / "probe.c", Path(tmp) / "probe.so"
        src.write_text(_PROBE)
        # Triton's own flags (build.py): with Zig they also pick the libc stubs it builds and caches, -O3's
        # once (about 4 CPU-s cold here) where -O0 would build debug ones (about 20 CPU-s) Triton never uses.
        cmd = [cc, str(src), "-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", str(so), f"-I{include}"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)
        except FileNotFoundError:
            raise ToolchainMissing(f"the C compiler {cc} (CC) does not exist") from None
        except PermissionError:
            raise ToolchainMissing(f"the C compiler {cc} (CC) is not executable") from None
        except subprocess.TimeoutExpired:
            raise ToolchainMissing(f"the C compiler {cc} did not build a one-line file in {timeout:.0f} s") from None
        if r.returncode != 0 or not so.is_file():
            out = (r.stderr or r.stdout).strip()
            if "Python.h" in out:
                raise ToolchainMissing(f"the interpreter's headers are missing: no Python.h in {include} "
                                       f"(Ubuntu: apt install python{sysconfig.get_python_version()}-dev)")
            last = (out.splitlines() or [f"exit code {r.returncode}"])[-1]
            raise ToolchainMissing(f"the C compiler {cc} cannot build a shared object: {last}")
    return {"cc": cc, "python_include": include, "seconds": round(time.perf_counter() - t0, 3)}


TOOLCHAIN_RECORD = "toolchain.json"


def shipped_headers(sub: Path) -> tuple[Path, dict] | None:
    """(the include root, the record) of the headers the submission ships for this interpreter, or None."""
    from .contract import SUBMISSION

    root = Path(sub) / SUBMISSION["toolchain_dir"]
    try:
        record = json.loads((root / TOOLCHAIN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    headers = record.get("python_headers") or {}
    if headers.get("python") != sysconfig.get_python_version():
        return None
    return root / headers.get("include_root", "include"), record


def write_cc_wrapper(bin_dir: Path, include_root: Path) -> Path:
    """`bin_dir/cc`: Zig's C compiler (the ziglang wheel, on this interpreter's path) with the shipped CPython
    headers searched after every -I the caller passes."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    version = sysconfig.get_python_version()
    flags = " ".join(f"-isystem {shlex.quote(str(d))}" for d in (include_root / f"python{version}", include_root))
    cc = bin_dir / "cc"
    tmp = bin_dir / f".cc.tmp-{os.getpid()}"
    tmp.write_text("#!/bin/sh\n# Written by ternforge_server (toolchain.py): the shipped C toolchain for Triton's launchers.\n"
                   f'exec {shlex.quote(sys.executable)} -m ziglang cc "$@" {flags}\n')
    tmp.chmod(0o755)
    os.replace(tmp, cc)
    return cc


def resolve_toolchain(env: dict, sub: Path, cache: Path) -> dict:
    """The toolchain Triton will use under `env`: the box's own when it passes the check, else the shipped
    one (env gains CC and Zig's cache directories). Raises ToolchainMissing naming both when neither works."""
    try:
        return {"kind": "system", **check_toolchain(env)}
    except ToolchainMissing as e:
        system = str(e)
    found = shipped_headers(sub)
    if found is None:
        raise ToolchainMissing(f"{system}; and the submission ships no C toolchain for CPython "
                               f"{sysconfig.get_python_version()}")
    include_root, record = found
    trial = dict(env)
    trial["CC"] = str(write_cc_wrapper(cache / "bin", include_root))
    trial["ZIG_GLOBAL_CACHE_DIR"] = str(cache / "zig")
    trial["ZIG_LOCAL_CACHE_DIR"] = str(cache / "zig-local")
    try:
        got = check_toolchain(trial, timeout=120.0)  # Zig builds its libc stubs once, seconds
    except ToolchainMissing as e:
        raise ToolchainMissing(f"{system}; and the shipped toolchain fails too: {e}") from None
    env.update({k: trial[k] for k in ("CC", "ZIG_GLOBAL_CACHE_DIR", "ZIG_LOCAL_CACHE_DIR")})
    return {"kind": "shipped", "system_missing": system, "headers": record.get("python_headers"), **got}
