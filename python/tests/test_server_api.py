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
from test_server_engine import reference_logprobs


@pytest.fixture(scope="module")
def sub(tmp_path_factory) -> Path:
    return build_submission(tmp_path_factory.mktemp("api") / "sub")


@pytest.fixture(scope="module")
def server(sub: Path, tmp_path_factory):
    srv = ServerProcess(sub, tmp_path_factory.mktemp("api-log") / "server.log", "--reserve", "default=40",
                        "--reserve", "math=40")
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


def completion(server: ServerProcess, **body) -> dict:
    status, raw = http(server.url + "/v1/completions", {"model": "x", "temperature": 0, **body})
    assert status == 200, raw
    return json.loads(raw)


def sse_events(raw: bytes) -> list[dict]:
    events = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_completions_take_token_arrays_and_batches_of_prompts(server: ServerProcess) -> None:
    texts = ["the answer is", "once upon time", "hello world"]
    ids = [json.loads(http(server.url + "/tokenize", {"prompt": t, "add_special_tokens": False})[1])["tokens"]
           for t in texts]
    alone = [completion(server, prompt=t, max_tokens=8) for t in texts]
    want = [a["choices"][0]["text"] for a in alone]
    assert completion(server, prompt=ids[0], max_tokens=8)["choices"][0]["text"] == want[0]  # [411, 25, ...]
    for prompt in (texts, ids):  # ["a", "b", ...] and [[411, 25], [...], ...]
        out = completion(server, prompt=prompt, max_tokens=8)
        assert [c["index"] for c in out["choices"]] == [0, 1, 2]
        assert [c["text"] for c in out["choices"]] == want
        assert out["usage"]["prompt_tokens"] == sum(len(x) for x in ids)
        assert out["usage"]["completion_tokens"] == sum(a["usage"]["completion_tokens"] for a in alone)
        assert out["usage"]["total_tokens"] == out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"]
    # Streamed: each prompt's chunks carry its index; joined, they are the same texts.
    chunks = sse_events(http(server.url + "/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0,
                                                              "stream": True,
                                                              "stream_options": {"include_usage": True}})[1])
    joined = ["", "", ""]
    for c in chunks[:-1]:
        joined[c["choices"][0]["index"]] += c["choices"][0]["text"]
    assert joined == want
    assert chunks[-1]["usage"]["prompt_tokens"] == sum(len(x) for x in ids)


