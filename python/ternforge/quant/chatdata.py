"""Chat transcripts written by the full-precision teacher, for distillation.

Distilling only on raw calibration text (documentation, web text) keeps a student's next-token statistics
on that text but not its behaviour inside the chat template: on `smol` such a student answered every chat
request with looping documentation prose and never produced the end-of-turn token. So distillation also
sees the teacher's own answers: prompts are built from calibration text (each a snippet of a calibration
document inside one of a few fixed instructions), rendered with the model's chat template, and answered
greedily by the teacher up to `max_new` tokens. A transcript keeps the teacher's end-of-turn token, so the
student learns where an answer stops. Only `calibration` text is used, and nothing here is a benchmark item.

Snippet prompts are all about a given text, and a weak student trained on them alone learns one reply
("The text is about ...") for every request. So the teacher may also write the user's side
(`self_prompts`, the Magpie recipe): fed the chat template only up to where a user message starts, an
instruction-tuned model samples a request of the kind it was tuned on, which it then answers like any
other. No outside text enters those transcripts at all. Left alone, SmolLM2's teacher writes long planning
requests ("Can you help me plan a surprise birthday party ..."); `openers` steer it, Magpie-style, by starting
the user's message with a few fixed words (one per draw, in turn; "" leaves the draw free), so it also writes
the short questions users ask ("What ...?", "How many ...?"). The openers are generic words of ours, never an
evaluation item; the teacher writes the rest of the question and its answer.

Deterministic: snippets are chosen evenly over the documents in manifest order, answers are greedy, and
self-written requests are sampled from a seeded generator.

Under a launch of several ranks (`world`, dist.py) the batches are split: rank r generates batches r, r + N,
r + 2N, ..., and each round's rows are gathered to every rank in batch order. A batch holds the same rows,
padding and seed as in one process, so every rank ends with the transcripts one process writes (on the CPU at
an equal thread count, bit for bit; test_scaleout.py), in 1/N of the time.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from .dist import ONE, World

INSTRUCTIONS = (
    "Summarize the following text in one or two sentences.\n\n{snippet}",
    "What is this text about? Answer briefly.\n\n{snippet}",
    "Explain the following to a beginner in a few sentences.\n\n{snippet}",
    "Give one short example that illustrates the following.\n\n{snippet}",
)


ANSWER_BATCH = 16  # requests answered (and self-written) at once; the preflight times generation at this batch
SELF_REQUEST_TOKENS = 64  # the longest self-written request (lib/preflight/decide.ts holds the same figure; python/tests/test_preflight.py checks it)


def snippets(docs: list[torch.Tensor], tokenizer, n: int, tokens: int) -> list[str]:
    """`n` text snippets of about `tokens` tokens, spread evenly over every document's windows."""
    windows = [(d, s) for d in range(len(docs)) for s in range(0, max(1, docs[d].numel() - tokens // 2), tokens)]
    if not windows:
        raise ValueError("no calibration documents to build chat prompts from")
    picked = [windows[(i * len(windows)) // n] for i in range(n)] if n <= len(windows) else \
        [windows[i % len(windows)] for i in range(n)]
    out = []
    for d, s in picked:
        text = tokenizer.decode(docs[d][s:s + tokens].tolist(), skip_special_tokens=True)
        out.append(" ".join(text.split()))
    return out


def eos_ids(teacher: torch.nn.Module) -> set[int]:
    eos = teacher.generation_config.eos_token_id if getattr(teacher, "generation_config", None) else None
    eos = eos if eos is not None else teacher.config.eos_token_id
    return set(eos if isinstance(eos, list) else [eos])


def _left_padded(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask


def _until_stop(tokens: list[int], stops: set[int]) -> int | None:
    return next((k for k, t in enumerate(tokens) if t in stops), None)


class TransformersGenerator:
    """Generation with transformers' `generate` on a loaded model, in left-padded batches: the default path,
    and the only one for the on-policy student (its weights are the ones being trained)."""

    name = "transformers"
    batch = ANSWER_BATCH

    def __init__(self, model: torch.nn.Module, tokenizer, device: str = "cpu"):
        self.model, self.device = model, device
        self.stops = eos_ids(model)
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.stops)
        self._cuda = [torch.device(device).index or 0] if torch.device(device).type == "cuda" else []

    @torch.no_grad()
    def greedy(self, prompts: list[list[int]], max_new: int) -> list[list[int]]:
        """Each prompt's continuation, greedy, up to max_new tokens (tokens past a stop token are cut later)."""
        return self._generate(prompts, max_new, do_sample=False)

    @torch.no_grad()
    def sample(self, prompts: list[list[int]], max_new: int, temperature: float, top_p: float, seed: int) -> list[list[int]]:
        """Each prompt's continuation sampled from the global generators seeded with `seed` (then restored)."""
        with torch.random.fork_rng(devices=self._cuda):
            torch.manual_seed(seed)
            return self._generate(prompts, max_new, do_sample=True, temperature=temperature, top_p=top_p, top_k=0)

    def _generate(self, prompts: list[list[int]], max_new: int, **kw) -> list[list[int]]:
        self.model.eval()
        ids, mask = _left_padded(prompts, self.pad)
        gen = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                  max_new_tokens=max_new, eos_token_id=sorted(self.stops), pad_token_id=self.pad, **kw)
        return gen[:, ids.shape[1]:].tolist()


def by_rank(world: World, batches: int, generate: Callable[[int], list[list[int]]]) -> Iterator[tuple[int, list[list[int]]]]:
    """(b, generate(b)'s rows) for b = 0 .. batches - 1 in order, on every rank; rank r calls generate(b) only
    for b = r mod N, in rounds of N batches, each round's rows gathered. A consumer may stop early: every rank
    holds the same rows, so all stop at the same round."""
    for first in range(0, batches, world.size):
        b = first + world.rank
        got = world.gather_rows(generate(b) if b < batches else [])
        for r, rows in enumerate(got):
            if first + r < batches:
                yield first + r, rows


def prompt_ids(tokenizer, request: str) -> list[int]:
    """Token ids of `request` as a user turn in the chat template, up to where the assistant's reply begins."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": request}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def _generator(teacher, tokenizer, device: str):
    """A generator (TransformersGenerator, vllm_teacher.VllmGenerator) as given, or a model wrapped in one."""
    return teacher if hasattr(teacher, "greedy") else TransformersGenerator(teacher, tokenizer, device)


def answer(teacher, tokenizer, requests: list[str], max_new: int, batch_size: int | None = None,
           device: str = "cpu", on_progress: Callable[[int, int], None] | None = None,
           world: World = ONE) -> tuple[list[list[int]], int]:
    """Token ids of one chat transcript per request: the templated prompt, then the teacher's greedy answer
    (ending with its end-of-turn token unless it ran out of `max_new`); and how many answers stopped.
    `teacher`: a model (answered with transformers' generate) or a generator; `batch_size`: requests at once
    (the generator's own by default). `on_progress(done, total)` follows each batch of answers. Several ranks
    split the batches (module docstring)."""
    gen = _generator(teacher, tokenizer, device)
    batch_size = batch_size or gen.batch
    prompts = [prompt_ids(tokenizer, request) for request in requests]

    def batch(b: int) -> list[list[int]]:
        """Batch b's transcripts, each led by 1 when its answer stopped, else 0."""
        rows = prompts[b * batch_size:(b + 1) * batch_size]
        out = []
        for p, reply in zip(rows, gen.greedy(rows, max_new)):
            stop = _until_stop(reply, gen.stops)
            out.append([int(stop is not None)] + p + (reply[:stop + 1] if stop is not None else reply))
        return out

    out: list[list[int]] = []
    stopped = 0
    for _, rows in by_rank(world, -(-len(prompts) // batch_size), batch):
        out += [r[1:] for r in rows]
        stopped += sum(r[0] for r in rows)
        if on_progress is not None:
            on_progress(len(out), len(prompts))
    return out, stopped


def snippet_requests(docs: list[torch.Tensor], tokenizer, n: int, snippet_tokens: int = 64) -> list[str]:
    """`n` requests about calibration snippets, cycling through INSTRUCTIONS."""
    return [INSTRUCTIONS[i % len(INSTRUCTIONS)].format(snippet=snip)
            for i, snip in enumerate(snippets(docs, tokenizer, n, snippet_tokens))]


USER_MARK = "\x00ternforge-user\x00"


def user_turn_prefix(tokenizer) -> str:
    """The chat template's text before a user message's content (system turn included where it adds one)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": USER_MARK}], tokenize=False)
    if USER_MARK not in text:
        raise ValueError("the chat template does not render the user's message verbatim")
    return text[:text.index(USER_MARK)]


def self_requests(teacher, tokenizer, n: int, seed: int, max_tokens: int = SELF_REQUEST_TOKENS,
                  temperature: float = 1.0, top_p: float = 0.95, batch_size: int = ANSWER_BATCH, device: str = "cpu",
                  on_progress: Callable[[int, int], None] | None = None, openers: Sequence[str] = ("",),
                  world: World = ONE) -> list[str]:
    """`n` distinct user requests written by the teacher itself (Magpie): it is fed the template up to where a
    user message starts, then draw k's opener (`openers[k % len(openers)]`, "" for none), and samples, from
    a generator seeded with `seed`, until its end-of-turn token; the request is the opener and what follows.
    Samples that run past `max_tokens`, are blank, or repeat an earlier one are dropped and drawn again (at
    most 4n draws in all, in batches of `batch_size`, batch b seeded with `seed` plus its last draw's number).
    `teacher`: a model or a generator, as for `answer`. `on_progress(kept, n)` follows each batch of draws.
    Several ranks split the batches (module docstring)."""
    if not openers:
        raise ValueError("openers must hold at least one string ('' for a free draw)")
    gen = _generator(teacher, tokenizer, device)
    user = user_turn_prefix(tokenizer)
    prefixes = [tokenizer.encode(user + o, add_special_tokens=False) for o in openers]
    draws = 4 * n

    def opener(k: int) -> int:
        return k % len(openers)

    def batch(b: int) -> list[list[int]]:
        """Batch b's samples up to their stop token, each led by 1, or 0 with no stop token in max_tokens."""
        first = b * batch_size
        rows = min(batch_size, draws - first)
        out = []
        for row in gen.sample([prefixes[opener(first + r)] for r in range(rows)], max_tokens, temperature, top_p,
                              seed + first + rows):
            stop = _until_stop(row, gen.stops)
            out.append([0] if stop is None else [1] + row[:stop])
        return out

    out: list[str] = []
    seen: set[str] = set()
    for b, rows in by_rank(world, -(-draws // batch_size), batch):
        for r, row in enumerate(rows):
            if not row[0]:
                continue
            text = (openers[opener(b * batch_size + r)] + tokenizer.decode(row[1:], skip_special_tokens=True)).strip()
            if text and text not in seen and len(out) < n:
                seen.add(text)
                out.append(text)
        if on_progress is not None:
            on_progress(len(out), n)
        if len(out) >= n:
            break
    return out


def windows(transcripts: list[list[int]], seq_len: int) -> torch.Tensor:
    """[m, seq_len] windows over the transcripts joined end to end (each already ends in its stop token)."""
    stream = torch.tensor([t for tr in transcripts for t in tr], dtype=torch.long)
    m = stream.numel() // seq_len
    return stream[: m * seq_len].reshape(m, seq_len)


def load_tokenizer(model_dir: str | Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))
