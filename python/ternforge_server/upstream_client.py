"""The controller's side of the upstream: an HTTP/1.1 client (h11 over asyncio streams) for a token-id
`/v1/completions` server on loopback, and `UpstreamEngine`, which gives the reasoning controller the same
`generate(ids, max_new, stop_ids, deadline, sampling) -> GenerationStream` as the in-process engine.

The upstream is either `python -m ternforge_server upstream` (the built-in engine) or vLLM's OpenAI server.
Both take `prompt` as token ids with `return_token_ids: true` and stream `choices[0].token_ids` per chunk;
the text they also send is ignored (the controller decodes the ids itself). Log-probabilities are asked as
vLLM's `logprobs: k` (and `echo: true` for the prompt's) with `return_tokens_as_token_ids: true`, and read back
by token id (`logprobs.parse_wire`). One connection per request:
cancelling a stream (the client went away, the controller cut the thinking, the deadline passed) closes
that connection, and the upstream aborts the request and frees its slot.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any, AsyncIterator, Iterable

import h11

from .engine import GenerationStream, QueueFull, Sampling, check_request
from .logprobs import TokenLogprob, parse_wire


class UpstreamError(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"upstream answered {status}: {body[:300].decode('utf-8', 'replace')}")
        self.status = status
        self.body = body


class _Conn:
    """One HTTP/1.1 exchange on a fresh loopback connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host
        self.h = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, host: str, port: int) -> "_Conn":
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, f"{host}:{port}")

    async def send(self, method: str, path: str, body: bytes | None) -> None:
        headers = [("Host", self.host), ("Connection", "close"), ("Accept", "*/*")]
        if body is not None:
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        out = self.h.send(h11.Request(method=method, target=path, headers=headers))
        if body:
            out += self.h.send(h11.Data(data=body))
        out += self.h.send(h11.EndOfMessage())
        self.writer.write(out)
        await self.writer.drain()

    async def event(self) -> Any:
        while True:
            ev = self.h.next_event()
            if ev is h11.NEED_DATA:
                self.h.receive_data(await self.reader.read(1 << 16))
                continue
            return ev

    async def response(self) -> h11.Response:
        ev = await self.event()
        while isinstance(ev, h11.InformationalResponse):
            ev = await self.event()
        if not isinstance(ev, h11.Response):
            raise ConnectionError(f"upstream sent {type(ev).__name__} instead of a response")
        return ev

    async def body_chunks(self) -> AsyncIterator[bytes]:
        while True:
            ev = await self.event()
            if isinstance(ev, h11.Data):
                yield bytes(ev.data)
            elif isinstance(ev, (h11.EndOfMessage, h11.ConnectionClosed)):
                return

    async def read_body(self) -> bytes:
        return b"".join([c async for c in self.body_chunks()])

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # already closed
            pass


