"""The reasoning-budget controller, above any engine's `generate(ids, max_new, stop_ids, deadline)`.

Qwen's chat template opens `<think>` in the prompt. The controller lets the model think for at most B tokens
(B = max_tokens - answer reserve - closing phrase; the reserve depends on what the prompt asks: multiple
choice, math, code, or a default), or less when the thinking falls into a repetition loop or the wall-clock
deadline nears. It then cancels the generation, appends a closing phrase ending in `</think>`, and lets the
model answer within what is left of max_tokens. If the model closes `</think>` itself, it answers in the same
generation. `content` is the answer only (never the reasoning); for chat never empty: a short fallback, logged
and flagged (`Outcome.fallback`), if the model gives nothing; a completion (`fallback=False`) is what the model
wrote, "" included. `reasoning_content` is the thinking. finish_reason is honest: `stop` when the model ended the
answer itself (an end-of-sequence token or a stop string), `length` when it was cut.

With `logprobs=k` each content Delta carries the logprobs of the answer tokens consumed since the previous one
(the tokens of a stop string's match included, as vLLM counts them) and the Outcome all of them; with `echo` a
Delta of kind "prompt" carries the prompt's, before any content. `max_tokens=0` (echo only) scores the prompt
and generates nothing.
"""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol

from .engine import GenerationStream, Sampling
from .logprobs import TokenLogprob

CLOSING_PHRASE = ("\n\nConsidering the limited time, I have to give the solution based on the thinking "
                  "directly now.\n</think>\n\n")
FALLBACK_CONTENT = "I could not produce an answer in the time available."


#: Below this many tokens left for the answer, the closing phrase shrinks to the bare `</think>` marker.
MIN_ANSWER_TOKENS = 16


def _log(msg: str) -> None:
    sys.stderr.write(f"[controller] {msg}\n")
    sys.stderr.flush()


class EngineError(Exception):
    """The engine failed the request (the upstream died, errored or is unreachable)."""


def _raise_if_failed(stream: GenerationStream) -> None:
    if stream.finish_reason == "error":
        raise EngineError(stream.error or "the engine failed the request")


class Engine(Protocol):
    def generate(self, ids: list[int], max_new: int, stop_ids: Any = (), deadline: float | None = None,
                 sampling: Sampling = Sampling(), logprobs: int | None = None,
                 echo: bool = False) -> GenerationStream: ...


@dataclass(frozen=True)
class ControllerConfig:
    """Answer reserves by prompt kind (tokens), repetition-loop detection, deadline split."""

    reserve: dict[str, int] = field(default_factory=lambda: {"choice": 300, "math": 500, "code": 1000,
                                                             "default": 500})
    closing_phrase: str = CLOSING_PHRASE
    loop_min_span: int = 96       # a loop must cover at least this many tokens ...
    loop_min_repeats: int = 4     # ... and repeat its block at least this many times
    loop_max_period: int = 256
    loop_check_every: int = 8
    request_timeout_s: float = 280.0  # wall clock per request, under the grader's 300 s
    answer_time_fraction: float = 0.3  # thinking is forced to end when this share of the timeout remains


_CHOICE = re.compile(r"(^|\n)\s*\(?[A-J][\).:]\s|Answer:\s*\$?[A-J]\b|\bmultiple[- ]choice\b|\bLETTER\b")
_CODE = re.compile(r"```|\bpython\b|\bdef |\bfunction\b|\bimplement\b|\bprogram\b|\bstdin\b|\bcode\b", re.I)
_MATH = re.compile(r"\\boxed|\\frac|\$[^$]+\$|\bsolve\b|\bcompute\b|\binteger\b|\bequation\b", re.I)


def prompt_kind(text: str) -> str:
    """multiple choice / code / math / default, from the user's prompt text."""
    if _CHOICE.search(text):
        return "choice"
    if _CODE.search(text):
        return "code"
    if _MATH.search(text):
        return "math"
    return "default"


