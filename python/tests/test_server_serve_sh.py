"""serve/serve.sh: finds an interpreter of the wheels' version, names every missing wheel, installs the lock with
the vendored uv into .packages (no venv, no pip, no network), and leaves nothing half-written when that fails.

The install tests use real processes: the uv binary of the test venv (the pinned uv==0.13.9) packed as a wheel
the way PyPI ships it, a small pure-Python wheel with a .pth file, and a stub server package that reports what
it can import.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

SERVE_SH = Path(__file__).resolve().parents[2] / "serve" / "serve.sh"
PY_VERSION = "%d.%d" % sys.version_info[:2]
HEADER = f"# Locked by ternforge vendor-wheels for CPython {PY_VERSION} x86_64-manylinux_2_28 (uv 0.13.9).\n"
UV_WHEEL = "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"


def _submission(tmp: Path, reqs: str, wheels: list[str], header: str = HEADER) -> Path:
    sub = tmp / "sub"
    (sub / "wheels").mkdir(parents=True)
    shutil.copy(SERVE_SH, sub / "serve.sh")
    (sub / "requirements-serve.txt").write_text(header + reqs)
    for w in wheels:
        (sub / "wheels" / w).write_bytes(b"not really a wheel")
    return sub


def _run(sub: Path, **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    # The interpreter of this test session first on PATH, as python<X.Y> would be on the grader's box.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return subprocess.run(["bash", str(sub / "serve.sh")], capture_output=True, text=True, timeout=300,
                          env={**env, "PORT": "1", **env_extra})


def test_names_each_missing_wheel_and_refuses_to_start(tmp_path: Path) -> None:
    sub = _submission(tmp_path, "torch==2.13.0\nstarlette==1.10.0\nuvicorn==0.55.0\nzope.interface==7.2\nuv==0.13.9\n",
                      ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", UV_WHEEL,
                       "starlette-1.10.0-py3-none-any.whl", "zope_interface-7.2-cp311-cp311-linux_x86_64.whl"])
    r = _run(sub)
    assert r.returncode == 3
    assert "missing wheels in" in r.stderr and r.stderr.strip().endswith("uvicorn==0.55.0")
    assert not (sub / ".packages").exists()


def test_wrong_version_counts_as_missing(tmp_path: Path) -> None:
    sub = _submission(tmp_path, "starlette==1.10.0  # pinned\nuv==0.13.9\n", ["starlette-1.9.0-py3-none-any.whl", UV_WHEEL])
    r = _run(sub)
    assert r.returncode == 3 and "starlette==1.10.0" in r.stderr


def test_unpinned_requirement_is_refused(tmp_path: Path) -> None:
    sub = _submission(tmp_path, "starlette>=1.0\n", ["starlette-1.10.0-py3-none-any.whl"])
    r = _run(sub)
    assert r.returncode == 1 and "not an exact pin: starlette>=1.0" in r.stderr


def test_a_lock_without_uv_names_the_installer_as_missing(tmp_path: Path) -> None:
    sub = _submission(tmp_path, "starlette==1.10.0\n", ["starlette-1.10.0-py3-none-any.whl"])
    r = _run(sub)
    assert r.returncode == 3 and "uv (the installer serve.sh runs" in r.stderr


def test_no_interpreter_of_the_wheels_version_is_named(tmp_path: Path) -> None:
    header = "# Locked by ternforge vendor-wheels for CPython 3.99 x86_64-manylinux_2_31 (uv 0.13.9).\n"
    sub = _submission(tmp_path, "starlette==1.10.0\nuv==0.13.9\n", ["starlette-1.10.0-py3-none-any.whl", UV_WHEEL], header)
    r = _run(sub)
    assert r.returncode == 2
    assert "need CPython 3.99 (the wheels in wheels/ are built for it): python3.99: not found; " \
           f"python3: {PY_VERSION}" in r.stderr, r.stderr
    assert "set PYTHON to a python3.99" in r.stderr
    # PYTHON names the interpreter; one of another version is refused, not used.
    r = _run(sub, PYTHON=sys.executable)
    assert r.returncode == 2 and f"{sys.executable}: {PY_VERSION}" in r.stderr
    assert not (sub / ".packages").exists()


def test_a_lock_without_a_version_header_wants_3_12(tmp_path: Path) -> None:
    sub = _submission(tmp_path, "uv==0.13.9\n", [UV_WHEEL], header="")
    r = _run(sub, PYTHON=sys.executable)
    if PY_VERSION != "3.12":
        assert r.returncode == 2 and "need CPython 3.12" in r.stderr


# --- real installs -------------------------------------------------------------------------------------------

def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _wheel(path: Path, files: dict[str, bytes], dist: str, version: str, tag: str = "py3-none-any") -> None:
    """A wheel as PEP 427 has it: the files, METADATA, WHEEL and a RECORD with each file's hash."""
    info = f"{dist}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()}
    record = "\n".join(_record_line(n, d) for n, d in files.items()) + f"\n{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{info}/RECORD", record)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def uv_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned uv (the test venv's, uv==0.13.9 in python/requirements.txt) as a wheel, laid out like PyPI's."""
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        pytest.skip(f"no uv beside {sys.executable} (python/requirements.txt pins uv==0.13.9)")
    out = tmp_path_factory.mktemp("uvwheel") / UV_WHEEL
    _wheel(out, {"uv/__init__.py": b"", "uv-0.13.9.data/scripts/uv": uv.read_bytes()}, "uv", "0.13.9",
           tag="py3-none-manylinux_2_17_x86_64")
    return out


STUB_SERVER = r'''
import importlib.util, json, os, sys
import tfprobe          # installed from wheels/ into .packages
import tfprobe_extra    # importable only through tfprobe.pth: .pth files of .packages are processed
print(json.dumps({"argv": sys.argv[1:], "pip": importlib.util.find_spec("pip") is not None,
                  "tfprobe": tfprobe.__file__, "executable": sys.executable,
                  "pycache_prefix": sys.pycache_prefix, "install_s": os.environ.get("TERNFORGE_INSTALL_SECONDS")}))
'''


def _installable(tmp: Path, uv_wheel: Path, *, bad_hash: bool = False, probe_tag: str = "py3-none-any") -> Path:
    sub = tmp / "sub"
    (sub / "wheels").mkdir(parents=True)
    shutil.copy(SERVE_SH, sub / "serve.sh")
    (sub / "server" / "ternforge_server").mkdir(parents=True)
    (sub / "server" / "ternforge_server" / "__init__.py").write_text("")
    (sub / "server" / "ternforge_server" / "__main__.py").write_text(STUB_SERVER)
    probe = sub / "wheels" / f"tfprobe-1.0-{probe_tag}.whl"
    _wheel(probe, {"tfprobe/__init__.py": b"VALUE = 1\n", "tfprobe.pth": b"tfprobe_extra_dir\n",
                   "tfprobe_extra_dir/tfprobe_extra.py": b"EXTRA = 1\n"}, "tfprobe", "1.0", tag=probe_tag)
    os.link(uv_wheel, sub / "wheels" / UV_WHEEL)
    probe_hash = "0" * 64 if bad_hash else _sha256(probe)
    (sub / "requirements-serve.txt").write_text(
        HEADER + f"tfprobe==1.0 --hash=sha256:{probe_hash}\nuv==0.13.9 --hash=sha256:{_sha256(uv_wheel)}\n")
    return sub


@pytest.fixture()
def no_pip_python(tmp_path: Path) -> str:
    """An interpreter of this version with neither pip nor any site-packages of ours (a venv made --without-pip)."""
    env = tmp_path / "nopip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    py = env / "bin" / "python"
    assert subprocess.run([str(py), "-c", "import pip"], capture_output=True).returncode != 0
    return str(py)


def test_installs_with_the_vendored_uv_without_pip_and_starts_the_server(tmp_path: Path, uv_wheel: Path,
                                                                         no_pip_python: str) -> None:
    sub = _installable(tmp_path, uv_wheel)
    r = _run(sub, PYTHON=no_pip_python)
    assert r.returncode == 0, r.stderr
    assert "installing 1 wheels with uv 0.13.9" in r.stderr and "install took" in r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["pip"] is False
    assert got["tfprobe"] == str(sub / ".packages" / "tfprobe" / "__init__.py")
    assert got["pycache_prefix"] == str(sub / ".packages" / ".pycache")
    assert got["argv"][:2] == ["--dir", str(sub)] and "--engine" not in got["argv"]
    assert float(got["install_s"]) > 0
    pkgs = sub / ".packages"
    assert (pkgs / "sitecustomize.py").is_file() and (pkgs / ".ternforge-requirements").is_file()
    assert not (pkgs / "uv").exists(), "uv installs the others; it is not installed itself"
    assert not list(pkgs.rglob("*.pyc")) or all(".pycache" in p.parts for p in pkgs.rglob("*.pyc"))
    deadline = time.monotonic() + 30  # uv's cache (hard links) is removed in the background
    while list(sub.glob(".packages.*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sorted(p.name for p in sub.iterdir()) == [".packages", "requirements-serve.txt", "serve.sh", "server", "wheels"]

    # Same lock, same interpreter: reused, nothing installed; TERNFORGE_ENGINE is passed on as --engine.
    r = _run(sub, PYTHON=no_pip_python, TERNFORGE_ENGINE="builtin")
    assert r.returncode == 0, r.stderr
    assert f"reusing {pkgs}" in r.stderr and "installing" not in r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["argv"][2:4] == ["--engine", "builtin"]


def test_a_failed_install_exits_4_with_uvs_reason_and_leaves_nothing(tmp_path: Path, uv_wheel: Path) -> None:
    sub = _installable(tmp_path, uv_wheel, bad_hash=True)
    r = _run(sub, PYTHON=sys.executable)
    assert r.returncode == 4, r.stderr
    assert "[serve.sh] install failed:" in r.stderr and "tfprobe" in r.stderr and "ash" in r.stderr  # hash mismatch
    assert sorted(p.name for p in sub.iterdir()) == ["requirements-serve.txt", "serve.sh", "server", "wheels"]


def test_a_wheel_of_another_platform_passes_the_pre_check_and_fails_the_install_naming_it(tmp_path: Path,
                                                                                         uv_wheel: Path) -> None:
    """The pre-check reads names and versions only, so a wheel built for another platform (here Windows)
    passes it; the offline install then refuses it: exit 4 with uv's reason, nothing left behind, no server."""
    sub = _installable(tmp_path, uv_wheel, probe_tag="cp311-cp311-win_amd64")
    r = _run(sub, PYTHON=sys.executable)
    assert r.returncode == 4, r.stderr
    assert "missing wheels" not in r.stderr  # the pre-check passed: tfprobe==1.0 is in wheels/
    assert "installing 1 wheels with uv 0.13.9" in r.stderr
    assert "[serve.sh] install failed:" in r.stderr and "tfprobe" in r.stderr
    assert "win_amd64" in r.stderr or "platform" in r.stderr, r.stderr  # uv says why: the platform
    assert r.stdout.strip() == ""  # the server never started
    assert sorted(p.name for p in sub.iterdir()) == ["requirements-serve.txt", "serve.sh", "server", "wheels"]


def test_a_stale_packages_dir_is_replaced_whole(tmp_path: Path, uv_wheel: Path) -> None:
    sub = _installable(tmp_path, uv_wheel)
    (sub / ".packages").mkdir()
    (sub / ".packages" / ".ternforge-requirements").write_text("another-lock\n")
    (sub / ".packages" / "leftover.py").write_text("")
    r = _run(sub, PYTHON=sys.executable)
    assert r.returncode == 0, r.stderr
    assert not (sub / ".packages" / "leftover.py").exists() and (sub / ".packages" / "tfprobe").is_dir()
