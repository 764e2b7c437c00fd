"""The OpenAI-compatible HTTP API (starlette + uvicorn).

GET /health              200 once the upstream engine answers, 503 before (never blocks on the engine: it runs
                         in its own process)
GET /v1/models           the served model name
POST /v1/chat/completions, POST /v1/completions   streaming (SSE, `data: [DONE]`) and not, with usage
    completions: prompt as "text", [ids], ["a", "b"] or [[ids], [ids]] (one choice per prompt, `index` its
    position, usage summed; at most MAX_PROMPTS); `logprobs` k <= MAX_COMPLETION_LOGPROBS (OpenAI's legacy
    object), `echo` (the prompt first, its first token's logprob null; `max_tokens: 0` scores it only); the text
    is what the model wrote, "" included. chat: `logprobs` / `top_logprobs` <= MAX_CHAT_TOP_LOGPROBS for the
    answer's tokens; content is never empty, and a fallback the server wrote is marked
    `ternforge.fallback_content: true` (the final chunk's, when streaming). Log-probabilities are the raw
    model's (before penalties and temperature); see logprobs.py for the shapes.
GET /tokenizer_info, POST /tokenize, POST /detokenize   vLLM's tokenizer endpoints (lm-eval's remote tokenizer)
Errors are OpenAI-shaped `{"error": {"message", "type", "param", "code"}}` with a 4xx status for bad input
and 503 when not ready or overloaded, 502 when the upstream fails; nothing a client sends can kill the process.
A client that goes away (streaming or not) cancels its generation, which frees its slot upstream.

Hostile input is bounded before it costs anything (see `request_bounds`):
- the body is read with a deadline (`--body-timeout`, 408 when a client sends headers and no body) and a size cap
  derived from the context length (413 by Content-Length before reading, or as soon as the stream passes it);
- JSON nested too deeply (RecursionError) and strings with lone surrogates are 400s naming the problem;
- prompt text longer than `max_model_len * CHARS_PER_TOKEN` characters is refused before tokenization;
- parsing, template rendering and tokenization run in worker threads, never on the event loop, so `/health`
  keeps answering while a large request is handled;
- a client-supplied chat template is refused (the server renders the submission's own template only), and so are
  fields that would change a reply's meaning which the server cannot honour (`tools` unless `tool_choice` is
  "none", `response_format` other than text, `logit_bias`, `n` > 1, `best_of`, `suffix`, ...): each is a
  400 whose `param` names the field. `n: null` means the default, 1 (OpenAI's semantics for null);
- counts past the contract's `api` bounds (prompts per request, `logprobs`, `top_logprobs`) and token ids outside
  the vocabulary are 400s naming the field (and the prompt and id).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import logprobs as lp
from .contract import MAX_CHAT_TOP_LOGPROBS, MAX_COMPLETION_LOGPROBS, MAX_PROMPTS, PENALTY_RANGE
from .controller import Delta, EngineError, Outcome, ReasoningController, prompt_kind
from .engine import QueueFull, Sampling

ROLES = {"system", "developer", "user", "assistant"}
MAX_STOP = 16
# A prompt's text is refused before tokenization when it has more than max_model_len * CHARS_PER_TOKEN
# characters: real text averages 3-5 characters per token (code and whitespace runs more), so 32 only refuses
# prompts that could never fit, and it bounds the tokenizer's work (about 1 M characters at 32768 tokens).
CHARS_PER_TOKEN = 32
# The body cap: that many characters at 4 bytes each (the longest UTF-8 character), plus 1 MiB for the JSON
# around them (5 MiB at 32768 tokens). Checked on Content-Length before reading, and while reading a chunked body.
BYTES_PER_CHAR = 4
BODY_OVERHEAD_BYTES = 1 << 20
DRAIN_FACTOR = 4  # an oversized body is read and dropped up to this many times the cap before the 413
DEFAULT_BODY_TIMEOUT = 30.0  # seconds to receive the whole body once the headers are in
# Validation, template rendering and tokenization run on four worker threads, never on the event loop (Python
# code there yields the GIL every few ms; the Rust tokenizer releases it). JSON parsing uses the loop's default pool.
_WORKERS = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ternforge-tokenize")


def request_bounds(max_model_len: int) -> dict:
    """The size bounds a request is checked against, derived from the context length."""
    max_chars = max_model_len * CHARS_PER_TOKEN
    return {"max_prompt_chars": max_chars, "max_body_bytes": max_chars * BYTES_PER_CHAR + BODY_OVERHEAD_BYTES}


def _log(msg: str) -> None:
    sys.stderr.write(f"[api] {msg}\n")
    sys.stderr.flush()


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type_: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_

    def response(self) -> JSONResponse:
        # After a 408 or 413 the rest of the body may still be on its way: close the connection.
        headers = {"Connection": "close"} if self.status in (408, 413) else None
        return JSONResponse({"error": {"message": self.message, "type": self.type, "param": self.param,
                                       "code": self.code}}, status_code=self.status, headers=headers)


@dataclass
class ServerState:
    """What the handlers share; `controller` is None until start-up finishes."""

    model_name: str
    max_model_len: int = 32768
    default_max_tokens: int = 4096
    presence_penalty: float = 0.0  # what a request that names no penalty gets
    frequency_penalty: float = 0.0
    controller: ReasoningController | None = None
    tokenizer: Any = None
    engine: Any = None
    started: float = field(default_factory=time.time)
    load_error: str | None = None
    body_timeout: float = DEFAULT_BODY_TIMEOUT


# ------------------------------------------------------------------------------------------ validation


def _int_field(body: dict, name: str, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise ApiError(400, f"'{name}' must be an integer", name, "invalid_type")
    if v < lo or v > hi:
        raise ApiError(400, f"'{name}' must be between {lo} and {hi}, got {v}", name, "invalid_value")
    return v


# OpenAI's range for presence_penalty and frequency_penalty (requests, and the server's own defaults) is
# PENALTY_RANGE, schemas/contract.json `sampling`.


def _num_field(body: dict, name: str, lo: float, hi: float, default: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ApiError(400, f"'{name}' must be a number", name, "invalid_type")
    if v < lo or v > hi:
        raise ApiError(400, f"'{name}' must be between {lo} and {hi}, got {v}", name, "invalid_value")
    return float(v)


def _unsupported(name: str, what: str, code: str = "unsupported_parameter") -> ApiError:
    return ApiError(400, f"'{name}' is not supported by this server: {what}", name, code)


def _refuse_meaning_changes(body: dict, chat: bool) -> None:
    """Fields that would change what a reply means and that this server does not implement: refuse, never ignore.
    null (and an empty list or object) means "not asked for" and is accepted."""
    if body.get("logit_bias") not in (None, {}):
        raise _unsupported("logit_bias", "token biases are not applied")
    if chat:
        tools, choice = body.get("tools"), body.get("tool_choice")
        if tools not in (None, []) and choice != "none":
            if choice not in (None, "auto"):
                raise _unsupported("tool_choice", f"the model cannot be made to call a tool ({choice!r}); only "
                                   "tool_choice \"none\" is accepted with tools", "unsupported_value")
            raise _unsupported("tools", "tool calls are not parsed; send tool_choice \"none\" or no tools")
        if choice not in (None, "none", "auto"):
            raise _unsupported("tool_choice", f"no tool can be called ({choice!r})", "unsupported_value")
        if body.get("functions") not in (None, []) and body.get("function_call") != "none":
            raise _unsupported("functions", "function calls are not parsed")
        rf = body.get("response_format")
        if rf is not None and rf != {"type": "text"}:
            raise _unsupported("response_format", 'only {"type": "text"} is produced; structured output is not '
                               "enforced", "unsupported_value")
        if body.get("modalities") not in (None, ["text"]):
            raise _unsupported("modalities", 'only ["text"] is produced', "unsupported_value")
        if body.get("audio") is not None:
            raise _unsupported("audio", "audio output is not produced")
        if "chat_template" in body:
            raise _unsupported("chat_template", "a client-supplied chat template is not accepted; the server "
                               "renders the submission's own template")
    else:
        if body.get("best_of") not in (None, 1):
            raise _unsupported("best_of", "only best_of=1 is supported", "unsupported_value")
        if body.get("suffix") not in (None, ""):
            raise _unsupported("suffix", "insertion (a suffix) is not supported")


def _common(body: dict, state: ServerState, chat: bool = True, min_tokens: int = 1) -> dict:
    if body.get("n") is not None and (isinstance(body["n"], bool) or body["n"] != 1):
        raise ApiError(400, "only n=1 is supported", "n", "unsupported_value")
    _refuse_meaning_changes(body, chat)
    mt = _int_field(body, "max_completion_tokens", min_tokens, state.max_model_len)
    if mt is None:
        mt = _int_field(body, "max_tokens", min_tokens, state.max_model_len)
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOP:
        stops = list(stop)
    else:
        raise ApiError(400, f"'stop' must be a string or a list of at most {MAX_STOP} strings", "stop", "invalid_type")
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise ApiError(400, "'stream' must be a boolean", "stream", "invalid_type")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, "'seed' must be an integer", "seed", "invalid_type")
    budget = _int_field(body, "reasoning_budget", 0, state.max_model_len)  # thinking-token cap (a sweep's knob)
    opts = body.get("stream_options")
    include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
    return {
        "max_tokens": mt,
        "stop": stops,
        "stream": bool(stream),
        "include_usage": include_usage,
        "reasoning_budget": budget,
        "sampling": Sampling(temperature=_num_field(body, "temperature", 0.0, 2.0, 0.0),
                             top_p=_num_field(body, "top_p", 1e-6, 1.0, 1.0),
                             seed=(seed % (1 << 63)) if seed is not None else None,
                             presence_penalty=_num_field(body, "presence_penalty", *PENALTY_RANGE, state.presence_penalty),
                             frequency_penalty=_num_field(body, "frequency_penalty", *PENALTY_RANGE, state.frequency_penalty)),
    }


def _message_text(i: int, msg: Any) -> tuple[str, str]:
    if not isinstance(msg, dict):
        raise ApiError(400, f"messages[{i}] must be an object", f"messages[{i}]", "invalid_type")
    role = msg.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise ApiError(400, f"messages[{i}].role must be one of {sorted(ROLES)}, got {role!r}",
                       f"messages[{i}].role", "invalid_value")
    if msg.get("tool_calls") not in (None, []):
        raise _unsupported(f"messages[{i}].tool_calls", "tool calls are not rendered into the prompt")
    content = msg.get("content")
    if content is None and role == "assistant":
        content = ""
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"messages[{i}].content[{j}] must be a text part",
                               f"messages[{i}].content", "invalid_value")
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise ApiError(400, f"messages[{i}].content must be a string", f"messages[{i}].content", "invalid_type")
    return ("system" if role == "developer" else role), content


async def _read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The whole body, or a 413 past `limit` bytes, or a 408 when it has not all arrived `timeout` seconds after
    the headers (a client that sends headers and stalls). An oversized body is read and dropped (nothing is kept
    or parsed) up to DRAIN_FACTOR x limit, so that the client, still sending, reads the 413 instead of a reset
    connection; a body declared larger than that is answered at once (and the connection closed)."""
    declared = request.headers.get("content-length")
    declared_n = int(declared) if declared is not None and declared.strip().isdigit() else None
    too_large = ApiError(413, f"request body is over this server's limit of {limit} bytes (max_model_len x "
                         f"{CHARS_PER_TOKEN} characters x {BYTES_PER_CHAR} bytes + 1 MiB)", None, "body_too_large")
    if declared_n is not None and declared_n > DRAIN_FACTOR * limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0

    async def receive_all() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > DRAIN_FACTOR * limit:
                break
            if size <= limit and (declared_n is None or declared_n <= limit):
                chunks.append(chunk)

    try:
        await asyncio.wait_for(receive_all(), timeout)
    except asyncio.TimeoutError:
        if size > limit or (declared_n is not None and declared_n > limit):
            raise too_large from None
        raise ApiError(408, f"the request body did not arrive within {timeout:g} s ({size} bytes received)", None,
                       "request_timeout") from None
    except ClientDisconnect:
        raise ApiError(400, "the client disconnected while sending the body", None, "client_disconnected") from None
    if size > limit:
        raise too_large
    return b"".join(chunks)


