"""The controller's vLLM start-up, run for real on CPU up to vLLM's own process: a stand-in `vllm` package
(server_fixtures.fake_vllm) imports, and its OpenAI server records the argv, environment and checkpoint the
controller gave it, then exits 1, so the controller falls back to the built-in engine and serves. What the
stand-in records is what vLLM 0.19.1 would have been started with."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from server_fixtures import ServerProcess, build_submission, fake_vllm

PYDIR = Path(__file__).resolve().parents[1]
BWRAP = shutil.which("bwrap")


@pytest.fixture(scope="module")
def sub(tmp_path_factory) -> Path:
    return build_submission(tmp_path_factory.mktemp("vllm-start") / "sub", max_positions=4096)


def _start(sub: Path, tmp: Path, *extra: str, prefix: list[str] | None = None) -> tuple[dict, dict | None, str]:
    """(startup report, what the stand-in vLLM recorded or None, the server's log) of one start."""
    site = fake_vllm(tmp / "site")
    out = tmp / "fake-vllm.json"
    srv = ServerProcess(sub, tmp / "server.log", "--engine", "vllm", "--vllm-on-cpu", "--no-warmup", *extra,
                        prefix=prefix,
                        extra_env={"PYTHONPATH": f"{PYDIR}{os.pathsep}{site}",
                                   "TERNFORGE_TEST_FAKE_VLLM_OUT": str(out)})
    try:
        srv.wait_ready(300)
        report = json.loads(srv.report_path.read_text())
        return report, (json.loads(out.read_text()) if out.is_file() else None), srv.log()
    finally:
        srv.stop()


def test_vllm_is_started_with_triton_gdn_prefill_the_models_context_and_local_caches(sub: Path,
                                                                                    tmp_path: Path) -> None:
    report, got, log = _start(sub, tmp_path)
    assert got is not None, log
    argv = got["argv"]
    # 1. FlashInfer's GDN prefill is JIT-built with nvcc on SM 9.0: the Triton kernels are asked for by name.
    assert argv[argv.index("--gdn-prefill-backend") + 1] == "triton"
    # No torch.compile or CUDA graph capture: the start-up budget (README) counts eager mode only.
    assert "--enforce-eager" in argv
    # vLLM takes the most top logprobs the API allows (the controller asks it for those).
    from ternforge_server.contract import MAX_CHAT_TOP_LOGPROBS, MAX_COMPLETION_LOGPROBS

    assert argv[argv.index("--max-logprobs") + 1] == str(max(MAX_CHAT_TOP_LOGPROBS, MAX_COMPLETION_LOGPROBS))
    # 3. This fixture allows 4096 positions; 32768 (the default) would make vLLM refuse to start.
    assert argv[argv.index("--max-model-len") + 1] == "4096"
    assert report["max_model_len"] == {"requested": 32768, "model": 4096, "used": 4096}
    # 5. Every cache under one writable place the controller chose and recorded, no telemetry.
    root = Path(report["vllm_path"]["cache_root"])
    assert root == sub / ".cache"
    env = got["env"]
    for var in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "XDG_CACHE_HOME"):
        assert env[var] and Path(env[var]).parent == root, (var, env[var])
    assert env["VLLM_NO_USAGE_STATS"] == "1" and env["DO_NOT_TRACK"] == "1"
    # 2. The checkpoint vLLM reads states the tie in the text config (the fixture has it there already).
    assert got["config"]["text_config"]["tie_word_embeddings"] is True
    assert "model.safetensors" in got["files"]
    # The stand-in exits 1: a logged fallback naming it, and the toolchain the check found.
    assert report["engine"] == "builtin"
    assert report["engine_fallback"]["reason"] == "vLLM exited with code 1"
    assert report["vllm_path"]["toolchain"]["python_include"]
    assert "fake vLLM: recorded the start-up" in log


def test_a_request_above_the_models_context_is_refused_at_its_length(sub: Path, tmp_path: Path) -> None:
    from server_fixtures import http

    srv = ServerProcess(sub, tmp_path / "server.log", "--no-warmup")
    try:
        srv.wait_ready(300)
        code, body = http(srv.url + "/v1/chat/completions",
                          {"model": "ternforge-tiny", "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": 5000})
        assert code == 400, body
        assert b"4096" in body
    finally:
        srv.stop()


@pytest.mark.skipif(BWRAP is None, reason="needs bubblewrap (npm test's pretest installs it)")
def test_a_read_only_submission_with_a_small_dev_shm_falls_back_to_the_system_tmp(sub: Path, tmp_path: Path) -> None:
    # 4. A container's 64 MB /dev/shm (here 1 MiB) and a read-only submission: the checkpoint and the caches
    # go to the system's temporary directory; today's code raised PermissionError and exited 2.
    prefix = [BWRAP, "--dev-bind", "/", "/", "--size", str(1 << 20), "--tmpfs", "/dev/shm",
              "--ro-bind", str(sub), str(sub), "--die-with-parent"]
    report, got, log = _start(sub, tmp_path, prefix=prefix)
    assert got is not None, log
    import tempfile

    model = Path(got["argv"][got["argv"].index("--model") + 1])
    assert model.parent == Path(tempfile.gettempdir()), model
    assert Path(got["env"]["VLLM_CACHE_ROOT"]).parent.parent == Path(tempfile.gettempdir())
    assert report["engine"] == "builtin" and report["engine_fallback"]["reason"] == "vLLM exited with code 1"
    assert "tmp/ is not writable" in log
    assert not model.exists()  # deleted once vLLM is done with it


# ------------------------------------------------------------------------------------------ the C toolchain


def _check_in(prefix: list[str]) -> dict:
    code = ("import json, os; from ternforge_server.toolchain import ToolchainMissing, check_toolchain\n"
            "try: print(json.dumps({'ok': check_toolchain(dict(os.environ))}))\n"
            "except ToolchainMissing as e: print(json.dumps({'missing': str(e)}))\n")
    r = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(PYDIR)))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _hide(*paths: str) -> list[str]:
    out = [BWRAP, "--dev-bind", "/", "/"]
    for p in paths:
        out += ["--tmpfs", p] if Path(p).is_dir() else ["--ro-bind", "/dev/null", p]
    return out


@pytest.mark.skipif(BWRAP is None, reason="needs bubblewrap")
def test_toolchain_check_names_the_missing_compiler_or_headers() -> None:
    from ternforge_server.toolchain import find_cc, python_include

    assert "ok" in _check_in([]), "this machine has gcc and the interpreter's headers"
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    compilers = [c for c in (shutil.which("gcc"), shutil.which("clang")) if c]
    assert find_cc(env) == compilers[0]
    no_cc = _check_in(_hide(*compilers))
    assert "no C compiler" in no_cc["missing"], no_cc
    no_headers = _check_in(_hide(python_include()))
    assert "the interpreter's headers are missing" in no_headers["missing"] and "Python.h" in no_headers["missing"]
    bad_cc = _check_in(["env", "CC=/nonexistent/cc"])
    assert "does not exist" in bad_cc["missing"]


@pytest.mark.skipif(BWRAP is None, reason="needs bubblewrap")
def test_without_a_compiler_vllm_is_not_started_and_the_report_says_why(sub: Path, tmp_path: Path) -> None:
    compilers = [c for c in (shutil.which("gcc"), shutil.which("clang")) if c]
    report, got, log = _start(sub, tmp_path, prefix=_hide(*compilers))
    assert got is None, "vLLM was started without a compiler for Triton"
    assert report["engine"] == "builtin"
    assert report["engine_fallback"]["reason"].startswith("Triton cannot build its kernel launchers here: no C compiler")
