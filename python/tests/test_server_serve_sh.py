"""serve/serve.sh: names every missing wheel and refuses to start, before creating anything."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SERVE_SH = Path(__file__).resolve().parents[2] / "serve" / "serve.sh"


def _submission(tmp: Path, reqs: str, wheels: list[str]) -> Path:
    sub = tmp / "sub"
    (sub / "wheels").mkdir(parents=True)
    shutil.copy(SERVE_SH, sub / "serve.sh")
    (sub / "requirements-serve.txt").write_text(reqs)
    for w in wheels:
        (sub / "wheels" / w).write_bytes(b"not really a wheel")
    return sub


def _run(sub: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    return subprocess.run(["bash", str(sub / "serve.sh")], capture_output=True, text=True, timeout=60,
                          env={**env, "PORT": "1"})


def test_names_each_missing_wheel_and_refuses_to_start(tmp_path: Path) -> None:
    sub = _submission(tmp_path, "torch==2.13.0\nstarlette==1.10.0\nuvicorn==0.55.0\nzope.interface==7.2\n",
                      ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                       "starlette-1.10.0-py3-none-any.whl", "zope_interface-7.2-cp311-cp311-linux_x86_64.whl"])
    r = _run(sub)
    assert r.returncode == 3
    assert "missing wheels in" in r.stderr and r.stderr.strip().endswith("uvicorn==0.55.0")
    assert not (sub / ".venv").exists()


def test_wrong_version_counts_as_missing(tmp_path: Path) -> None:
    sub = _submission(tmp_path, "starlette==1.10.0  # pinned\n", ["starlette-1.9.0-py3-none-any.whl"])
    r = _run(sub)
    assert r.returncode == 3 and "starlette==1.10.0" in r.stderr


def test_unpinned_requirement_is_refused(tmp_path: Path) -> None:
    sub = _submission(tmp_path, "starlette>=1.0\n", ["starlette-1.10.0-py3-none-any.whl"])
    r = _run(sub)
    assert r.returncode == 1 and "not an exact pin: starlette>=1.0" in r.stderr