def test_completion_echo_logprobs_are_the_models_and_lm_eval_parses_them(server: ServerProcess, sub: Path) -> None:
    """lm-eval 0.4.13's loglikelihood request ({"prompt": [ids], "max_tokens": 1, "logprobs": 1, "echo": true})
    scored against a plain forward pass of the same model; max_tokens 0 scores the prompt alone."""
    context, continuation = "which of following options", " correct choose"
    tok = lambda t: json.loads(http(server.url + "/tokenize", {"prompt": t, "add_special_tokens": False})[1])["tokens"]
    ctx, cont = tok(context), tok(continuation)
    ids = ctx + cont
    out = completion(server, prompt=[ids], max_tokens=1, logprobs=1, echo=True, seed=1234)
    choice = out["choices"][0]
    lps = choice["logprobs"]
    assert len(lps["tokens"]) == len(lps["token_logprobs"]) == len(lps["top_logprobs"]) == len(ids) + 1
    assert lps["token_logprobs"][0] is None and lps["top_logprobs"][0] is None
    detok = json.loads(http(server.url + "/detokenize", {"tokens": ids})[1])["prompt"]
    assert choice["text"].startswith(detok) and lps["text_offset"][:2] == [0, len(lps["tokens"][0])]
    ref = reference_logprobs(sub, ids)
    want = [ref[j - 1, t].item() for j, t in enumerate(ids) if j > 0]
    assert lps["token_logprobs"][1:len(ids)] == pytest.approx(want, abs=1e-3)
    for j in range(1, len(ids)):  # the scored token and the top 1, keyed by text
        top = lps["top_logprobs"][j]
        assert top[lps["tokens"][j]] == lps["token_logprobs"][j] and 1 <= len(top) <= 2
        assert max(top.values()) == pytest.approx(ref[j - 1].max().item(), abs=1e-3)
    # lm-eval's own parser: the continuation's summed logprob and whether it is greedy.
    loglik = sum(lps["token_logprobs"][len(ctx):-1])
    assert loglik == pytest.approx(sum(want[len(ctx) - 1:]), abs=1e-3)
    zero = completion(server, prompt=[ids], max_tokens=0, logprobs=1, echo=True)
    assert zero["choices"][0]["logprobs"]["token_logprobs"] == lps["token_logprobs"][:-1]
    assert zero["choices"][0]["text"] == detok and zero["usage"]["completion_tokens"] == 0
    # Streamed, the chunks add up to the same object, text_offset counting on.
    chunks = sse_events(http(server.url + "/v1/completions", {"prompt": ids, "max_tokens": 4, "logprobs": 2,
                                                              "echo": True, "temperature": 0, "stream": True})[1])
    whole = completion(server, prompt=ids, max_tokens=4, logprobs=2, echo=True)["choices"][0]
    joined = {k: [] for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    for c in chunks:
        for k in joined:
            joined[k] += c["choices"][0]["logprobs"][k]
    assert joined == whole["logprobs"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["text"]
    # Echo without logprobs: the prompt's text, then the completion.
    plain = completion(server, prompt=ids, max_tokens=4)["choices"][0]["text"]
    assert completion(server, prompt=ids, max_tokens=4, echo=True)["choices"][0]["text"] == detok + plain


def test_an_empty_completion_is_empty_and_a_chat_fallback_is_marked(server: ServerProcess) -> None:
    from ternforge_server.controller import FALLBACK_CONTENT

    text = completion(server, prompt="once upon time", max_tokens=6)["choices"][0]["text"]
    assert text.strip()
    out = completion(server, prompt="once upon time", max_tokens=6, stop=[text.strip()[0]])
    assert out["choices"][0]["text"] == text[:text.index(text.strip()[0])]  # what the model wrote: "" here or blank
    assert FALLBACK_CONTENT not in out["choices"][0]["text"]
    # Chat: content is never empty, and a fallback is marked as the server's.
    body = chat_body("tell me story", max_tokens=20, chat_template_kwargs={"enable_thinking": False})
    answer = json.loads(http(server.url + "/v1/chat/completions", body)[1])
    assert answer["ternforge"]["fallback_content"] is False
    first = answer["choices"][0]["message"]["content"].strip()[0]
    cut = json.loads(http(server.url + "/v1/chat/completions", {**body, "stop": [first]})[1])
    assert cut["choices"][0]["message"]["content"] == FALLBACK_CONTENT
    assert cut["ternforge"]["fallback_content"] is True
    chunks = sse_events(http(server.url + "/v1/chat/completions", {**body, "stop": [first], "stream": True})[1])
    final = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(final) == 1 and final[0]["ternforge"]["fallback_content"] is True


def test_chat_logprobs_are_the_answer_tokens_completion_logprobs(server: ServerProcess, sub: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(sub))
    messages = [{"role": "user", "content": "hello world"}]
    body = {"messages": messages, "max_tokens": 12, "temperature": 0, "logprobs": True, "top_logprobs": 3,
            "chat_template_kwargs": {"enable_thinking": False}}
    out = json.loads(http(server.url + "/v1/chat/completions", body)[1])
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"] and content
    assert all(len(c["top_logprobs"]) == 3 and c["bytes"] == list(c["token"].encode()) for c in content)
    # The same prompt as token ids through /v1/completions: the same tokens, the same numbers.
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    ids = tok.encode(ids, add_special_tokens=False)
    legacy = completion(server, prompt=ids, max_tokens=12, logprobs=3)["choices"][0]["logprobs"]
    assert [c["token"] for c in content] == legacy["tokens"][:len(content)]
    assert [c["logprob"] for c in content] == pytest.approx(legacy["token_logprobs"][:len(content)], abs=1e-4)
    assert [max(t["logprob"] for t in c["top_logprobs"]) for c in content] == \
        pytest.approx([max(t.values()) for t in legacy["top_logprobs"][:len(content)]], abs=1e-4)
    chunks = sse_events(http(server.url + "/v1/chat/completions", {**body, "stream": True})[1])
    streamed = [e for c in chunks if c["choices"] and c["choices"][0]["logprobs"]
                for e in c["choices"][0]["logprobs"]["content"]]
    assert streamed == content


def test_the_tokenizer_endpoints_lm_eval_probes(server: ServerProcess, sub: Path) -> None:
    """lm-eval's `tokenizer_backend=remote` (and its auto-detection) asks GET /tokenizer_info for eos_token,
    POST /tokenize {"prompt", "add_special_tokens"} for "tokens", POST /detokenize {"tokens"} for "prompt"."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(sub))
    status, raw = http(server.url + "/tokenizer_info")
    info = json.loads(raw)
    assert status == 200 and info["eos_token"] == tok.eos_token == "<|im_end|>"
    assert info["chat_template"] == tok.chat_template and info["model_max_length"] == 32768
    text = "<|im_start|>user\nhello world<|im_end|>"
    got = json.loads(http(server.url + "/tokenize", {"prompt": text, "add_special_tokens": False})[1])
    assert got["tokens"] == tok.encode(text, add_special_tokens=False) and got["count"] == len(got["tokens"])
    assert json.loads(http(server.url + "/detokenize", {"tokens": got["tokens"]})[1])["prompt"] == text
    eos = json.loads(http(server.url + "/tokenize", {"prompt": info["eos_token"], "add_special_tokens": False})[1])
    assert eos["tokens"] == [tok.eos_token_id]


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
    ("/v1/completions", {"prompt": [[5, 9], [10 ** 9]]}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": [[5, 9], []]}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": []}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": [5, 9.5]}, 400, "invalid_type"),
    ("/v1/completions", {"prompt": [True, 5]}, 400, "invalid_type"),
    ("/v1/completions", {"prompt": [[5, "9"]]}, 400, "invalid_type"),
    ("/v1/completions", {"prompt": [[[5]]]}, 400, "invalid_type"),
    ("/v1/completions", {"prompt": ["a", [5]]}, 400, "invalid_type"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": "hi", "echo": "yes"}, 400, "invalid_type"),
    ("/v1/completions", {"prompt": "hi", "logprobs": "all"}, 400, "invalid_type"),
    ("/v1/completions", {"prompt": "hi", "logprobs": 6}, 400, "invalid_value"),
    ("/v1/chat/completions", chat_body(logprobs="yes"), 400, "invalid_type"),
    ("/v1/chat/completions", chat_body(logprobs=True, top_logprobs=21), 400, "invalid_value"),
    ("/v1/chat/completions", chat_body(top_logprobs=2), 400, "invalid_value"),
    ("/tokenize", {"prompt": 5}, 400, "invalid_type"),
    ("/tokenize", {"prompt": "hi", "add_special_tokens": "no"}, 400, "invalid_type"),
    ("/tokenize", {"messages": [{"role": "user", "content": "hi"}]}, 400, "unsupported_parameter"),
    ("/detokenize", {"tokens": [5, "x"]}, 400, "invalid_type"),
    ("/detokenize", {"tokens": [-1]}, 400, "invalid_value"),
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
