"""The production path on CPU: the controller process in front of a separate upstream process (the built-in
engine run as `python -m ternforge_server upstream`), end to end, plus the start-up decisions around it:
the fallback when vLLM cannot import, the refusal of a CUDA build without a GPU, children that die with
the controller, and requests whose clients go away freeing their upstream slot."""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from server_fixtures import ServerProcess, build_submission, free_port

PYDIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sub(tmp_path_factory) -> Path:
    return build_submission(tmp_path_factory.mktemp("upstream") / "sub")


@pytest.fixture(scope="module")
def server(sub: Path, tmp_path_factory):
    srv = ServerProcess(sub, tmp_path_factory.mktemp("srv") / "server.log", "--reserve", "default=40")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def _report(srv: ServerProcess) -> dict:
    return json.loads(srv.report_path.read_text())


def _upstream_health(srv: ServerProcess) -> dict:
    with urllib.request.urlopen(_report(srv)["upstream"]["url"] + "/health", timeout=5) as r:
        return json.loads(r.read())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait(cond, timeout: float, step: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


def _raw_post(port: int, path: str, body: dict) -> socket.socket:
    """Send a request and return the open socket without reading the answer (a client about to vanish)."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


LONG = {"model": "x", "prompt": "once upon time there was cat", "max_tokens": 4000, "temperature": 0,
        "stop": None}
# How long a freed slot may take to show: generous (20 ms measured on a quiet machine); what proves the
# cancellation is the token count, not the clock: a dropped row decodes a few more tokens (1 measured),
# one left running decodes to its end (540 more measured on the fixture, with cancel() made a no-op).
FREED_WITHIN_S = 60
DROPPED_WITHIN_TOKENS = 64


def test_controller_and_upstream_are_separate_processes_and_report_the_engine(server: ServerProcess) -> None:
    rep = _report(server)
    assert rep["status"] == "ready" and rep["engine"] == "builtin" and rep["engine_requested"] == "auto"
    up = rep["upstream"]
    assert up["engine"] == "builtin" and up["url"].startswith("http://127.0.0.1:")
    assert up["pid"] != server.proc.pid and _alive(up["pid"])
    assert b"upstream" in Path(f"/proc/{up['pid']}/cmdline").read_bytes()
    assert _upstream_health(server)["status"] == "ok"
    assert "[server] ready: ternforge-tiny on cpu via the builtin engine" in server.log()


def test_sixteen_concurrent_openai_requests_streaming_and_not(server: ServerProcess) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)

    def one(i: int) -> tuple[str, str]:
        msgs = [{"role": "user", "content": f"question {i}: what is two plus three"}]
        if i % 2:
            r = client.chat.completions.create(model="m", messages=msgs, max_tokens=48, temperature=0)
            return r.choices[0].message.content, r.choices[0].finish_reason
        parts, finish = [], None
        for chunk in client.chat.completions.create(model="m", messages=msgs, max_tokens=48, temperature=0,
                                                    stream=True):
            if chunk.choices:
                parts.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
        return "".join(parts), finish

    with cf.ThreadPoolExecutor(16) as pool:
        got = list(pool.map(one, range(16)))
    assert len(got) == 16
    assert all(isinstance(c, str) and c.strip() for c, _ in got)  # content never null or empty
    assert all(f in ("stop", "length") for _, f in got)
    assert _wait(lambda: _upstream_health(server)["running"] == 0, 5)


def test_client_disconnecting_mid_stream_frees_its_upstream_slot(server: ServerProcess) -> None:
    s = _raw_post(server.port, "/v1/completions", {**LONG, "stream": True})
    got = b""
    while got.count(b"data: ") < 5:
        chunk = s.recv(65536)
        assert chunk, "the server closed the stream early"
        got += chunk
    before = _upstream_health(server)
    assert before["running"] == 1  # the request is decoding upstream ...
    s.close()
    # ... and its slot is freed by the cancellation, not by the answer running to its end: no clock bound,
    # the engine's token count says the row was dropped within a few steps.
    assert _wait(lambda: _upstream_health(server)["running"] == 0, FREED_WITHIN_S)
    after = _upstream_health(server)
    Path("/tmp/srvlog.txt").write_text(server.log() + "\n" + json.dumps([before, after]))
    assert after["tokens"] - before["tokens"] < DROPPED_WITHIN_TOKENS, (before, after)


def test_abandoned_non_streaming_requests_free_their_slots(server: ServerProcess) -> None:
    socks = [_raw_post(server.port, "/v1/completions", LONG) for _ in range(16)]
    assert _wait(lambda: _upstream_health(server)["running"] == 16, 30)
    before = _upstream_health(server)
    for s in socks:
        s.close()
    assert _wait(lambda: _upstream_health(server)["running"] + _upstream_health(server)["waiting"] == 0, FREED_WITHIN_S)
    after = _upstream_health(server)  # dropped, not finished: far fewer tokens than 16 full answers
    assert after["tokens"] - before["tokens"] < 16 * DROPPED_WITHIN_TOKENS, (before, after)
    # A burst of valid requests right after is answered in full.
    body = {"model": "x", "prompt": "hello world", "max_tokens": 8, "temperature": 0}

    def post(_: int) -> int:
        req = urllib.request.Request(server.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())["usage"]["completion_tokens"]

    with cf.ThreadPoolExecutor(16) as pool:
        assert all(n >= 1 for n in pool.map(post, range(16)))


def test_upstream_speaks_token_ids_like_vllm(server: ServerProcess) -> None:
    url = _report(server)["upstream"]["url"] + "/v1/completions"
    body = {"prompt": [5, 9, 13, 40], "max_tokens": 6, "return_token_ids": True, "stop_token_ids": []}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        out = json.loads(r.read())
    choice = out["choices"][0]
    assert len(choice["token_ids"]) == 6 and choice["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
    bad = urllib.request.Request(url, data=json.dumps({"prompt": "text", "max_tokens": 2}).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(bad, timeout=10)
    assert e.value.code == 400


def test_upstream_sends_logprobs_in_vllms_token_id_format(server: ServerProcess) -> None:
    """What the controller asks either upstream for: "logprobs": k, "echo", "return_tokens_as_token_ids"; the
    built-in one answers in vLLM's legacy layout, the prompt's entries first (the first one null)."""
    from ternforge_server.logprobs import parse_wire

    url = _report(server)["upstream"]["url"] + "/v1/completions"
    body = {"prompt": [5, 9, 13, 40], "max_tokens": 3, "logprobs": 2, "echo": True, "return_tokens_as_token_ids": True,
            "return_token_ids": True}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        choice = json.loads(r.read())["choices"][0]
    lp = choice["logprobs"]
    assert lp["tokens"] == [f"token_id:{t}" for t in [5, 9, 13, 40] + choice["token_ids"]]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    entries = parse_wire(lp)
    assert [e.token for e in entries[1:]] == [9, 13, 40] + choice["token_ids"]
    assert all(len(e.top) in (2, 3) and e.top[0][1] >= e.logprob for e in entries[1:])
    no_echo = dict(body, echo=False)
    req = urllib.request.Request(url, data=json.dumps(no_echo).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        plain = json.loads(r.read())["choices"][0]
    assert plain["token_ids"] == choice["token_ids"] and plain["logprobs"]["tokens"] == lp["tokens"][4:]


def test_fallback_to_builtin_when_vllm_cannot_import_is_logged_and_reported(sub: Path, tmp_path: Path) -> None:
    broken = tmp_path / "site"
    (broken / "vllm").mkdir(parents=True)
    (broken / "vllm" / "__init__.py").write_text(
        "raise ImportError('libcudart.so.12: cannot open shared object file (test: a broken vllm install)')\n")
    srv = ServerProcess(sub, tmp_path / "fallback.log", "--engine", "vllm",
                        extra_env={"PYTHONPATH": f"{PYDIR}{os.pathsep}{broken}"})
    try:
        srv.wait_ready()
        rep = _report(srv)
        assert rep["engine_requested"] == "vllm" and rep["engine"] == "builtin"
        assert rep["engine_fallback"]["from"] == "vllm"
        assert "vLLM cannot import" in rep["engine_fallback"]["reason"]
        assert "libcudart.so.12" in rep["engine_fallback"]["reason"]
        log = srv.log()
        assert "vLLM not used: vLLM cannot import" in log and "falling back to the built-in engine" in log
        assert "via the builtin engine (vLLM not used: vLLM cannot import" in log
    finally:
        srv.stop()


def test_simulated_cuda_build_without_gpu_refuses_loudly(sub: Path, tmp_path: Path) -> None:
    """The CPU wheel is not a CUDA build, so TERNFORGE_TEST_SIMULATE_CUDA_BUILD makes the server take torch
    for CUDA 12.8; CUDA_VISIBLE_DEVICES="" hides any GPU as well. Device auto must refuse, not serve on the CPU."""
    log = tmp_path / "refuse.log"
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(PYDIR), HOST="127.0.0.1", PORT=str(port), CUDA_VISIBLE_DEVICES="",
               TERNFORGE_TEST_SIMULATE_CUDA_BUILD="12.8")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ternforge_server", "--dir", str(sub), "--startup-report",
                        str(tmp_path / "rep.json")], env=env, capture_output=True, text=True, timeout=120)
    log.write_text(r.stderr)
    assert r.returncode == 2, r.stderr
    assert time.monotonic() - t0 < 60
    assert "refusing to serve: no-usable-gpu" in r.stderr
    assert "CUDA 12.8" in r.stderr and "NVIDIA driver:" in r.stderr and "CUDA_VISIBLE_DEVICES is empty" in r.stderr
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["status"] == "refused" and rep["error"]["reason"] == "no-usable-gpu"
    assert rep["error"]["torch_cuda"] == "12.8" and rep["error"]["driver"]
    assert "upstream" not in rep  # nothing was started


def test_sigterm_and_sigkill_of_the_controller_leave_no_upstream(sub: Path, tmp_path: Path) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        srv = ServerProcess(sub, tmp_path / f"sig{int(sig)}.log")
        try:
            srv.wait_ready()
            pid = _report(srv)["upstream"]["pid"]
            assert _alive(pid)
            os.kill(srv.proc.pid, sig)
            srv.proc.wait(30)
            assert _wait(lambda: not _alive(pid), 15), f"upstream {pid} outlived the controller ({sig.name})"
        finally:
            srv.stop()
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_cache_keyword_follows_the_forward_signature() -> None:
    import torch

    from ternforge_server.engine import cache_keyword

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):  # transformers 5.20 style
            return input_ids

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, use_cache=None):
            return input_ids

    class Neither(torch.nn.Module):
        def forward(self, input_ids=None):
            return input_ids

    assert cache_keyword(Old()) == "past_key_values" and cache_keyword(New()) == "cache"
    with pytest.raises(TypeError, match="neither"):
        cache_keyword(Neither())


def test_an_upstream_that_dies_ends_the_controller_with_code_3(sub: Path, tmp_path: Path) -> None:
    srv = ServerProcess(sub, tmp_path / "dies.log")
    try:
        srv.wait_ready()
        os.kill(_report(srv)["upstream"]["pid"], signal.SIGKILL)
        assert srv.proc.wait(30) == 3
        assert "the builtin upstream exited with code -9; stopping" in srv.log()
    finally:
        srv.stop()


def test_the_upstream_writes_its_start_up_report_before_health_answers_200(sub: Path, tmp_path: Path) -> None:
    """The controller reads the upstream's report as soon as /health is 200 (serving.start_builtin): a report
    written after the engine is published was, under load, not there yet (CI: a smoke report without
    `loaded`, `shards`)."""
    port, report = free_port(), tmp_path / "upstream.json"
    proc = subprocess.Popen([sys.executable, "-m", "ternforge_server", "upstream", "--dir", str(sub), "--port", str(port),
                             "--device", "cpu", "--report", str(report)],
                            env=dict(os.environ, PYTHONPATH=str(PYDIR), CUDA_VISIBLE_DEVICES=""),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 300
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        seen = report.is_file() and json.loads(report.read_text())
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert proc.poll() is None, "the upstream exited"
            time.sleep(0.001)
        else:
            pytest.fail("the upstream never answered /health 200")
        assert seen and seen["status"] == "ready" and seen["loaded"] and seen["shards"], seen
    finally:
        proc.kill()
        proc.wait()
