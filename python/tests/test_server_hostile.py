"""Hostile requests against the real server process (issue 18): bounded bodies, 4xx for malformed input, refused
fields that would change a reply's meaning, and `/health` answering while the hostile request is handled."""
from __future__ import annotations

import json
import socket
import statistics
import threading
import time

import pytest

from server_fixtures import ServerProcess, build_submission, http

BODY_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    sub = build_submission(root / "sub")
    srv = ServerProcess(sub, root / "server.log", "--body-timeout", str(BODY_TIMEOUT))
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def chat(content: str = "what is two plus three", **kw) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 4, **kw}


def error_of(raw: bytes) -> dict:
    return json.loads(raw)["error"]


def health_latency_during(server: ServerProcess, hostile, seconds: float = 2.0) -> tuple[list[float], list]:
    """Poll /health from a second thread (every 10 ms) while `hostile()` is sent again and again for `seconds`
    (one after another, 20 ms apart: a hostile client, not a flood); returns the /health latencies and the
    hostile requests' results."""
    latencies: list[float] = []
    statuses: list[bytes] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def poll() -> None:
        try:
            _poll()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread (an assert here only ends the thread)
            errors.append(e)

    def _poll() -> None:
        with socket.create_connection(("127.0.0.1", server.port)) as s:  # keep-alive: no connect cost measured
            f = s.makefile("rb")
            while not done.is_set():
                t0 = time.perf_counter()
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                status = f.readline()
                length = 0
                while (line := f.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                f.read(length)
                latencies.append(time.perf_counter() - t0)
                statuses.append(status)
                time.sleep(0.01)

    poller = threading.Thread(target=poll)
    poller.start()
    results = []
    try:
        time.sleep(0.2)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            results.append(hostile())
            time.sleep(0.02)
    finally:
        done.set()
        poller.join()
    assert errors == [] and statuses and all(b" 200 " in s for s in statuses), (errors, set(statuses))
    return latencies, results


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


LOOPING_TEMPLATE = "{% for i in range(10000000) %}{{ i }}{% endfor %}"


def test_client_chat_template_is_refused_and_health_keeps_answering(server: ServerProcess) -> None:
    def hostile():
        t0 = time.perf_counter()
        status, raw = http(server.url + "/v1/chat/completions",
                           chat(chat_template_kwargs={"chat_template": LOOPING_TEMPLATE}))
        return status, error_of(raw), time.perf_counter() - t0

    latencies, results = health_latency_during(server, hostile)
    for status, err, took in results:
        assert (status, err["param"], err["code"]) == (400, "chat_template_kwargs.chat_template", "unsupported_parameter")
        assert "chat template" in err["message"] and took < 1.0
    print(f"/health during client templates: n={len(latencies)} p99={p99(latencies) * 1000:.1f} ms "
          f"max={max(latencies) * 1000:.1f} ms; {len(results)} refused")
    assert len(latencies) >= 50 and p99(latencies) < 0.050
    # vLLM's top-level field and the template call's own arguments are refused too.
    status, raw = http(server.url + "/v1/chat/completions", chat(chat_template=LOOPING_TEMPLATE))
    assert (status, error_of(raw)["param"]) == (400, "chat_template")
    status, raw = http(server.url + "/v1/chat/completions", chat(chat_template_kwargs={"tokenize": True}))
    assert (status, error_of(raw)["param"]) == (400, "chat_template_kwargs.tokenize")
    status, raw = http(server.url + "/v1/chat/completions", chat(chat_template_kwargs={"x": list(range(10))}))
    assert (status, error_of(raw)["param"]) == (400, "chat_template_kwargs.x")
    # A template variable is still passed: enable_thinking=false closes the think block in the fixture template.
    status, raw = http(server.url + "/v1/chat/completions", chat(chat_template_kwargs={"enable_thinking": False}))
    assert status == 200


def test_eight_megabyte_prompt_is_refused_quickly_and_health_keeps_answering(server: ServerProcess) -> None:
    # 7.5 MB (the probe: under the old fixed 8 MiB cap, so it was tokenized on the event loop) and 8 MB.
    bodies = [json.dumps(chat("word " * (n // 5))).encode() for n in (7_500_000, 8 << 20)]
    assert [len(b) // 100_000 for b in bodies] == [75, 83]
    sent = []

    def hostile():
        body = bodies[len(sent) % 2]
        sent.append(len(body))
        t0 = time.perf_counter()
        status, raw = http(server.url + "/v1/chat/completions", body)
        return status, error_of(raw), time.perf_counter() - t0

    latencies, results = health_latency_during(server, hostile)
    for status, err, took in results:
        assert (status, err["code"]) == (413, "body_too_large") and took < 2.0
    assert len(results) >= 4
    print(f"/health during 7.5 and 8 MB prompts: n={len(latencies)} p99={p99(latencies) * 1000:.1f} ms "
          f"max={max(latencies) * 1000:.1f} ms; {len(results)} refused, slowest {max(r[2] for r in results):.3f} s")
    assert len(latencies) >= 50 and p99(latencies) < 0.050


def test_prompt_over_the_character_bound_is_refused_before_tokenizing(server: ServerProcess) -> None:
    # 2 M characters (a 2 MB body, under the body cap): tokenizing it would take seconds; refused by its length.
    for path, body, param in (("/v1/chat/completions", chat("word " * 400_000), "messages"),
                              ("/v1/completions", {"prompt": "word " * 400_000, "max_tokens": 4}, "prompt")):
        t0 = time.perf_counter()
        status, raw = http(server.url + path, body)
        took = time.perf_counter() - t0
        err = error_of(raw)
        assert (status, err["code"], err["param"]) == (400, "context_length_exceeded", param)
        assert "before tokenization" in err["message"] and took < 1.5, took


def test_large_prompt_under_the_bounds_is_tokenized_off_the_event_loop(server: ServerProcess) -> None:
    # 300 k characters: tokenized (in a worker thread), then over the context length. /health keeps answering.
    body = chat("two plus three " * 20_000)

    def hostile():
        status, raw = http(server.url + "/v1/chat/completions", body)
        return status, error_of(raw)

    latencies, results = health_latency_during(server, hostile, seconds=3.0)
    for status, err in results:
        assert (status, err["code"]) == (400, "context_length_exceeded") and "tokens" in err["message"]
    print(f"/health during 300 k-character prompts (tokenized): n={len(latencies)} p99={p99(latencies) * 1000:.1f} ms "
          f"max={max(latencies) * 1000:.1f} ms; {len(results)} requests")
    assert len(latencies) >= 50 and p99(latencies) < 0.050


def test_deeply_nested_json_is_a_400(server: ServerProcess) -> None:
    status, raw = http(server.url + "/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000)
    err = error_of(raw)
    assert (status, err["code"]) == (400, "invalid_json") and "nested too deeply" in err["message"]
    body = b'{"messages": [{"role": "user", "content": "hi"}], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert http(server.url + "/v1/chat/completions", body)[0] == 400
    assert http(server.url + "/health")[0] == 200


@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi \\ud800 there"}]}', "messages[0].content"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "stop": ["\\udfff"]}', "stop[0]"),
    ("/v1/completions", b'{"prompt": "\\udc80", "max_tokens": 2}', "prompt"),
])
def test_lone_surrogate_is_a_400_naming_the_field(server: ServerProcess, path: str, body: bytes, param: str) -> None:
    status, raw = http(server.url + path, body)
    err = error_of(raw)
    assert (status, err["code"], err["param"]) == (400, "invalid_unicode", param)
    assert "lone UTF-16 surrogate" in err["message"] and param in err["message"]
    # A proper pair (an escaped emoji) is text and is served.
    ok = b'{"messages": [{"role": "user", "content": "hi \\ud83d\\ude00"}], "max_tokens": 2}'
    assert http(server.url + "/v1/chat/completions", ok)[0] == 200


def raw_request(server: ServerProcess, head: bytes, timeout: float = 10.0) -> tuple[bytes, float]:
    """Send `head` (headers, maybe a partial body) and read until the server closes or `timeout` passes."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        s.sendall(head)
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except socket.timeout:
            pass
    return data, time.perf_counter() - t0


@pytest.mark.parametrize("head", [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100\r\n\r\n{\"messages\"",
], ids=["chunked-no-body", "short-content-length"])
def test_headers_without_the_body_get_a_408_within_the_bound(server: ServerProcess, head: bytes) -> None:
    data, took = raw_request(server, head)
    assert data.startswith(b"HTTP/1.1 408 "), data[:200]
    assert b'"request_timeout"' in data
    assert BODY_TIMEOUT - 0.1 < took < BODY_TIMEOUT + 2.0, took  # answered and closed, not held open
    assert http(server.url + "/health")[0] == 200


def test_body_over_the_cap_without_content_length_is_a_413(server: ServerProcess) -> None:
    chunk = b"x" * (1 << 20)
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(head)
        try:
            for _ in range(8):
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before all 8 MiB were sent
        data = b""
        try:
            while part := s.recv(65536):
                data += part
        except (socket.timeout, ConnectionResetError):
            pass
    assert data.startswith(b"HTTP/1.1 413 ") and b'"body_too_large"' in data, data[:200]


REFUSED = [
    ("/v1/chat/completions", chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
                                  tool_choice="required"), "tool_choice"),
    ("/v1/chat/completions", chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
                                  tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice"),
    ("/v1/chat/completions", chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]), "tools"),
    ("/v1/chat/completions", chat(tool_choice="required"), "tool_choice"),
    ("/v1/chat/completions", chat(functions=[{"name": "f", "parameters": {}}]), "functions"),
    ("/v1/chat/completions", chat(response_format={"type": "json_object"}), "response_format"),
    ("/v1/chat/completions", chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
     "response_format"),
    ("/v1/chat/completions", chat(top_logprobs=5), "top_logprobs"),  # without logprobs: true
    ("/v1/chat/completions", chat(logit_bias={"42": 100}), "logit_bias"),
    ("/v1/chat/completions", chat(n=2), "n"),
    ("/v1/chat/completions", chat(modalities=["text", "audio"]), "modalities"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"},
                                           {"role": "assistant", "content": None, "tool_calls": [
                                               {"id": "1", "type": "function",
                                                "function": {"name": "f", "arguments": "{}"}}]}]},
     "messages[1].tool_calls"),
    ("/v1/completions", {"prompt": "hi", "best_of": 3}, "best_of"),
    ("/v1/completions", {"prompt": "hi", "suffix": "end"}, "suffix"),
    ("/v1/completions", {"prompt": "hi", "logit_bias": {"1": -100}}, "logit_bias"),
]


@pytest.mark.parametrize("path,body,param", REFUSED, ids=[f"{i}-{r[2]}" for i, r in enumerate(REFUSED)])
def test_field_that_changes_the_reply_is_refused_by_name(server: ServerProcess, path, body, param) -> None:
    status, raw = http(server.url + path, body)
    err = error_of(raw)
    assert (status, err["param"], err["type"]) == (400, param, "invalid_request_error")
    assert f"'{param}'" in err["message"] or param in err["message"]


def test_request_bounds_are_the_contracts_and_named(server: ServerProcess) -> None:
    """At the bound a request is served, past it a 400 names the field; out-of-vocabulary ids in a batch name the
    prompt and the id."""
    from ternforge_server.contract import MAX_CHAT_TOP_LOGPROBS, MAX_COMPLETION_LOGPROBS, MAX_PROMPTS

    ok = {"prompt": [[5, 9]] * MAX_PROMPTS, "max_tokens": 1, "logprobs": MAX_COMPLETION_LOGPROBS, "echo": True}
    status, raw = http(server.url + "/v1/completions", ok)
    assert status == 200 and len(json.loads(raw)["choices"]) == MAX_PROMPTS
    top = json.loads(raw)["choices"][0]["logprobs"]["top_logprobs"][1]
    # k + 1 keys at most (the scored token and the top k); fewer where two tokens decode to the same text ("\ufffd")
    assert 1 < len(top) <= MAX_COMPLETION_LOGPROBS + 1
    for body, param, words in (
            ({**ok, "prompt": [[5, 9]] * (MAX_PROMPTS + 1)}, "prompt", f"at most {MAX_PROMPTS}"),
            ({**ok, "logprobs": MAX_COMPLETION_LOGPROBS + 1}, "logprobs", f"between 0 and {MAX_COMPLETION_LOGPROBS}"),
            ({**ok, "prompt": [[5, 9], [5, 10 ** 6]]}, "prompt", "prompt[1]: token id 1000000")):
        status, raw = http(server.url + "/v1/completions", body)
        err = error_of(raw)
        assert (status, err["param"]) == (400, param) and words in err["message"], err
    status, raw = http(server.url + "/v1/chat/completions",
                       chat(logprobs=True, top_logprobs=MAX_CHAT_TOP_LOGPROBS + 1))
    assert (status, error_of(raw)["param"]) == (400, "top_logprobs")
    status, raw = http(server.url + "/v1/chat/completions", chat(logprobs=True, top_logprobs=MAX_CHAT_TOP_LOGPROBS,
                                                                 chat_template_kwargs={"enable_thinking": False}))
    assert status == 200
    assert len(json.loads(raw)["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == MAX_CHAT_TOP_LOGPROBS


ACCEPTED = [
    chat(n=None),  # null is the default, 1
    chat(n=1, logprobs=False, top_logprobs=None, logit_bias={}, response_format={"type": "text"}),
    chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}], tool_choice="none"),
    chat(tools=[], tool_choice=None, modalities=["text"]),
]


@pytest.mark.parametrize("body", ACCEPTED, ids=["n-null", "defaults-spelled-out", "tool-choice-none", "empty-tools"])
def test_fields_at_their_default_meaning_are_accepted(server: ServerProcess, body) -> None:
    status, raw = http(server.url + "/v1/chat/completions", body)
    assert status == 200, raw
    assert json.loads(raw)["choices"][0]["message"]["content"] is not None
