"""The built-in engine: every concurrent request decoded together, in one loop, on one dedicated thread.

Continuous batching at step boundaries. Each step the loop
  1. admits waiting requests (up to `max_batch` running): they are prefilled together, LEFT-padded, in a
     fresh cache, and their cache tensors are merged into the running batch's cache;
  2. runs one decode step for the whole running batch;
  3. finishes rows (stop id, max_new, deadline, cancel) and removes them from the cache.

The per-sequence state lives in a transformers `DynamicCache` that the loop merges and splits itself along
the batch dimension: full-attention layers keep K/V `[B, H, T, D]`, left-padded to a common T with a 2-D
attention mask; Gated DeltaNet layers keep a convolution state `[B, C, K]` and a recurrent state
`[B, H, Dk, Dv]` that have no time dimension and concatenate directly. Padding is on the left only: a padded
position is zeroed before it reaches a linear-attention layer, so it leaves the recurrent and conv state as
a fresh sequence would have them, whereas padding after real tokens would keep decaying the state.

`generate(ids, max_new, stop_ids, deadline)` returns a `GenerationStream`: await it for
`(tokens, finish_reason)`, iterate it for tokens as they come, or call `wait()` from plain threads.
finish_reason is one of: stop (a stop id; not included in tokens), length (max_new), deadline, cancelled,
error.

Log-probabilities (`logprobs.TokenLogprob`, from the raw logits before penalties and temperature): with
`logprobs=k` every generated token's comes with the stream (`stream.logprobs`, one per token, top k), and with
`echo=True` also the prompt's (`stream.prompt_logprobs`, None for the first token), set before the first token.
The prompt is scored from the prefill's hidden states through the output head `SCORE_CHUNK_ELEMENTS` logits at a
time, so a long prompt costs its prefill plus one head product per position, never a [T, vocab] tensor.
"""
from __future__ import annotations

import asyncio
import collections
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterable

import torch

from .logprobs import TokenLogprob

FINISH_REASONS = ("stop", "length", "deadline", "cancelled", "error")
#: Prompt scoring takes the head product for this many logits (positions x vocabulary) at a time.
SCORE_CHUNK_ELEMENTS = 1 << 22


class QueueFull(Exception):
    """The waiting queue is at capacity: the API answers 503."""


def _log(msg: str) -> None:
    sys.stderr.write(f"[engine] {msg}\n")
    sys.stderr.flush()


@dataclass(frozen=True)
class Sampling:
    """temperature 0 = greedy; otherwise softmax(logits / temperature), nucleus top_p, per-request seed.
    Before either, OpenAI's penalties lower the logit of each token the request has generated so far:
    by presence_penalty once it occurs, plus frequency_penalty times its count."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    @property
    def penalised(self) -> bool:
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0


class GenerationStream:
    """One request's output, fed by the engine thread, read by asyncio or by plain threads."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[TokenLogprob] = []  # one per token when the request asked for logprobs
        self.prompt_logprobs: list[TokenLogprob | None] | None = None  # with echo, set before the first token
        self.finish_reason: str | None = None
        self.stop_token: int | None = None
        self.error: str | None = None
        self._cancelled = threading.Event()
        self._done = threading.Event()
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            self._queue: asyncio.Queue | None = asyncio.Queue()
        except RuntimeError:
            self._loop, self._queue = None, None

    # --- engine side (any thread)
    def _push(self, token: int, post: "_Post | None" = None, logprob: TokenLogprob | None = None) -> None:
        self.tokens.append(token)
        if logprob is not None:
            self.logprobs.append(logprob)
        if self._loop is not None:
            (post or _Post()).add(self, token)

    def _finish(self, reason: str, stop_token: int | None = None, error: str | None = None,
                post: "_Post | None" = None) -> None:
        if self._done.is_set():
            return
        self.finish_reason, self.stop_token, self.error = reason, stop_token, error
        self._done.set()
        if self._loop is not None:
            (post or _Post()).add(self, None)

    # --- consumer side
    def cancel(self) -> None:
        """Ask the engine to drop this request at the next step boundary."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> tuple[list[int], str]:
        if not self._done.wait(timeout):
            raise TimeoutError("generation did not finish in time")
        return list(self.tokens), self.finish_reason or "error"

    async def __aiter__(self) -> AsyncIterator[int]:
        assert self._queue is not None, "async iteration needs a stream created inside an event loop"
        while True:
            tok = await self._queue.get()
            if tok is None:
                return
            yield tok

    async def result(self) -> tuple[list[int], str]:
        async for _ in self:
            pass
        return list(self.tokens), self.finish_reason or "error"

    def __await__(self):
        return self.result().__await__()


def check_request(ids: list[int], max_new: int, logprobs: int | None = None, echo: bool = False) -> None:
    """What every engine's generate() refuses: the in-process BatchEngine and the upstream client alike."""
    if not ids:
        raise ValueError("generate needs at least one prompt token")
    if max_new < 1:
        raise ValueError("max_new must be >= 1")
    if logprobs is not None and logprobs < 0:
        raise ValueError("logprobs must be >= 0")
    if echo and logprobs is None:
        raise ValueError("echo scores the prompt: it needs logprobs")


