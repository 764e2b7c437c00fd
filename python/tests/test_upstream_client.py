"""The controller's client of the upstream engine, against a real socket: a cancel() always ends the
request and closes the upstream connection, even when the upstream's events are already buffered, which
is when Python 3.11's asyncio.wait_for used to swallow the cancellation (the row then decoded to its end
for a client long gone; seen as a flaky test at load 5)."""
from __future__ import annotations

import asyncio
import json
import time

from ternforge_server.upstream_client import UpstreamEngine

BURST = 4000  # token events written at once: every read the client makes is already buffered


async def _upstream(closed: asyncio.Event, reads: list[int]) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        await reader.readexactly(length)
        events = b"".join(b"data: " + json.dumps({"choices": [{"token_ids": [7], "finish_reason": None}]}).encode()
                          + b"\n\n" for _ in range(BURST))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(f"{len(events):x}\r\n".encode() + events + b"\r\n")
        await writer.drain()
        reads.append(len(await reader.read()))  # never answers more; returns when the client closes
        closed.set()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_cancel_with_buffered_events_ends_the_request_and_closes_the_connection() -> None:
    async def main() -> list[tuple[str | None, int]]:
        out = []
        for _ in range(20):
            closed, reads = asyncio.Event(), []
            server = await _upstream(closed, reads)
            port = server.sockets[0].getsockname()[1]
            engine = UpstreamEngine("127.0.0.1", port, "m")
            stream = engine.generate([1, 2, 3], 8000, deadline=time.monotonic() + 60)
            async for _tok in stream:
                if len(stream.tokens) >= 10:
                    stream.cancel()
                    break
            await asyncio.wait_for(closed.wait(), 10)  # the upstream saw its client go
            for _ in range(200):
                if stream.done:
                    break
                await asyncio.sleep(0.01)
            out.append((stream.finish_reason, len(stream.tokens)))
            server.close()
            await server.wait_closed()
            assert engine.open_streams == 0
        return out

    got = asyncio.run(main())
    assert all(reason == "cancelled" for reason, _ in got), got
    # Dropped at once, not after reading the whole burst.
    assert max(n for _, n in got) < BURST // 2, got


def _vllm_logprobs(entries: list[tuple[int, float | None, dict[int, float] | None]]) -> dict:
    """vLLM's legacy logprobs object as its OpenAI server writes it with return_tokens_as_token_ids."""
    name = lambda t: f"token_id:{t}"
    return {"tokens": [name(t) for t, _, _ in entries], "token_logprobs": [lp for _, lp, _ in entries],
            "top_logprobs": [None if top is None else {name(k): v for k, v in top.items()} for _, _, top in entries],
            "text_offset": [0] * len(entries)}


def test_logprobs_and_echo_are_read_from_vllms_stream_layout() -> None:
    """vLLM streams echo's prompt entries ahead of the first chunk's own (whose token_ids hold only the generated
    tokens), and includes a stop token in token_ids; the client splits them and stops there."""
    first = {"choices": [{"token_ids": [7], "finish_reason": None, "logprobs": _vllm_logprobs(
        [(1, None, None), (2, -1.5, {2: -1.5, 9: -0.5}), (7, -0.25, {7: -0.25})])}]}
    second = {"choices": [{"token_ids": [8, 99], "finish_reason": "stop", "stop_reason": None, "logprobs":
                           _vllm_logprobs([(8, -2.0, {8: -2.0, 4: -0.1}), (99, -0.5, {99: -0.5})])}]}
    seen: dict = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        seen.update(json.loads(await reader.readexactly(length)))
        events = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in (first, second)) + b"data: [DONE]\n\n"
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: "
                     + str(len(events)).encode() + b"\r\n\r\n" + events)
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        engine = UpstreamEngine("127.0.0.1", server.sockets[0].getsockname()[1], "m")
        stream = engine.generate([1, 2], 10, stop_ids=[99], logprobs=1, echo=True)
        tokens, reason = await stream
        server.close()
        return stream, tokens, reason

    from ternforge_server.logprobs import TokenLogprob

    stream, tokens, reason = asyncio.run(main())
    assert (seen["logprobs"], seen["echo"], seen["return_tokens_as_token_ids"]) == (1, True, True)
    assert (tokens, reason) == ([7, 8], "stop")
    assert stream.prompt_logprobs == [None, TokenLogprob(2, -1.5, ((9, -0.5), (2, -1.5)))]
    assert stream.logprobs == [TokenLogprob(7, -0.25, ((7, -0.25),)), TokenLogprob(8, -2.0, ((4, -0.1), (8, -2.0)))]