def _lone_surrogate_path(body: Any) -> str | None:
    """The JSON path of a string (key or value) holding a lone surrogate, e.g. from a "\\ud800" escape:
    not Unicode text, so no tokenizer can take it. Iterative (nesting depth is already bounded by the parser)."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return path or "(body)"
        elif isinstance(v, dict):
            for k, x in v.items():
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError:
                    return (path + "." if path else "") + "(a key)"
                stack.append(((path + "." if path else "") + k, x))
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", x) for i, x in enumerate(v))
    return None


def _parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except RecursionError:
        raise ApiError(400, "request body is not acceptable JSON: nested too deeply", None, "invalid_json") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApiError(400, f"request body is not valid JSON: {e}", None, "invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", None, "invalid_type")
    bad = _lone_surrogate_path(body)
    if bad is not None:
        raise ApiError(400, f"{bad} contains a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), which "
                       "is not valid Unicode text", bad, "invalid_unicode")
    return body


async def _json_body(request: Request, state: ServerState) -> dict:
    bounds = request_bounds(state.max_model_len)
    raw = await _read_body(request, bounds["max_body_bytes"], state.body_timeout)
    return await _off_loop(_parse_json, raw, pool=None)


async def _off_loop(fn, *args, pool: concurrent.futures.Executor | None = _WORKERS):
    """Run fn(*args) in a worker thread; ApiErrors it raises come back as they are."""
    return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


def _check_chars(state: ServerState, n_chars: int, param: str) -> None:
    limit = request_bounds(state.max_model_len)["max_prompt_chars"]
    if n_chars > limit:
        raise ApiError(400, f"the prompt has {n_chars} characters, more than can fit the context length "
                       f"{state.max_model_len} (refused above {limit} = {CHARS_PER_TOKEN} characters per token, "
                       "before tokenization)", param, "context_length_exceeded")


# The names apply_chat_template takes itself: a chat_template_kwargs key among them would change how the prompt is
# built (or what it returns), not only a template variable.
_RESERVED_TEMPLATE_KWARGS = {"conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
                             "continue_final_message", "tokenize", "padding", "truncation", "max_length",
                             "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs"}


def _template_kwargs(body: dict) -> dict:
    ctk = body.get("chat_template_kwargs")
    if ctk is None:
        return {}
    if not isinstance(ctk, dict):
        raise ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs", "invalid_type")
    for k, v in ctk.items():
        name = f"chat_template_kwargs.{k}"
        if k == "chat_template":
            raise _unsupported(name, "a client-supplied chat template is not accepted; the server renders the "
                               "submission's own template")
        if k in _RESERVED_TEMPLATE_KWARGS:
            raise _unsupported(name, "it is an argument of the template call, not a template variable")
        if v is not None and not isinstance(v, (bool, int, float, str)):
            raise ApiError(400, f"'{name}' must be a string, number, boolean or null", name, "invalid_type")
    return ctk


def _render_and_tokenize(tokenizer: Any, messages: list[dict], ctk: dict) -> tuple[str, list[int]]:
    try:
        prompt_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **ctk)
    except Exception as e:  # a template that rejects this conversation
        raise ApiError(400, f"the chat template rejected the messages: {e}", "messages", "invalid_value")
    if not isinstance(prompt_text, str):
        raise ApiError(400, "the chat template did not render text", "chat_template_kwargs", "invalid_value")
    return prompt_text, tokenizer.encode(prompt_text, add_special_tokens=False)


def _ready(state: ServerState) -> ReasoningController:
    if state.controller is None:
        raise ApiError(503, "the model is still loading", None, "not_ready", "server_error")
    return state.controller


def _check_len(state: ServerState, n_prompt: int, max_tokens: int, param: str = "messages") -> None:
    if n_prompt == 0:
        raise ApiError(400, "the prompt is empty", param, "invalid_value")
    if n_prompt + max_tokens > state.max_model_len:
        raise ApiError(400, f"prompt ({n_prompt} tokens) plus max_tokens ({max_tokens}) exceeds the context "
                       f"length {state.max_model_len}", param, "context_length_exceeded")


def _chat_logprobs(body: dict) -> int | None:
    """The chat request's top_logprobs count when it asks for logprobs (`logprobs: true`), else None."""
    want = body.get("logprobs")
    if want is not None and not isinstance(want, bool):
        raise ApiError(400, "'logprobs' must be a boolean", "logprobs", "invalid_type")
    top = _int_field(body, "top_logprobs", 0, MAX_CHAT_TOP_LOGPROBS)
    if top and not want:
        raise ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
    return (top or 0) if want else None