class _Post:
    """Items for streams' asyncio queues, handed to each event loop in one call when the post is sent (or at
    once when a stream is fed outside a step): one wake-up of the HTTP loop per decode step, not one per row."""

    def __init__(self, deferred: bool = False) -> None:
        self.deferred = deferred
        self.items: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, int | None]]] = {}

    def add(self, stream: GenerationStream, item: int | None) -> None:
        self.items.setdefault(stream._loop, []).append((stream._queue, item))  # type: ignore[arg-type]
        if not self.deferred:
            self.send()

    def send(self) -> None:
        items, self.items = self.items, {}
        for loop, batch in items.items():
            try:
                loop.call_soon_threadsafe(_deliver, batch)
            except RuntimeError:  # loop closed
                pass


def _deliver(batch: list[tuple[asyncio.Queue, int | None]]) -> None:
    for queue, item in batch:
        queue.put_nowait(item)


@dataclass
class _Request:
    ids: list[int]
    max_new: int
    stop_ids: frozenset[int]
    deadline: float | None
    sampling: Sampling
    stream: GenerationStream
    logprobs: int | None = None  # top-k of each generated token's logprobs, None: none
    echo: bool = False  # also score the prompt (same top-k)
    arrived: float = field(default_factory=time.monotonic)


@dataclass
class _Row:
    req: _Request
    generator: torch.Generator | None
    position: int  # position id of the next token fed
    generated: int = 0
    counts: torch.Tensor | None = None  # [vocab] how often each token was generated (penalised rows only)


@dataclass
class EngineStats:
    steps: int = 0
    prefills: int = 0
    tokens: int = 0
    max_running: int = 0
    batched_steps: int = 0  # decode steps that ran more than one request's row together
    busy_s: float = 0.0


