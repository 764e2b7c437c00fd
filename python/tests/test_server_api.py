"""The real server process on the fixture: OpenAI client and plain HTTP, streaming, concurrency, errors."""
from __future__ import annotations

import concurrent.futures as cf
import json
import statistics
import threading
import time
from pathlib import Path

import pytest

from server_fixtures import ServerProcess, build_submission, http


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    sub = build_submission(root / "sub")
    srv = ServerProcess(sub, root / "server.log", "--reserve", "default=40", "--reserve", "math=40")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def chat_body(content: str = "what is two plus three", **kw) -> dict:
    return {"model": "anything", "messages": [{"role": "user", "content": content}], **kw}


def test_health_models_and_startup_report(server: ServerProcess) -> None:
    assert http(server.url + "/health") == (200, b'{"status":"ok"}')
    status, body = http(server.url + "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "ternforge-tiny"
    report = json.loads(server.report_path.read_text())
    assert report["status"] == "ready" and report["engine"] == "builtin"
    assert set(report["phases"]) >= {"verify", "load", "dequantize", "build", "warmup"}
    assert report["loaded_count"] == len(report["loaded"]) > 0
    assert report["sampling_defaults"] == {"presence_penalty": 0.0, "frequency_penalty": 0.0}


def test_sampling_defaults_come_from_the_flags_else_architecture_json(tmp_path: Path) -> None:
    from ternforge_server.__main__ import parse_args, sampling_defaults

    args = parse_args(["--dir", str(tmp_path)])
    assert sampling_defaults(tmp_path, args) == {"presence_penalty": 0.0, "frequency_penalty": 0.0}
    (tmp_path / "architecture.json").write_text(json.dumps(
        {"serving": {"sampling_defaults": {"presence_penalty": 0.25, "frequency_penalty": 0.75}}}))
    assert sampling_defaults(tmp_path, args) == {"presence_penalty": 0.25, "frequency_penalty": 0.75}
    args = parse_args(["--dir", str(tmp_path), "--frequency-penalty", "0"])
    assert sampling_defaults(tmp_path, args) == {"presence_penalty": 0.25, "frequency_penalty": 0.0}
    with pytest.raises(SystemExit, match="presence_penalty must be between -2 and 2"):
        sampling_defaults(tmp_path, parse_args(["--dir", str(tmp_path), "--presence-penalty", "5"]))


def test_openai_client_chat_with_reasoning_budget(server: ServerProcess) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    cuts = []
    # A random model sometimes closes </think> by itself; over a few prompts the budget must cut at least once.
    for question in ("solve 2 + 3", "compute the value", "what is two plus three", "so we multiply"):
        r = client.chat.completions.create(model="whatever", messages=[{"role": "user", "content": question}],
                                           max_completion_tokens=160, temperature=0,
                                           extra_body={"unknown_field": 1})
        choice = r.choices[0]
        extra = r.model_extra["ternforge"]
        assert choice.message.content and choice.message.content.strip()
        assert "</think>" not in choice.message.content
        assert isinstance(choice.message.model_extra["reasoning_content"], str)
        assert r.usage.completion_tokens_details.reasoning_tokens <= 160 - 40
        assert r.usage.completion_tokens <= 160
        assert choice.finish_reason == ("stop" if extra["engine_finish"] == "stop" else "length")
        cuts.append(extra["thinking_cut"])
    assert {"budget", "repetition"} & set(cuts), cuts


def test_openai_client_streaming_matches_non_streaming(server: ServerProcess) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    kw = dict(model="m", messages=[{"role": "user", "content": "tell me story"}], max_tokens=120, temperature=0)
    full = client.chat.completions.create(**kw)
    content, reasoning, finish = "", "", None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.choices:
            d = chunk.choices[0].delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            finish = chunk.choices[0].finish_reason or finish
        else:
            assert chunk.usage.completion_tokens == full.usage.completion_tokens
    assert content == full.choices[0].message.content
    assert reasoning == full.choices[0].message.model_extra["reasoning_content"]
    assert finish == full.choices[0].finish_reason


def test_plain_http_sse_and_completions(server: ServerProcess) -> None:
    status, body = http(server.url + "/v1/chat/completions", chat_body(max_tokens=100, stream=True))
    assert status == 200
    events = [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    status, body = http(server.url + "/v1/completions", {"model": "x", "prompt": "once upon", "max_tokens": 9,
                                                         "stop": ["zzzz"]})
    out = json.loads(body)
    assert status == 200 and out["usage"]["prompt_tokens"] > 0
    assert out["choices"][0]["finish_reason"] == ("length" if out["usage"]["completion_tokens"] == 9 else "stop")


def _upstream_stats(server: ServerProcess) -> dict:
    """The built-in engine's counters, from its own /health on the loopback port the start-up report names."""
    status, body = http(json.loads(server.report_path.read_text())["upstream"]["url"] + "/health")
    assert status == 200
    return json.loads(body)


def test_batched_greedy_over_http_equals_alone_with_staggered_arrivals(server: ServerProcess) -> None:
    prompts = ["the answer is", "once upon time", "def sum value", "hello world", "which of following", "so we"]

    def complete(p: str) -> str:
        status, body = http(server.url + "/v1/completions", {"model": "x", "prompt": p, "max_tokens": 24,
                                                             "temperature": 0})
        assert status == 200
        return json.loads(body)["choices"][0]["text"]

    before = _upstream_stats(server)
    alone = [complete(p) for p in prompts]
    between = _upstream_stats(server)
    assert between["batched_steps"] == before["batched_steps"]  # one at a time: no step ran two rows
    with cf.ThreadPoolExecutor(len(prompts)) as pool:
        futures = []
        for i, p in enumerate(prompts):
            futures.append(pool.submit(complete, p))
            time.sleep(0.05 * (i % 3))
        together = [f.result() for f in futures]
    after = _upstream_stats(server)
    assert together == alone
    # ... and together they were batched: decode steps ran several requests' rows at once.
    assert after["batched_steps"] > between["batched_steps"], (between, after)
    assert after["max_running"] >= 2


def test_sixteen_concurrent_requests_and_health_latency(server: ServerProcess) -> None:
    # The poller records; every assertion runs here, in the test's own thread (one in a thread only ends it).
    polled: list[tuple[int, float]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def poll_health() -> None:
        try:
            while not done.is_set():
                t0 = time.perf_counter()
                status, _ = http(server.url + "/health", timeout=60)
                polled.append((status, time.perf_counter() - t0))
                time.sleep(0.05)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors.append(e)

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        with cf.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda i: http(server.url + "/v1/chat/completions",
                                                   chat_body(f"question {i}: what is two plus three",
                                                             max_tokens=100)), range(16)))
    finally:
        done.set()
        poller.join()
    assert errors == []
    for status, body in results:
        msg = json.loads(body)["choices"][0]
        assert status == 200 and msg["message"]["content"].strip()
        assert msg["finish_reason"] in ("stop", "length")
    latencies = [t for _, t in polled]
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 2 else max(latencies)
    print(f"/health under 16 concurrent: n={len(latencies)} p50={statistics.median(latencies) * 1000:.1f} ms "
          f"p99={p99 * 1000:.1f} ms")
    # /health answered 200 every time while the 16 ran (its latency is bench:serve's figure, not a test bound).
    assert len(polled) >= 2 and {s for s, _ in polled} == {200}
    assert http(server.url + "/health") == (200, b'{"status":"ok"}')


BAD_REQUESTS = [
    ("/v1/chat/completions", b"{not json", 400, "invalid_json"),
    ("/v1/chat/completions", b"[1, 2]", 400, "invalid_type"),
    ("/v1/chat/completions", {"model": "x"}, 400, "invalid_value"),
    ("/v1/chat/completions", {"messages": []}, 400, "invalid_value"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, 400, "invalid_value"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 42}]}, 400, "invalid_type"),
    ("/v1/chat/completions", {"messages": ["hi"]}, 400, "invalid_type"),
    ("/v1/chat/completions", chat_body(max_tokens=-5), 400, "invalid_value"),
    ("/v1/chat/completions", chat_body(max_tokens=0), 400, "invalid_value"),
    ("/v1/chat/completions", chat_body(max_tokens=10 ** 12), 400, "invalid_value"),
    ("/v1/chat/completions", chat_body(max_tokens="many"), 400, "invalid_type"),
    ("/v1/chat/completions", chat_body(temperature="hot"), 400, "invalid_type"),
    ("/v1/chat/completions", chat_body(temperature=-1), 400, "invalid_value"),
    ("/v1/chat/completions", chat_body(n=3), 400, "unsupported_value"),
    ("/v1/chat/completions", chat_body(presence_penalty=3), 400, "invalid_value"),
    ("/v1/chat/completions", chat_body(frequency_penalty="some"), 400, "invalid_type"),
    ("/v1/chat/completions", chat_body(stop=[1, 2]), 400, "invalid_type"),
    ("/v1/chat/completions", chat_body(stream="yes"), 400, "invalid_type"),
    ("/v1/chat/completions", chat_body("word " * 40000, max_tokens=10), 400, "context_length_exceeded"),
    ("/v1/completions", {"prompt": 7}, 400, "invalid_type"),
    ("/v1/completions", {"prompt": ""}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": [10 ** 9]}, 400, "invalid_value"),
    ("/v1/nope", {"prompt": "x"}, 404, "not_found"),
]


