"""The C toolchain a submission ships for Triton, exercised with Triton's own launcher build
(`triton.runtime.build.compile_module_from_src`, which every Triton kernel launch goes through) inside a
bubblewrap namespace where no system compiler and none of this interpreter's headers are visible: it builds
and loads a Python extension with the shipped pieces (the ziglang wheel, headers in toolchain/include/), and
fails without them."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

PYDIR = Path(__file__).resolve().parents[1]
BWRAP = shutil.which("bwrap")
pytestmark = pytest.mark.skipif(BWRAP is None, reason="needs bubblewrap (npm test's pretest installs it)")

LAUNCHER = """
#include <Python.h>
static PyObject* launch(PyObject* self, PyObject* args) {
  int grid;
  if (!PyArg_ParseTuple(args, "i", &grid)) return NULL;
  return PyLong_FromLong(grid * 2);
}
static PyMethodDef methods[] = {{"launch", launch, METH_VARARGS, "a launcher's shape"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ternforge_probe_launcher", NULL, -1, methods};
PyMODINIT_FUNC PyInit_ternforge_probe_launcher(void) { return PyModule_Create(&module); }
"""

SCRIPT = """
import json, os, sys
from pathlib import Path
from ternforge_server.toolchain import ToolchainMissing, resolve_toolchain
sub, cache = Path(sys.argv[1]), Path(sys.argv[2])
env = dict(os.environ)
out = {}
try:
    out["toolchain"] = resolve_toolchain(env, sub, cache)
except ToolchainMissing as e:
    out["missing"] = str(e)
os.environ.clear(); os.environ.update(env)  # what vLLM and Triton would inherit
from triton.runtime.build import compile_module_from_src
try:
    mod = compile_module_from_src(sys.argv[3], "ternforge_probe_launcher")
    out["launch"] = mod.launch(21)
except Exception as e:
    out["triton_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def _submission_with_headers(root: Path) -> Path:
    """A submission's toolchain/ as vendor-wheels writes it, with this interpreter's own headers (the
    distribution package's extraction is tested in test/python-headers.test.ts)."""
    sub = root / "sub"
    inc = sub / "toolchain" / "include"
    version = sysconfig.get_python_version()
    shutil.copytree(sysconfig.get_paths()["include"], inc / f"python{version}")
    (sub / "toolchain" / "toolchain.json").write_text(json.dumps({
        "format": "ternforge-toolchain/1",
        "python_headers": {"python": version, "package": "test copy", "include_root": "include"}}))
    return sub


def _run(tmp: Path, sub: Path) -> dict:
    hide = [BWRAP, "--dev-bind", "/", "/"]
    for cc in (shutil.which("gcc"), shutil.which("clang")):
        if cc:
            hide += ["--ro-bind", "/dev/null", cc]
    hide += ["--tmpfs", sysconfig.get_paths()["include"]]
    cache = tmp / "cache"
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    env.update(PYTHONPATH=str(PYDIR), TRITON_CACHE_DIR=str(cache / "triton"), HOME=str(tmp / "home"))
    r = subprocess.run([*hide, sys.executable, "-c", SCRIPT, str(sub), str(cache), LAUNCHER],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_triton_builds_its_launcher_with_the_shipped_toolchain_where_the_box_has_none(tmp_path: Path) -> None:
    sub = _submission_with_headers(tmp_path)
    got = _run(tmp_path, sub)
    assert got.get("launch") == 42, got
    tc = got["toolchain"]
    assert tc["kind"] == "shipped"
    assert "no C compiler" in tc["system_missing"]
    assert Path(tc["cc"]).read_text().count("-m ziglang cc") == 1


def test_without_the_shipped_toolchain_the_check_and_triton_both_fail(tmp_path: Path) -> None:
    sub = tmp_path / "bare"
    sub.mkdir()
    got = _run(tmp_path, sub)
    assert "no C compiler" in got["missing"] and "ships no C toolchain" in got["missing"]
    assert "Failed to find C compiler" in got["triton_error"]  # what vLLM would have hit minutes in