class BatchEngine:
    """Continuous-batching decode loop over a transformers causal LM (Qwen3.5 hybrid or Llama-type)."""

    def __init__(self, model: torch.nn.Module, *, max_batch: int = 32, max_queue: int = 256,
                 max_prefill_tokens: int = 8192, pad_id: int = 0) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.max_prefill_tokens = max_prefill_tokens
        self.pad_id = pad_id
        self.stats = EngineStats()
        self._waiting: collections.deque[_Request] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self._rows: list[_Row] = []
        self._cache: Any = None
        self._mask: torch.Tensor | None = None  # [B, T] 1 = real token, 0 = left pad
        self._last: torch.Tensor | None = None  # [B] last sampled token per row
        self._cache_kw = cache_keyword(model)
        # Prompt scoring runs the decoder and the head separately (what the causal LM's forward does in one).
        self._decoder = model.get_decoder()
        self._head = model.get_output_embeddings()
        self._decoder_cache_kw = cache_keyword(self._decoder)
        self._thread = threading.Thread(target=self._run, name="ternforge-engine", daemon=True)

    # ------------------------------------------------------------------ public API

    def start(self) -> "BatchEngine":
        self._thread.start()
        return self

    def shutdown(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    @property
    def running(self) -> int:
        return len(self._rows)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def generate(self, ids: list[int], max_new: int, stop_ids: Iterable[int] = (), deadline: float | None = None,
                 sampling: Sampling = Sampling(), logprobs: int | None = None, echo: bool = False) -> GenerationStream:
        """Queue one request; `deadline` is a time.monotonic() value. Raises QueueFull when the queue is full."""
        check_request(ids, max_new, logprobs, echo)
        stream = GenerationStream()
        req = _Request(list(ids), int(max_new), frozenset(int(s) for s in stop_ids), deadline, sampling, stream,
                       logprobs, echo)
        with self._cond:
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(f"{len(self._waiting)} requests already waiting")
            self._waiting.append(req)
            self._cond.notify()
        return stream

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            with self._cond:
                while not self._stop and not self._waiting and not self._rows:
                    self._cond.wait()
                if self._stop:
                    break
                admitted = self._take_admissible()
            t0 = time.perf_counter()
            try:
                with torch.inference_mode():
                    if admitted:
                        self._prefill(admitted)
                    if self._rows:
                        self._decode_step()
            except Exception:  # a bug or an out-of-memory: fail the batch, keep serving
                err = traceback.format_exc()
                _log("step failed; failing the running batch:\n" + err)
                for row in self._rows:
                    row.req.stream._finish("error", error=err.splitlines()[-1])
                for req in admitted:
                    req.stream._finish("error", error=err.splitlines()[-1])
                self._reset_batch()
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
            self.stats.busy_s += time.perf_counter() - t0
        for row in self._rows:
            row.req.stream._finish("cancelled")
        for req in self._waiting:
            req.stream._finish("cancelled")

    def _take_admissible(self) -> list[_Request]:
        """Pop waiting requests that fit (batch slots, prefill token budget); drop cancelled/expired ones."""
        out: list[_Request] = []
        longest = 0
        now = time.monotonic()
        while self._waiting and len(self._rows) + len(out) < self.max_batch:
            req = self._waiting[0]
            if req.stream.cancelled:
                self._waiting.popleft()
                req.stream._finish("cancelled")
                continue
            if req.deadline is not None and now >= req.deadline:
                self._waiting.popleft()
                req.stream._finish("deadline")
                continue
            new_longest = max(longest, len(req.ids))
            if out and new_longest * (len(out) + 1) > self.max_prefill_tokens:
                break
            out.append(self._waiting.popleft())
            longest = new_longest
        return out

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **{self._cache_kw: cache})
        return out.logits[:, -1, :].float()

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _prefill(self, reqs: list[_Request]) -> None:
        """Prefill the admitted requests together (left-padded), then merge them into the running batch."""
        width = max(len(r.ids) for r in reqs)
        ids = torch.full((len(reqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(reqs), width), dtype=torch.long)
        for i, r in enumerate(reqs):
            ids[i, width - len(r.ids):] = torch.tensor(r.ids, dtype=torch.long)
            mask[i, width - len(r.ids):] = 1
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        ids, mask, positions = ids.to(self.device), mask.to(self.device), positions.to(self.device)
        cache = self._new_cache()
        if any(r.echo for r in reqs):
            hidden = self._decoder(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                   **{self._decoder_cache_kw: cache}).last_hidden_state
            logits = self._head(hidden[:, -1, :]).float()
            for i, r in enumerate(reqs):
                if r.echo:
                    r.stream.prompt_logprobs = self._score(hidden[i, width - len(r.ids):], r.ids, r.logprobs or 0)
        else:
            logits = self._forward(ids, mask, positions, cache)
        rows = []
        vocab = logits.shape[-1]
        for r in reqs:
            gen = None
            if r.sampling.temperature > 0:
                gen = torch.Generator(device=self.device)
                gen.manual_seed(r.sampling.seed if r.sampling.seed is not None else int.from_bytes(os.urandom(7), "little"))
            counts = torch.zeros(vocab, dtype=logits.dtype, device=self.device) if r.sampling.penalised else None
            rows.append(_Row(r, gen, position=len(r.ids), counts=counts))
        self.stats.prefills += 1
        self._merge(rows, cache, mask)
        first, lps = self._sample(logits, rows)
        start = len(self._rows) - len(rows)
        self._last = first if start == 0 else torch.cat([self._last[:start], first])  # type: ignore[index]
        self._emit(first, start, lps)

    def _score(self, hidden: torch.Tensor, ids: list[int], k: int) -> list[TokenLogprob | None]:
        """The prompt's logprobs from its hidden states [T, H]: position j's logits score token j + 1."""
        out: list[TokenLogprob | None] = [None]
        target = torch.tensor(ids[1:], dtype=torch.long, device=hidden.device)
        step = max(1, SCORE_CHUNK_ELEMENTS // self._head.weight.shape[0])
        for a in range(0, len(ids) - 1, step):
            lsm = torch.log_softmax(self._head(hidden[a:a + step]).float(), dim=-1)
            out.extend(_token_logprobs(lsm, target[a:a + step], k))
        return out

    def _decode_step(self) -> None:
        assert self._mask is not None and self._last is not None
        b = len(self._rows)
        self._mask = torch.cat([self._mask, torch.ones((b, 1), dtype=self._mask.dtype, device=self.device)], dim=1)
        positions = torch.tensor([[r.position] for r in self._rows], dtype=torch.long, device=self.device)
        logits = self._forward(self._last.view(b, 1), self._mask, positions, self._cache)
        for row in self._rows:
            row.position += 1
        nxt, lps = self._sample(logits, self._rows)
        self._last = nxt
        self.stats.steps += 1
        self.stats.max_running = max(self.stats.max_running, b)
        self.stats.batched_steps += b > 1
        self._emit(nxt, 0, lps)

    def _sample(self, logits: torch.Tensor, rows: list[_Row]) -> tuple[torch.Tensor, list[TokenLogprob | None]]:
        """The next token of each row, and its logprobs for the rows that asked (from the raw logits)."""
        scored = [i for i, row in enumerate(rows) if row.req.logprobs is not None]
        raw = torch.log_softmax(logits[scored], dim=-1) if scored else None  # a copy: penalties change logits
        for i, row in enumerate(rows):
            if row.counts is not None and row.generated > 0:
                s = row.req.sampling
                logits[i] -= s.frequency_penalty * row.counts + s.presence_penalty * (row.counts > 0).to(logits.dtype)
        out = logits.argmax(dim=-1)
        for i, row in enumerate(rows):
            s = row.req.sampling
            if s.temperature <= 0:
                continue
            probs = torch.softmax(logits[i] / s.temperature, dim=-1)
            if s.top_p < 1.0:
                sorted_p, order = probs.sort(descending=True)
                keep = sorted_p.cumsum(-1) - sorted_p < s.top_p
                sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
                probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
            out[i] = torch.multinomial(probs, 1, generator=row.generator)[0]
        lps: list[TokenLogprob | None] = [None] * len(rows)
        for j, i in enumerate(scored):
            lps[i] = _token_logprobs(raw[j:j + 1], out[i:i + 1], rows[i].req.logprobs or 0)[0]  # type: ignore[index]
        return out, lps

    def _emit(self, tokens: torch.Tensor, start: int, lps: list[TokenLogprob | None]) -> None:
        """Deliver the sampled tokens of rows[start:] (with their logprobs), then drop every finished row."""
        values = tokens.tolist()
        now = time.monotonic()
        post = _Post(deferred=True)
        for i, tok in enumerate(values):
            row = self._rows[start + i]
            row.generated += 1
            self.stats.tokens += 1
            stream = row.req.stream
            if tok in row.req.stop_ids:
                stream._finish("stop", stop_token=tok, post=post)
                continue
            stream._push(tok, post, lps[i])
            if row.counts is not None:
                row.counts[tok] += 1
            if row.generated >= row.req.max_new:
                stream._finish("length", post=post)
        for row in self._rows:
            if row.req.stream.done:
                continue
            if row.req.stream.cancelled:
                row.req.stream._finish("cancelled", post=post)
            elif row.req.deadline is not None and now >= row.req.deadline:
                row.req.stream._finish("deadline", post=post)
        post.send()
        keep = [i for i, row in enumerate(self._rows) if not row.req.stream.done]
        if len(keep) < len(self._rows):
            self._select(keep)

    # ------------------------------------------------------------------ cache surgery

    @staticmethod
    def _layer_states(layer: Any) -> tuple[list[tuple[dict, Any]], bool]:
        """(linear-attention state dicts with their keys, has K/V) of one cache layer."""
        states = []
        for attr in ("conv_states", "recurrent_states"):
            d = getattr(layer, attr, None)
            if isinstance(d, dict):
                for k, v in d.items():
                    if v is not None:
                        states.append((d, k))
        has_kv = getattr(layer, "keys", None) is not None and isinstance(getattr(layer, "keys"), torch.Tensor) \
            and layer.keys.numel() > 0
        return states, has_kv

    def _merge(self, rows: list[_Row], cache: Any, mask: torch.Tensor) -> None:
        if self._cache is None or not self._rows:
            self._cache, self._mask, self._rows = cache, mask, list(rows)
            return
        t_old, t_new = self._mask.shape[1], mask.shape[1]
        width = max(t_old, t_new)
        for old, new in zip(self._cache.layers, cache.layers):
            states, has_kv = self._layer_states(old)
            for d, k in states:
                d[k] = torch.cat([d[k], getattr(new, _attr_of(old, d))[k]], dim=0)
            if has_kv:
                old.keys = torch.cat([_left_pad(old.keys, width, -2), _left_pad(new.keys, width, -2)], dim=0)
                old.values = torch.cat([_left_pad(old.values, width, -2), _left_pad(new.values, width, -2)], dim=0)
        self._mask = torch.cat([_left_pad(self._mask, width, -1), _left_pad(mask, width, -1)], dim=0)
        self._rows.extend(rows)

    def _select(self, keep: list[int]) -> None:
        if not keep:
            self._reset_batch()
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        assert self._mask is not None
        mask = self._mask.index_select(0, idx)
        first = int((mask.sum(0) > 0).nonzero()[0].item())  # drop columns that are padding in every row
        for layer in self._cache.layers:
            states, has_kv = self._layer_states(layer)
            for d, k in states:
                d[k] = d[k].index_select(0, idx)
            if has_kv:
                layer.keys = layer.keys.index_select(0, idx)[..., first:, :]
                layer.values = layer.values.index_select(0, idx)[..., first:, :]
        self._mask = mask[:, first:]
        self._last = self._last.index_select(0, idx) if self._last is not None else None
        self._rows = [self._rows[i] for i in keep]

    def _reset_batch(self) -> None:
        self._rows, self._cache, self._mask, self._last = [], None, None, None


def cache_keyword(model: torch.nn.Module) -> str:
    """The keyword the model's forward takes its KV cache by: `cache` in some transformers releases,
    `past_key_values` in others (5.20 has only the latter)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    raise TypeError(f"{type(model).__name__}.forward takes neither `cache` nor `past_key_values`")


def _token_logprobs(lsm: torch.Tensor, tokens: torch.Tensor, k: int) -> list[TokenLogprob]:
    """Rows of log_softmax [N, V] and the token each row scores [N]: one TokenLogprob per row with its top k."""
    chosen = lsm.gather(1, tokens.view(-1, 1)).view(-1).tolist()
    if k > 0:
        vals, idx = lsm.topk(k, dim=-1)
        tops = [tuple(zip(i, v)) for i, v in zip(idx.tolist(), vals.tolist())]
    else:
        tops = [()] * len(chosen)
    return [TokenLogprob(t, lp, top) for t, lp, top in zip(tokens.tolist(), chosen, tops)]


def _attr_of(layer: Any, d: dict) -> str:
    return "conv_states" if getattr(layer, "conv_states", None) is d else "recurrent_states"


def _left_pad(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """Zero-pad `t` on the left of dimension `dim` up to `width`."""
    n = t.shape[dim]
    if n == width:
        return t
    shape = list(t.shape)
    shape[dim] = width - n
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)