def _completion_logprobs(body: dict) -> int | None:
    v = body.get("logprobs")
    if v is None or v is False:
        return None
    return _int_field(body, "logprobs", 0, MAX_COMPLETION_LOGPROBS)


def _prepare_chat(body: dict, state: ServerState) -> tuple:
    """Validation, template rendering and tokenization of a chat request (run in a worker thread)."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "'messages' must be a non-empty list", "messages", "invalid_value")
    messages = [dict(zip(("role", "content"), _message_text(i, m))) for i, m in enumerate(msgs)]
    opts = _common(body, state)
    opts["logprobs"] = _chat_logprobs(body)
    ctk = _template_kwargs(body)
    _check_chars(state, sum(len(m["content"]) for m in messages), "messages")
    controller = _ready(state)
    prompt_text, prompt_ids = _render_and_tokenize(state.tokenizer, messages, ctk)
    max_tokens = opts["max_tokens"] or min(state.default_max_tokens, state.max_model_len - len(prompt_ids))
    _check_len(state, len(prompt_ids), max(1, max_tokens))
    user_text = "\n".join(m["content"] for m in messages if m["role"] == "user")
    return controller, opts, prompt_ids, max_tokens, controller.thinking_open(prompt_text), prompt_kind(user_text)


def _is_id(t: Any) -> bool:
    return isinstance(t, int) and not isinstance(t, bool)


def _prompt_list(prompt: Any) -> list:
    """OpenAI's four prompt shapes as a list of prompts, each a string or a list of token ids: "text",
    [ids], ["text", ...], [[ids], ...]. Anything else (mixed lists, deeper nesting, non-integer ids) is a 400."""
    shapes = "a string, a list of token ids, a list of strings or a list of lists of token ids"
    if isinstance(prompt, str):
        return [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise ApiError(400, f"'prompt' must be {shapes} (not empty)", "prompt",
                       "invalid_value" if prompt == [] else "invalid_type")
    if all(_is_id(t) for t in prompt):
        return [prompt]
    if all(isinstance(p, str) for p in prompt):
        return list(prompt)
    if all(isinstance(p, list) for p in prompt):
        for i, p in enumerate(prompt):
            if not all(_is_id(t) for t in p):
                raise ApiError(400, f"prompt[{i}] must be a list of integer token ids", "prompt", "invalid_type")
        return list(prompt)
    raise ApiError(400, f"'prompt' must be {shapes}", "prompt", "invalid_type")


def _prepare_completion(body: dict, state: ServerState) -> tuple:
    """Validation and tokenization of a completions request (run in a worker thread): the controller, the options
    and, per prompt, (prompt ids, prompt text for echo)."""
    echo = body.get("echo", False)
    if echo is not None and not isinstance(echo, bool):
        raise ApiError(400, "'echo' must be a boolean", "echo", "invalid_type")
    opts = _common(body, state, chat=False, min_tokens=0 if echo else 1)
    opts["echo"] = bool(echo)
    opts["logprobs"] = _completion_logprobs(body)
    prompts = _prompt_list(body.get("prompt"))
    if len(prompts) > MAX_PROMPTS:
        raise ApiError(400, f"'prompt' holds {len(prompts)} prompts; this server takes at most {MAX_PROMPTS} in one "
                       "request", "prompt", "invalid_value")
    _check_chars(state, sum(len(p) for p in prompts if isinstance(p, str)), "prompt")
    controller = _ready(state)
    max_tokens = 16 if opts["max_tokens"] is None else opts["max_tokens"]
    vocab = len(state.tokenizer)
    out = []
    for i, p in enumerate(prompts):
        name = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
        if isinstance(p, str):
            ids = state.tokenizer.encode(p, add_special_tokens=False)
        else:
            bad = next((t for t in p if t < 0 or t >= vocab), None)
            if bad is not None:
                raise ApiError(400, f"{name}: token id {bad} is outside the vocabulary [0, {vocab})", "prompt",
                               "invalid_value")
            ids = list(p)
        _check_len(state, len(ids), max_tokens, "prompt")
        text = (p if isinstance(p, str) else state.tokenizer.decode(ids)) if opts["echo"] else ""
        out.append((ids, text))
    return controller, opts, out, max_tokens


def _token_namer(tokenizer: Any):
    """A token id's text, as the legacy and chat logprobs show it (special tokens included)."""
    return lambda t: tokenizer.decode([t], skip_special_tokens=False)


