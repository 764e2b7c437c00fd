"""`python -m ternforge_server upstream --dir <submission> --port N [...]`: the built-in engine as a separate
process, serving the token-id subset of vLLM's `/v1/completions` on loopback for the controller.

    GET  /health          503 while loading; 200 {"status": "ok", "running": R, "waiting": W, "tokens": T,
                          "max_running": M, "batched_steps": B} once warmed up (B: decode steps of > 1 row)
    POST /v1/completions  {"prompt": [token ids], "max_tokens", "temperature", "top_p", "seed",
                           "presence_penalty", "frequency_penalty", "stop_token_ids", "stream",
                           "logprobs": k, "echo"}
                          -> choices[0].token_ids (streamed per decode step with "stream": true); a stop id
                          ends the row with finish_reason "stop" and is not included (stop_reason names it).
                          With "logprobs": k, choices[0].logprobs is vLLM's legacy object for the chunk's
                          tokens as with `return_tokens_as_token_ids` (tokens "token_id:N", top k + the
                          token); with "echo" the first chunk's object starts with the prompt's tokens.

A client that closes its connection cancels its request: the engine drops the row at the next step. The
start-up report (`--report`) is written once loaded, or with the LoadError that refused it (exit code 2).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

from .contract import PENALTY_RANGE
from .logprobs import legacy, token_id_name


def _log(msg: str) -> None:
    sys.stderr.write(f"[upstream] {msg}\n")
    sys.stderr.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ternforge_server upstream")
    p.add_argument("--dir", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--model-name", default="ternforge")
    p.add_argument("--max-batch", type=int, default=0)
    p.add_argument("--max-queue", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=32768)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--cpu-linear", choices=["decode", "plain"], default="decode")
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--report", default="", help="write the load report (JSON) here")
    return p.parse_args(argv)


class _Bad(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def response(self) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"error": {"message": self.message, "type": "invalid_request_error",
                                       "param": self.param, "code": None}}, status_code=self.status)


def _num(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise _Bad(400, f"'{name}' must be a number in [{lo}, {hi}]", name)
    return float(v)


def parse_request(body: Any, vocab: int, max_model_len: int) -> tuple[list[int], int, list[int], Any, bool,
                                                                     int | None, bool]:
    from .engine import Sampling

    if not isinstance(body, dict):
        raise _Bad(400, "request body must be a JSON object")
    prompt = body.get("prompt")
    if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and
                                                        0 <= t < vocab for t in prompt)):
        raise _Bad(400, f"'prompt' must be a non-empty list of token ids in [0, {vocab})", "prompt")
    mt = body.get("max_tokens", 16)
    if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1 or len(prompt) + mt > max_model_len:
        raise _Bad(400, f"'max_tokens' must be an integer >= 1 with prompt + max_tokens <= {max_model_len}",
                   "max_tokens")
    stops = body.get("stop_token_ids") or []
    if not (isinstance(stops, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in stops)):
        raise _Bad(400, "'stop_token_ids' must be a list of token ids", "stop_token_ids")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _Bad(400, "'seed' must be an integer", "seed")
    sampling = Sampling(temperature=_num(body, "temperature", 0.0, 0.0, 2.0),
                        top_p=_num(body, "top_p", 1.0, 1e-6, 1.0),
                        seed=(seed % (1 << 63)) if seed is not None else None,
                        presence_penalty=_num(body, "presence_penalty", 0.0, *PENALTY_RANGE),
                        frequency_penalty=_num(body, "frequency_penalty", 0.0, *PENALTY_RANGE))
    logprobs = body.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                 or not 0 <= logprobs <= vocab):
        raise _Bad(400, f"'logprobs' must be an integer in [0, {vocab}]", "logprobs")
    echo = bool(body.get("echo", False))
    if echo and logprobs is None:
        raise _Bad(400, "'echo' scores the prompt here: it needs 'logprobs'", "echo")
    return list(prompt), mt, list(stops), sampling, bool(body.get("stream", False)), logprobs, echo


def build_app(state: dict) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    from .engine import QueueFull

    async def health(_: Request) -> Response:
        engine = state.get("engine")
        if engine is None:
            return JSONResponse({"status": "loading" if not state.get("error") else "failed"}, status_code=503)
        return JSONResponse({"status": "ok", "running": engine.running, "waiting": engine.waiting,
                             "tokens": engine.stats.tokens, "max_running": engine.stats.max_running,
                             "batched_steps": engine.stats.batched_steps})

    async def completions(request: Request) -> Response:
        engine = state.get("engine")
        try:
            if engine is None:
                raise _Bad(503, "the model is still loading")
            try:
                body = json.loads(await request.body())
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
                raise _Bad(400, f"request body is not valid JSON: {e}") from None
            ids, max_new, stops, sampling, stream_out, logprobs, echo = parse_request(
                body, state["vocab"], state["max_model_len"])
            try:
                gen = engine.generate(ids, max_new, stops, None, sampling, logprobs, echo)
            except QueueFull as e:
                raise _Bad(503, f"overloaded: {e}") from None
        except _Bad as e:
            return e.response()
        rid = "cmpl-" + uuid.uuid4().hex
        model = state["model_name"]
        created = int(time.time())

        echoed = [False]

        def choice(start: int, end: int, finish: str | None) -> dict:
            """The choice for tokens [start, end) of the stream (with the prompt's logprobs the first time)."""
            tokens = gen.tokens[start:end]
            lp = None
            if logprobs is not None:
                entries: list = gen.logprobs[start:end]
                if echo and not echoed[0]:
                    entries, tokens_lp = (gen.prompt_logprobs or []) + entries, ids + tokens
                    echoed[0] = True
                else:
                    tokens_lp = tokens
                lp = legacy(entries, tokens_lp, token_id_name)
            return {"index": 0, "text": "", "token_ids": tokens, "logprobs": lp,
                    "finish_reason": _openai_finish(finish),
                    "stop_reason": gen.stop_token if finish == "stop" else None}

        if stream_out:
            async def sse() -> AsyncIterator[str]:
                try:
                    sent = seen = 0
                    async for _ in gen:
                        seen += 1
                        if gen._queue is not None and gen._queue.empty():  # one chunk per delivered step
                            yield _sse({"id": rid, "object": "text_completion", "created": created, "model": model,
                                        "choices": [choice(sent, seen, None)]})
                            sent = seen
                    yield _sse({"id": rid, "object": "text_completion", "created": created, "model": model,
                                "choices": [choice(sent, seen, gen.finish_reason)],
                                "usage": {"prompt_tokens": len(ids), "completion_tokens": len(gen.tokens)}})
                    yield "data: [DONE]\n\n"
                finally:
                    if not gen.done:
                        gen.cancel()

            return StreamingResponse(sse(), media_type="text/event-stream")

        disconnected = asyncio.ensure_future(_wait_disconnect(request))
        result = asyncio.ensure_future(gen.result())
        try:
            await asyncio.wait({disconnected, result}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not result.done():
                gen.cancel()
                result.cancel()
            disconnected.cancel()
        if not result.done() or result.cancelled():
            return Response(status_code=499)
        tokens, finish = result.result()
        return JSONResponse({"id": rid, "object": "text_completion", "created": created, "model": model,
                             "choices": [choice(0, len(tokens), finish)],
                             "usage": {"prompt_tokens": len(ids), "completion_tokens": len(tokens),
                                       "total_tokens": len(ids) + len(tokens)}})

    return Starlette(routes=[Route("/health", health, methods=["GET"]),
                             Route("/v1/completions", completions, methods=["POST"])])


async def _wait_disconnect(request: Any) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _openai_finish(reason: str | None) -> str | None:
    if reason is None:
        return None
    return "stop" if reason == "stop" else "length" if reason in ("length", "deadline") else reason


def _sse(obj: dict) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"


def _write(path: str, report: dict) -> None:
    if not path:
        return
    target = Path(path)
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import uvicorn

    sys.setswitchinterval(0.0005)  # the HTTP loop shares the GIL with the engine thread (see __main__)
    sub = Path(args.dir).resolve()
    state: dict = {"engine": None, "model_name": args.model_name, "max_model_len": args.max_model_len}
    server = uvicorn.Server(uvicorn.Config(build_app(state), host=args.host, port=args.port, log_level="warning",
                                           access_log=False, timeout_keep_alive=75))
    exit_code = {"code": 0}

    def start_up() -> None:
        t0 = time.perf_counter()
        try:
            from .serving import build_builtin

            engine, tokenizer, report = build_builtin(sub, args)
            report["ready_s"] = round(time.perf_counter() - t0, 3)
            report["status"] = "ready"
            # The report first: /health answers 200 once the engine is set, and the controller reads the
            # report then (serving.start_builtin); the other order let it read none under load.
            _write(args.report, report)
            state["vocab"] = len(tokenizer)
            state["engine"] = engine
            _log(f"ready on {args.host}:{args.port} ({report.get('device')}) in {report['ready_s']} s")
        except Exception as e:
            from .loader import LoadError

            state["error"] = str(e)
            err = e.to_json() if isinstance(e, LoadError) else {"reason": "start-up-failed", "message": repr(e)}
            _write(args.report, {"status": "refused", "error": err})
            _log("refusing to serve: " + str(e))
            if not isinstance(e, LoadError):
                _log(traceback.format_exc())
            exit_code["code"] = 2
            server.should_exit = True

    threading.Thread(target=start_up, name="ternforge-upstream-startup", daemon=True).start()
    server.run()
    if state["engine"] is not None:
        state["engine"].shutdown()
    return exit_code["code"]
