"""The C toolchain Triton needs, checked before vLLM is started.

Triton (3.6, `triton/runtime/build.py`) compiles a small C launcher for every kernel it loads, with `$CC`,
else `gcc`, else `clang` from PATH, and `-I` the interpreter's include directory (sysconfig's, `Python.h`):
every Gated DeltaNet kernel of vLLM and every torch.compile kernel goes through it. A fresh Ubuntu 24.04 has
neither gcc nor python3.12-dev, and vLLM would find out minutes into its start-up. `check_toolchain` compiles
one file that includes Python.h, with the compiler Triton would pick and the flags it passes, in a fraction of
a second, and says which piece is missing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
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
        cmd = [cc, str(src), "-O0", "-shared", "-fPIC", "-o", str(so), f"-I{include}"]
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