# ------------------------------------------------------------------------------------------ handlers


def build_app(state: ServerState) -> Starlette:
    async def health(_: Request) -> Response:
        if state.controller is None:
            return JSONResponse({"status": "loading" if state.load_error is None else "failed"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": state.model_name, "object": "model",
                                                         "created": int(state.started), "owned_by": "ternforge"}]})

    async def chat(request: Request) -> Response:
        arrived = time.monotonic()
        try:
            body = await _json_body(request, state)
            controller, opts, prompt_ids, max_tokens, thinking, kind = await _off_loop(_prepare_chat, body, state)
            run = controller.run(prompt_ids, max_tokens=max_tokens, thinking=thinking, kind=kind, stop=opts["stop"],
                                 sampling=opts["sampling"], arrived=arrived, budget=opts["reasoning_budget"],
                                 logprobs=opts["logprobs"])
            rid = "chatcmpl-" + uuid.uuid4().hex
            name = _token_namer(state.tokenizer)
            if opts["stream"]:
                first = await _first_or_error(run)
                return StreamingResponse(_chat_sse(rid, state.model_name, first, run, opts, name),
                                         media_type="text/event-stream")
            outcome = await _collect_unless_gone(request, _collect(run))
            if outcome is None:
                return Response(status_code=499)
            return JSONResponse(_chat_json(rid, state.model_name, outcome, opts["logprobs"], name))
        except ApiError as e:
            return e.response()

    async def completions(request: Request) -> Response:
        arrived = time.monotonic()
        try:
            body = await _json_body(request, state)
            controller, opts, prompts, max_tokens = await _off_loop(_prepare_completion, body, state)
            # A completion is what the model wrote: no fallback text; the prompt is scored when echo asks logprobs.
            runs = [controller.run(ids, max_tokens=max_tokens, thinking=False, stop=opts["stop"],
                                   sampling=opts["sampling"], arrived=arrived, logprobs=opts["logprobs"],
                                   echo=opts["echo"] and opts["logprobs"] is not None, fallback=False)
                    for ids, _ in prompts]
            rid = "cmpl-" + uuid.uuid4().hex
            name = _token_namer(state.tokenizer)
            if opts["stream"]:
                items = _merged(runs)
                first = await _first_or_error(items)
                return StreamingResponse(_completion_sse(rid, state.model_name, first, items, prompts, opts, name),
                                         media_type="text/event-stream")
            outcomes = await _collect_unless_gone(request, _collect_all(runs))
            if outcomes is None:
                return Response(status_code=499)
            choices = [_completion_choice(i, o, prompts[i], opts, name) for i, o in enumerate(outcomes)]
            return JSONResponse({"id": rid, "object": "text_completion", "created": int(time.time()),
                                 "model": state.model_name, "choices": choices, "usage": _usage(*outcomes)})
        except ApiError as e:
            return e.response()

    async def tokenizer_info(_: Request) -> Response:
        tok = state.tokenizer
        if tok is None:
            return ApiError(503, "the model is still loading", None, "not_ready", "server_error").response()
        return JSONResponse({"tokenizer_class": type(tok).__name__, "eos_token": tok.eos_token,
                             "bos_token": tok.bos_token, "pad_token": tok.pad_token, "unk_token": tok.unk_token,
                             "chat_template": tok.chat_template, "model_max_length": state.max_model_len,
                             "vocab_size": len(tok)})

    def off_loop_json(fn):
        """A route whose JSON body `fn(body, state)` answers off the event loop (/tokenize, /detokenize)."""
        async def route(request: Request) -> Response:
            try:
                body = await _json_body(request, state)
                return JSONResponse(await _off_loop(fn, body, state))
            except ApiError as e:
                return e.response()
        return route

    tokenize, detokenize = off_loop_json(_tokenize), off_loop_json(_detokenize)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        if status == 404:
            return ApiError(404, f"no route {request.url.path}", None, "not_found").response()
        if status == 405:
            return ApiError(405, f"method {request.method} not allowed on {request.url.path}", None,
                            "method_not_allowed").response()
        return ApiError(status, str(getattr(exc, "detail", exc)), None, None).response()

    async def server_error(request: Request, exc: Exception) -> Response:
        _log(f"unhandled error on {request.url.path}: {exc!r}")
        return ApiError(500, "internal server error", None, "internal_error", "server_error").response()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/tokenizer_info", tokenizer_info, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: not_found, Exception: server_error})