@pytest.mark.parametrize("path,body,status,code", BAD_REQUESTS, ids=[f"{i}-{b[3]}" for i, b in enumerate(BAD_REQUESTS)])
def test_bad_request_gets_openai_error_and_server_stays_up(server: ServerProcess, path, body, status, code) -> None:
    got_status, raw = http(server.url + path, body)
    err = json.loads(raw)["error"]
    assert (got_status, err["code"]) == (status, code)
    assert err["type"] == "invalid_request_error" and err["message"]
    assert http(server.url + "/health")[0] == 200
    assert server.proc.poll() is None


def test_wrong_method_is_405(server: ServerProcess) -> None:
    status, raw = http(server.url + "/v1/chat/completions", method="GET")
    assert status == 405 and json.loads(raw)["error"]["code"] == "method_not_allowed"


def test_refuses_to_start_on_bad_shard(tmp_path: Path) -> None:
    sub = build_submission(tmp_path / "sub")
    path = sub / "weights/model-00001-of-00002.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    srv = ServerProcess(sub, tmp_path / "bad.log")
    try:
        assert srv.proc.wait(timeout=180) == 2
    finally:
        srv.stop()
    report = json.loads(srv.report_path.read_text())
    assert report["status"] == "refused" and report["error"]["reason"] == "shard-sha256-mismatch"
    assert "shard-sha256-mismatch" in srv.log()