def thinking_budget(max_tokens: int, kind: str, cfg: ControllerConfig, closing_len: int) -> int:
    """B: tokens of thinking allowed before the closing phrase; at least half of max_tokens stays for the rest."""
    reserve = min(cfg.reserve.get(kind, cfg.reserve["default"]), max_tokens // 2)
    return max(0, max_tokens - reserve - closing_len)


def find_loop(tokens: list[int], min_span: int, min_repeats: int, max_period: int) -> int:
    """The period p of a block repeated at the end of `tokens` (>= min_repeats times, >= min_span tokens), or 0."""
    n = len(tokens)
    for p in range(1, min(max_period, n // min_repeats) + 1):
        span = max(min_span, p * min_repeats)
        if span > n:
            break
        if tokens[-1] != tokens[-1 - p]:
            continue
        tail = tokens[n - span:]
        if tail[p:] == tail[:-p]:
            return p
    return 0


class IncrementalDecoder:
    """Token ids -> text deltas without re-decoding everything (holds back incomplete UTF-8)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.ids: list[int] = []
        self.prefix = 0
        self.read = 0

    def push(self, token: int) -> str:
        self.ids.append(token)
        prefix_text = self.tok.decode(self.ids[self.prefix:self.read], skip_special_tokens=True)
        new_text = self.tok.decode(self.ids[self.prefix:], skip_special_tokens=True)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            delta = new_text[len(prefix_text):]
            self.prefix, self.read = self.read, len(self.ids)
            return delta
        return ""

    def flush(self) -> str:
        prefix_text = self.tok.decode(self.ids[self.prefix:self.read], skip_special_tokens=True)
        new_text = self.tok.decode(self.ids[self.prefix:], skip_special_tokens=True)
        self.prefix = self.read = len(self.ids)
        return new_text[len(prefix_text):] if len(new_text) > len(prefix_text) else ""


@dataclass
class Delta:
    """A streamed piece of the reply: kind is 'reasoning', 'content' or 'prompt' (echo: logprobs only)."""

    kind: str
    text: str
    logprobs: list[TokenLogprob | None] = field(default_factory=list)


@dataclass
class Outcome:
    content: str
    reasoning: str | None
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    thinking_cut: str | None = None  # budget | repetition | deadline | no-close | None
    fallback: bool = False
    engine_finish: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)  # the answer tokens', when asked for
    prompt_logprobs: list[TokenLogprob | None] | None = None  # with echo


class ReasoningController:
    def __init__(self, engine: Engine, tokenizer: Any, cfg: ControllerConfig = ControllerConfig()) -> None:
        self.engine = engine
        self.tok = tokenizer
        self.cfg = cfg
        self.think_end = self._token_id("</think>")
        # Markup the answer never shows: a stray <think> or </think> after the thinking is dropped from content.
        self.think_marks = frozenset(t for t in (self._token_id("<think>"), self.think_end) if t is not None)
        self.closing_ids = tokenizer.encode(cfg.closing_phrase, add_special_tokens=False)
        # When max_tokens leaves no room for the phrase, close with the bare marker so the answer still fits.
        self.short_closing_ids = tokenizer.encode("\n</think>\n\n", add_special_tokens=False)
        self.eos_ids = self._eos_ids()

    def _token_id(self, text: str) -> int | None:
        tid = self.tok.convert_tokens_to_ids(text)
        return tid if isinstance(tid, int) and tid != self.tok.unk_token_id else None

    def _eos_ids(self) -> frozenset[int]:
        ids = set()
        if self.tok.eos_token_id is not None:
            ids.add(int(self.tok.eos_token_id))
        for t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>"):
            tid = self._token_id(t)
            if tid is not None:
                ids.add(tid)
        return frozenset(ids)

    def thinking_open(self, prompt_text: str) -> bool:
        """The template left `<think>` open at the end of the prompt."""
        tail = prompt_text.rstrip()
        return self.think_end is not None and tail.endswith("<think>")

    async def run(self, prompt_ids: list[int], *, max_tokens: int, thinking: bool, kind: str = "default",
                  stop: list[str] | None = None, sampling: Sampling = Sampling(),
                  arrived: float | None = None, budget: int | None = None, logprobs: int | None = None,
                  echo: bool = False, fallback: bool = True) -> AsyncIterator[Delta | Outcome]:
        """Yield Delta pieces as they come, then one Outcome. `budget` caps thinking below the derived one."""
        cfg = self.cfg
        start = arrived if arrived is not None else time.monotonic()
        deadline = start + cfg.request_timeout_s
        think_deadline = deadline - cfg.answer_time_fraction * cfg.request_timeout_s
        stop = [s for s in (stop or []) if s]
        used = 0
        reasoning_ids: list[int] = []
        thinking_cut: str | None = None
        answer_ids: list[int] = []
        engine_finish = ""
        in_thinking = thinking
        answer = _AnswerState(self.tok, stop, self.think_marks)
        answer_lps: list[TokenLogprob] = []
        pending: list[TokenLogprob | None] = []  # answer logprobs not yet handed out with a Delta
        prompt_lps: list[TokenLogprob | None] | None = None

        if max_tokens == 0:  # echo only: score the prompt (one token generated upstream, dropped)
            if echo:
                stream = self.engine.generate(prompt_ids, 1, (), deadline, sampling, logprobs, echo=True)
                await stream.result()
                _raise_if_failed(stream)
                prompt_lps = stream.prompt_logprobs
                yield Delta("prompt", "", list(prompt_lps or []))
            yield Outcome(content="", reasoning=None, finish_reason="length", prompt_tokens=len(prompt_ids),
                          completion_tokens=0, reasoning_tokens=0, engine_finish="length", prompt_logprobs=prompt_lps)
            return

        derived = thinking_budget(max_tokens, kind, cfg, len(self.closing_ids)) if thinking else 0
        budget = derived if budget is None else min(derived, budget)
        if thinking and budget <= 0:
            thinking_cut = "budget"  # no room to think: close at once and answer
        elif thinking:
            dec = IncrementalDecoder(self.tok)
            stream = self.engine.generate(prompt_ids, max_tokens, self.eos_ids, deadline, sampling, logprobs)
            try:
                async for tok in stream:
                    index = used
                    used += 1
                    if in_thinking:
                        if tok == self.think_end:
                            in_thinking = False
                            rest = dec.flush()
                            if rest:
                                yield Delta("reasoning", rest)
                            continue
                        reasoning_ids.append(tok)
                        text = dec.push(tok)
                        if text:
                            yield Delta("reasoning", text)
                        cut = self._should_cut(reasoning_ids, budget, think_deadline)
                        if cut:
                            thinking_cut = cut
                            stream.cancel()
                            break
                    else:
                        answer_ids.append(tok)
                        if logprobs is not None:
                            pending.append(stream.logprobs[index])
                            answer_lps.append(stream.logprobs[index])
                        text = answer.push(tok)
                        if text:
                            yield Delta("content", text, pending)
                            pending = []
                        if answer.stopped:
                            stream.cancel()
                            break
            finally:
                if not stream.done:
                    stream.cancel()
            _raise_if_failed(stream)
            engine_finish = stream.finish_reason or ("cancelled" if thinking_cut or answer.stopped else "")
            rest = dec.flush()
            if rest and in_thinking:
                yield Delta("reasoning", rest)
            if in_thinking and thinking_cut is None:
                # The generation ended inside the thinking (eos, length, deadline): close it and answer anyway.
                thinking_cut = "no-close"
            if thinking_cut is not None:
                _log(f"thinking cut ({thinking_cut}) after {len(reasoning_ids)} tokens")

        need_answer_phase = (not thinking) or thinking_cut is not None
        if need_answer_phase:
            ids = list(prompt_ids)
            if thinking:
                closing = self.closing_ids
                if max_tokens - used - len(closing) < MIN_ANSWER_TOKENS:
                    closing = self.short_closing_ids
                ids += reasoning_ids + closing
                used += len(closing)
            remaining = max_tokens - used
            if remaining > 0 and time.monotonic() < deadline:
                stream = self.engine.generate(ids, remaining, self.eos_ids, deadline, sampling, logprobs,
                                              echo=echo and not thinking)
                try:
                    async for index, tok in _enumerate(stream):
                        if prompt_lps is None and stream.prompt_logprobs is not None:
                            prompt_lps = stream.prompt_logprobs
                            yield Delta("prompt", "", list(prompt_lps))
                        if logprobs is not None:
                            pending.append(stream.logprobs[index])
                            answer_lps.append(stream.logprobs[index])
                        used += 1
                        answer_ids.append(tok)
                        text = answer.push(tok)
                        if text:
                            yield Delta("content", text, pending)
                            pending = []
                        if answer.stopped:
                            stream.cancel()
                            break
                finally:
                    if not stream.done:
                        stream.cancel()
                _raise_if_failed(stream)
                if prompt_lps is None and stream.prompt_logprobs is not None:  # no token came (a stop id first)
                    prompt_lps = stream.prompt_logprobs
                    yield Delta("prompt", "", list(prompt_lps))
                engine_finish = stream.finish_reason or ("cancelled" if answer.stopped else "")
            else:
                engine_finish = "length"
        tail = answer.flush()
        if tail or pending:
            yield Delta("content", tail, pending)

        if answer.stopped or engine_finish == "stop":
            finish = "stop"
        else:
            finish = "length"
        content = answer.text
        used_fallback = False
        if fallback and not content.strip():
            used_fallback = True
            content = self._fallback(reasoning_ids)
            _log(f"empty answer (engine finish {engine_finish}); returning a fallback content")
            yield Delta("content", content)
        reasoning = self.tok.decode(reasoning_ids, skip_special_tokens=True) if thinking else None
        yield Outcome(content=content, reasoning=reasoning, finish_reason=finish, prompt_tokens=len(prompt_ids),
                      completion_tokens=used, reasoning_tokens=len(reasoning_ids), thinking_cut=thinking_cut,
                      fallback=used_fallback, engine_finish=engine_finish, logprobs=answer_lps,
                      prompt_logprobs=prompt_lps)

    def _should_cut(self, reasoning_ids: list[int], budget: int, think_deadline: float) -> str | None:
        n = len(reasoning_ids)
        if n >= budget:
            return "budget"
        if n % self.cfg.loop_check_every == 0 and find_loop(reasoning_ids, self.cfg.loop_min_span,
                                                            self.cfg.loop_min_repeats, self.cfg.loop_max_period):
            return "repetition"
        if time.monotonic() >= think_deadline:
            return "deadline"
        return None

    def _fallback(self, reasoning_ids: list[int]) -> str:
        """The last answer-looking line of the reasoning, else a fixed sentence."""
        text = self.tok.decode(reasoning_ids, skip_special_tokens=True) if reasoning_ids else ""
        for pattern in (r"\\boxed\{[^{}]*\}", r"Answer:\s*\S+"):
            found = re.findall(pattern, text)
            if found:
                return found[-1]
        return FALLBACK_CONTENT


async def _enumerate(stream: GenerationStream) -> AsyncIterator[tuple[int, int]]:
    i = 0
    async for tok in stream:
        yield i, tok
        i += 1


class _AnswerState:
    """Answer text accumulation with stop strings (held back until they cannot start a stop string)."""

    def __init__(self, tokenizer: Any, stop: list[str], skip: frozenset[int] = frozenset()) -> None:
        self.dec = IncrementalDecoder(tokenizer)
        self.skip = skip
        self.stop = stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.full = ""
        self.sent = 0
        self.stopped = False

    @property
    def text(self) -> str:
        return self.full

    def push(self, token: int) -> str:
        if self.stopped or token in self.skip:
            return ""
        self.full += self.dec.push(token)
        return self._release(final=False)

    def flush(self) -> str:
        if not self.stopped:
            self.full += self.dec.flush()
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        if self.stop and not self.stopped:
            hits = [i for i in (self.full.find(s) for s in self.stop) if i >= 0]
            if hits:
                self.full = self.full[:min(hits)]
                self.stopped = True
        end = len(self.full) if (final or self.stopped) else max(self.sent, len(self.full) - self.hold)
        out = self.full[self.sent:end]
        self.sent = end
        return out