async def _first_or_error(run: AsyncIterator[Delta | Outcome]) -> Delta | Outcome:
    """Start the generation before answering 200, so an overloaded queue still gets its 503."""
    try:
        return await run.__anext__()
    except QueueFull as e:
        raise ApiError(503, f"server overloaded: {e}", None, "overloaded", "server_overloaded") from None
    except EngineError as e:
        _log(f"engine failed: {e}")
        raise ApiError(502, f"the engine failed: {e}", None, "engine_error", "server_error") from None


async def _collect_unless_gone(request: Request, collecting: Any) -> Any:
    """What `collecting` (a coroutine over the runs) returns, or None when the client disconnected first (the
    generations are then cancelled)."""
    collect = asyncio.ensure_future(collecting)
    gone = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        collect.cancel()
        gone.cancel()
        raise
    gone.cancel()
    if collect.done():
        return collect.result()
    collect.cancel()
    try:
        await collect
    except (asyncio.CancelledError, Exception):
        pass
    _log("client went away; its generation was cancelled")
    return None


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _collect(run: AsyncIterator[Delta | Outcome]) -> Outcome:
    """The run's Outcome (its generation is closed however this ends: done, failed or cancelled)."""
    try:
        item = await _first_or_error(run)
        try:
            while not isinstance(item, Outcome):
                item = await run.__anext__()
        except EngineError as e:
            _log(f"engine failed: {e}")
            raise ApiError(502, f"the engine failed: {e}", None, "engine_error", "server_error") from None
        return item
    finally:
        await run.aclose()