async def request_json(host: str, port: int, method: str, path: str, body: Any = None,
                       timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of one plain request; raises OSError/TimeoutError when the upstream does not answer."""
    async def go() -> tuple[int, bytes]:
        conn = await _Conn.open(host, port)
        try:
            await conn.send(method, path, None if body is None else json.dumps(body).encode())
            resp = await conn.response()
            return resp.status_code, await conn.read_body()
        finally:
            conn.close()

    return await asyncio.wait_for(go(), timeout)


async def stream_sse(host: str, port: int, path: str, body: dict) -> AsyncIterator[dict]:
    """POST `body` and yield each `data:` JSON object of the SSE answer until `[DONE]` or the end.
    Closing the generator closes the connection. A non-200 answer raises UpstreamError."""
    conn = await _Conn.open(host, port)
    try:
        await conn.send("POST", path, json.dumps(body).encode())
        resp = await conn.response()
        if resp.status_code != 200:
            raise UpstreamError(resp.status_code, await conn.read_body())
        buf = b""
        async for chunk in conn.body_chunks():
            buf += chunk.replace(b"\r\n", b"\n")
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        return
                    yield json.loads(data)
    finally:
        conn.close()


class UpstreamStream(GenerationStream):
    """A GenerationStream fed by a task reading the upstream; cancel() closes the upstream connection."""

    def __init__(self) -> None:
        super().__init__()
        self.task: asyncio.Task | None = None
        self.overloaded: str | None = None

    # Fed on the event loop's own thread: straight into the queue, no cross-thread wake-up per token.
    def _push(self, token: int, post: Any = None, logprob: TokenLogprob | None = None) -> None:
        self.tokens.append(token)
        if logprob is not None:
            self.logprobs.append(logprob)
        self._queue.put_nowait(token)  # type: ignore[union-attr]

    def _finish(self, reason: str, stop_token: int | None = None, error: str | None = None, post: Any = None) -> None:
        if self._done.is_set():
            return
        self.finish_reason, self.stop_token, self.error = reason, stop_token, error
        self._done.set()
        self._queue.put_nowait(None)  # type: ignore[union-attr]

    def cancel(self) -> None:
        super().cancel()
        task, loop = self.task, self._loop
        if task is not None and loop is not None and not task.done():
            loop.call_soon_threadsafe(task.cancel)

    async def __aiter__(self) -> AsyncIterator[int]:
        async for tok in super().__aiter__():
            yield tok
        if self.overloaded is not None:
            raise QueueFull(self.overloaded)


class UpstreamEngine:
    """generate() over the upstream's token-id /v1/completions (streamed)."""

    def __init__(self, host: str, port: int, model: str, label: str = "upstream") -> None:
        self.host, self.port, self.model, self.label = host, port, model, label
        self.open_streams = 0

    def generate(self, ids: list[int], max_new: int, stop_ids: Iterable[int] = (), deadline: float | None = None,
                 sampling: Sampling = Sampling(), logprobs: int | None = None, echo: bool = False) -> GenerationStream:
        check_request(ids, max_new, logprobs, echo)
        stops = sorted({int(s) for s in stop_ids})
        body: dict = {"model": self.model, "prompt": list(ids), "max_tokens": int(max_new),
                      "temperature": sampling.temperature, "top_p": sampling.top_p,
                      "presence_penalty": sampling.presence_penalty, "frequency_penalty": sampling.frequency_penalty,
                      "stop_token_ids": stops, "stream": True, "return_token_ids": True,
                      "skip_special_tokens": False}
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if logprobs is not None:
            body.update(logprobs=logprobs, echo=echo, return_tokens_as_token_ids=True)
        stream = UpstreamStream()
        stream.task = asyncio.get_running_loop().create_task(self._pump(stream, body, set(stops), deadline))
        return stream

    async def _pump(self, stream: UpstreamStream, body: dict, stops: set[int], deadline: float | None) -> None:
        self.open_streams += 1
        events = stream_sse(self.host, self.port, "/v1/completions", body)
        loop = asyncio.get_running_loop()
        # One timeout for the whole stream. Not asyncio.wait_for per event: on Python 3.11 it loses a cancel()
        # that lands while the event it awaits completes, and the row then decodes to its end upstream for a
        # client long gone (1 in 3 disconnects at load 5 on 2 cores). cancel() is also checked per event.
        when = None if deadline is None else loop.time() + max(0.0, deadline - time.monotonic())
        try:
            async with asyncio.timeout_at(when):
                async for ev in events:
                    if stream.cancelled:
                        stream._finish("cancelled")
                        return
                    if self._take(stream, ev, stops):
                        return
            stream._finish("error", error="the upstream ended the stream without a finish reason")
        except TimeoutError:
            stream._finish("deadline")
        except asyncio.CancelledError:
            stream._finish("cancelled")
        except UpstreamError as e:
            if e.status == 503:
                stream.overloaded = f"the {self.label} is overloaded"
            stream._finish("error", error=str(e))
        except Exception as e:  # connection refused or reset: the upstream died
            stream._finish("error", error=f"{self.label} unreachable: {e!r}")
        finally:
            self.open_streams -= 1
            try:
                await asyncio.shield(events.aclose())
            except BaseException:
                pass

    def _take(self, stream: UpstreamStream, ev: dict, stops: set[int]) -> bool:
        """Feed one upstream event into the stream; True when it finished the request."""
        if "error" in ev:
            stream._finish("error", error=str(ev["error"]))
            return True
        for choice in ev.get("choices") or []:
            token_ids = [int(t) for t in choice.get("token_ids") or []]
            entries: list[TokenLogprob | None] = [None] * len(token_ids)
            if choice.get("logprobs") is not None:
                try:
                    wire = parse_wire(choice["logprobs"])
                    if len(wire) < len(token_ids):
                        raise ValueError(f"{len(wire)} entries for {len(token_ids)} tokens")
                except (ValueError, TypeError, AttributeError) as e:
                    stream._finish("error", error=f"the {self.label} sent unreadable logprobs: {e}")
                    return True
                if stream.prompt_logprobs is None and len(wire) > len(token_ids):  # echo: the prompt's come first
                    stream.prompt_logprobs = wire[:len(wire) - len(token_ids)]
                entries = wire[len(wire) - len(token_ids):]
            for t, entry in zip(token_ids, entries):
                if t in stops:  # vLLM includes the stop token in token_ids; the built-in upstream does not
                    stream._finish("stop", stop_token=t)
                    return True
                stream._push(t, logprob=entry)
            reason = choice.get("finish_reason")
            if reason in ("stop", "length"):
                stop_token = choice.get("stop_reason")
                stream._finish(reason, stop_token=stop_token if isinstance(stop_token, int) else None)
                return True
            if reason:  # "error", "abort", ...
                stream._finish("error", error=f"the {self.label} ended the request: {reason}")
                return True
        return False

    async def ping(self, timeout: float = 2.0) -> bool:
        try:
            status, _ = await request_json(self.host, self.port, "GET", "/health", timeout=timeout)
            return status == 200
        except Exception:
            return False