async def _collect_all(runs: list[AsyncIterator[Delta | Outcome]]) -> list[Outcome]:
    """Every run's Outcome, the runs decoding together; the first failure cancels the others."""
    tasks = [asyncio.ensure_future(_collect(r)) for r in runs]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _merged(runs: list[AsyncIterator[Delta | Outcome]]) -> AsyncIterator[tuple[int, Delta | Outcome]]:
    """The runs' items as they come, each with its run's index (the runs decode together). A failure of one
    run ends the merge with its error; closing the merge cancels every run."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, run: AsyncIterator[Delta | Outcome]) -> None:
        try:
            async for item in run:
                await queue.put((i, item, None))
        except BaseException as e:  # noqa: BLE001 - handed to the reader
            await queue.put((i, None, e))
        finally:
            await run.aclose()

    tasks = [asyncio.ensure_future(pump(i, r)) for i, r in enumerate(runs)]
    try:
        done = 0
        while done < len(runs):
            i, item, err = await queue.get()
            if err is not None:
                raise err
            if isinstance(item, Outcome):
                done += 1
            yield i, item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _usage(*outcomes: Outcome) -> dict:
    """Usage over all of a response's outcomes (one per prompt)."""
    prompt = sum(o.prompt_tokens for o in outcomes)
    completion = sum(o.completion_tokens for o in outcomes)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "completion_tokens_details": {"reasoning_tokens": sum(o.reasoning_tokens for o in outcomes)}}


def _ternforge(o: Outcome) -> dict:
    """The server's own key on a chat response: `fallback_content` true marks content the server wrote (the model
    gave no answer), which an evaluation must not score as the model's."""
    return {"thinking_cut": o.thinking_cut, "fallback_content": o.fallback, "engine_finish": o.engine_finish}


def _chat_json(rid: str, model: str, o: Outcome, top: int | None, name: Any) -> dict:
    message: dict = {"role": "assistant", "content": o.content}
    if o.reasoning is not None:
        message["reasoning_content"] = o.reasoning
    logprobs = None if top is None else lp.chat([] if o.fallback else o.logprobs, name, top)
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": o.finish_reason}],
            "usage": _usage(o), "ternforge": _ternforge(o)}


def _completion_choice(index: int, o: Outcome, prompt: tuple[list[int], str], opts: dict, name: Any) -> dict:
    ids, prompt_text = prompt
    logprobs = None
    if opts["logprobs"] is not None:
        entries: list = list(o.logprobs)
        tokens = [e.token for e in o.logprobs]
        if opts["echo"]:
            entries, tokens = list(o.prompt_logprobs or [None] * len(ids)) + entries, ids + tokens
        logprobs = lp.legacy(entries, tokens, name)
    return {"index": index, "text": prompt_text + o.content, "logprobs": logprobs, "finish_reason": o.finish_reason}


def _tokenize(body: dict, state: ServerState) -> dict:
    """vLLM's /tokenize for a text prompt: {"prompt", "add_special_tokens" (default true)} -> tokens."""
    _ready(state)
    if "messages" in body:
        raise _unsupported("messages", "/tokenize takes a text prompt; render chats through /v1/chat/completions")
    prompt, special = body.get("prompt"), body.get("add_special_tokens", True)
    if not isinstance(prompt, str):
        raise ApiError(400, "'prompt' must be a string", "prompt", "invalid_type")
    if not isinstance(special, bool):
        raise ApiError(400, "'add_special_tokens' must be a boolean", "add_special_tokens", "invalid_type")
    _check_chars(state, len(prompt), "prompt")
    tokens = state.tokenizer.encode(prompt, add_special_tokens=special)
    return {"tokens": tokens, "count": len(tokens), "max_model_len": state.max_model_len}


def _detokenize(body: dict, state: ServerState) -> dict:
    """vLLM's /detokenize: {"tokens": [ids]} -> {"prompt": text} (special tokens kept)."""
    _ready(state)
    tokens, vocab = body.get("tokens"), len(state.tokenizer)
    if not isinstance(tokens, list) or not all(_is_id(t) for t in tokens):
        raise ApiError(400, "'tokens' must be a list of integer token ids", "tokens", "invalid_type")
    if any(t < 0 or t >= vocab for t in tokens):
        raise ApiError(400, f"token ids must be in [0, {vocab})", "tokens", "invalid_value")
    return {"prompt": state.tokenizer.decode(tokens)}


def _sse(obj: dict) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"


async def _chat_sse(rid: str, model: str, first: Delta | Outcome, run: AsyncIterator[Delta | Outcome],
                    opts: dict, name: Any) -> AsyncIterator[str]:
    created = int(time.time())
    top = opts["logprobs"]

    def chunk(delta: dict, finish: str | None = None, logprobs: dict | None = None, **extra: Any) -> str:
        return _sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
                     **extra})

    yield chunk({"role": "assistant", "content": ""})
    item: Delta | Outcome | None = first
    try:
        while item is not None:
            if isinstance(item, Outcome):
                yield chunk({}, item.finish_reason, ternforge=_ternforge(item))
                if opts["include_usage"]:
                    yield _sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                                "choices": [], "usage": _usage(item)})
                break
            if item.kind == "reasoning":
                yield chunk({"reasoning_content": item.text})
            else:  # content; a fallback's Delta has no logprobs (no model token wrote it)
                yield chunk({"content": item.text}, logprobs=None if top is None else lp.chat(item.logprobs, name, top))
            item = await run.__anext__()
    except Exception as e:  # never leave the client hanging mid-stream
        _log(f"stream failed: {e!r}")
        yield _sse({"error": {"message": str(e), "type": "server_error", "param": None, "code": None}})
    finally:
        await run.aclose()
    yield "data: [DONE]\n\n"


async def _completion_sse(rid: str, model: str, first: tuple[int, Delta | Outcome],
                          items: AsyncIterator[tuple[int, Delta | Outcome]], prompts: list[tuple[list[int], str]],
                          opts: dict, name: Any) -> AsyncIterator[str]:
    """One chunk per piece of each prompt's completion (`index` names the prompt). With echo a prompt's first
    chunk is its text (with its logprobs when asked); text_offset counts on across a choice's chunks."""
    created = int(time.time())
    offsets = [0] * len(prompts)
    echoed = [not opts["echo"]] * len(prompts)
    outcomes: list[Outcome] = []

    def chunk(i: int, text: str, tokens: list[int] | None = None, entries: list | None = None,
              finish: str | None = None) -> str:
        logprobs = None
        if opts["logprobs"] is not None:
            logprobs = lp.legacy(entries or [], tokens or [], name, offsets[i])
            offsets[i] += sum(len(t) for t in logprobs["tokens"])
        return _sse({"id": rid, "object": "text_completion", "created": created, "model": model,
                     "choices": [{"index": i, "text": text, "logprobs": logprobs, "finish_reason": finish}]})

    def echo(i: int, entries: list | None) -> str:
        echoed[i] = True
        ids, text = prompts[i]
        return chunk(i, text, ids, entries if entries is not None else [None] * len(ids))

    item: tuple[int, Delta | Outcome] | None = first
    try:
        while item is not None:
            i, piece = item
            if isinstance(piece, Delta) and piece.kind == "prompt":
                yield echo(i, piece.logprobs)
            else:
                if not echoed[i]:  # echo without logprobs: the text only, before the completion's
                    yield echo(i, None)
                if isinstance(piece, Outcome):
                    outcomes.append(piece)
                    yield chunk(i, "", finish=piece.finish_reason)
                else:
                    yield chunk(i, piece.text, [e.token for e in piece.logprobs], piece.logprobs)
            item = await items.__anext__()
    except StopAsyncIteration:
        if opts["include_usage"]:
            yield _sse({"id": rid, "object": "text_completion", "created": created, "model": model,
                        "choices": [], "usage": _usage(*outcomes)})
    except Exception as e:
        _log(f"stream failed: {e!r}")
        yield _sse({"error": {"message": str(e), "type": "server_error", "param": None, "code": None}})
    finally:
        await items.aclose()
    yield "data: [DONE]\n\n"
