"""The built-in engine and the reasoning controller, in-process on the fixture model."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from server_fixtures import build_submission

PROMPTS = ["the answer is two plus three", "once upon time there was a cat", "def sum value return",
           "hello world", "which of following options correct choose A B C D", "tell me story", "so we compute",
           "print function list"]


@pytest.fixture(scope="module")
def sub(tmp_path_factory) -> Path:
    return build_submission(tmp_path_factory.mktemp("fixture") / "sub")


@pytest.fixture(scope="module")
def loaded(sub: Path):
    from ternforge_server.engine import BatchEngine
    from ternforge_server.loader import load_model

    model, tok, _ = load_model(sub, "cpu")
    engine = BatchEngine(model, max_batch=16, max_queue=4).start()
    yield engine, tok
    engine.shutdown()


def test_batched_greedy_equals_alone_with_staggered_arrivals(loaded) -> None:
    engine, tok = loaded
    ids = [tok(p).input_ids for p in PROMPTS]
    alone = [engine.generate(x, 20 + 3 * i).wait(120) for i, x in enumerate(ids)]
    streams = []
    for i, x in enumerate(ids):
        streams.append(engine.generate(x, 20 + 3 * i))
        time.sleep(0.03 * (i % 3))  # later requests join a batch that is already decoding
    together = [s.wait(120) for s in streams]
    assert engine.stats.max_running >= 3
    assert together == alone
    assert all(reason == "length" and len(t) == 20 + 3 * i for i, (t, reason) in enumerate(alone))


def test_seeded_sampling_is_reproducible_and_seed_dependent(loaded) -> None:
    from ternforge_server.engine import Sampling

    engine, tok = loaded
    ids = tok(PROMPTS[0]).input_ids
    a = engine.generate(ids, 16, sampling=Sampling(0.9, 0.95, 7)).wait(60)
    b = engine.generate(ids, 16, sampling=Sampling(0.9, 0.95, 7)).wait(60)
    c = engine.generate(ids, 16, sampling=Sampling(0.9, 0.95, 8)).wait(60)
    assert a == b and a[0] != c[0]


def test_penalties_steer_away_from_repeats_per_row_and_batch_like_alone(loaded) -> None:
    """Penalties change only the rows that ask for them, only once a token repeats, and a penalised row
    decodes the same beside unpenalised rows as alone."""
    from ternforge_server.engine import Sampling

    engine, tok = loaded
    n = 40
    runs = [(x, engine.generate(x, n).wait(60)[0]) for x in (tok(p).input_ids for p in PROMPTS)]
    runs = [(x, t) for x, t in runs if len(set(t)) < len(t)][:4]  # prompts on which the fixture repeats itself
    assert len(runs) == 4
    ids, plain = [x for x, _ in runs], [t for _, t in runs]
    penal = [Sampling(frequency_penalty=2.0), Sampling(presence_penalty=2.0), Sampling(), Sampling(0.0, 1.0, None, 1.0, 1.0)]
    alone = [engine.generate(x, n, sampling=s).wait(60)[0] for x, s in zip(ids, penal)]
    together = [s.wait(60)[0] for s in [engine.generate(x, n, sampling=s) for x, s in zip(ids, penal)]]
    assert together == alone
    assert alone[2] == plain[2]
    for i in (0, 1, 3):
        first_repeat = next(k for k, t in enumerate(plain[i]) if t in plain[i][:k])
        assert alone[i][:first_repeat] == plain[i][:first_repeat] and alone[i] != plain[i]
    assert sum(len(set(t)) for t in alone[:2]) > sum(len(set(t)) for t in plain[:2])


def test_stop_ids_deadline_and_queue_bound(loaded) -> None:
    from ternforge_server.engine import QueueFull

    engine, tok = loaded
    ids = tok(PROMPTS[1]).input_ids
    free, _ = engine.generate(ids, 12).wait(60)
    tokens, reason = engine.generate(ids, 12, stop_ids=[free[5]]).wait(60)
    assert (tokens, reason) == (free[:free.index(free[5])], "stop")
    _, reason = engine.generate(ids, 10_000, deadline=time.monotonic() + 0.3).wait(60)
    assert reason == "deadline"
    streams = []
    with pytest.raises(QueueFull):
        for _ in range(200):  # the loop admits up to 16 running; the 4-deep waiting queue then fills
            streams.append(engine.generate(ids, 200))
    for s in streams:
        s.cancel()
    assert {s.wait(60)[1] for s in streams} <= {"cancelled", "length"}


def reference_logprobs(sub: Path, ids: list[int]) -> "torch.Tensor":
    """log_softmax of a plain forward pass over `ids` (no cache, no batch, no engine), on a model loaded apart:
    row j is the distribution of token j + 1."""
    import torch

    from ternforge_server.loader import load_model

    model, _, _ = load_model(sub, "cpu")
    with torch.inference_mode():
        return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)


def test_logprobs_of_prompt_and_generated_tokens_match_a_plain_forward_pass(loaded, sub: Path) -> None:
    from ternforge_server.engine import Sampling

    engine, tok = loaded
    ids = tok(PROMPTS[0]).input_ids
    other = tok(PROMPTS[4]).input_ids  # longer: the scored prompt is left-padded in the batched prefill
    assert len(other) > len(ids)
    alone = engine.generate(ids, 6, logprobs=3, echo=True)
    tokens, _ = alone.wait(60)
    # Penalties change what is sampled, not the logprobs reported: those are the raw distribution's.
    batched = [engine.generate(x, 6, logprobs=3, echo=True, sampling=Sampling(presence_penalty=2.0))
               for x in (other, ids)]
    for s in batched:
        s.wait(60)
    n = len(ids)
    for stream, toks in ((alone, tokens), (batched[1], batched[1].tokens)):
        ref = reference_logprobs(sub, ids + toks)
        assert stream.prompt_logprobs[0] is None and len(stream.prompt_logprobs) == n
        assert [e.token for e in stream.prompt_logprobs[1:]] == ids[1:]
        got = [e.logprob for e in stream.prompt_logprobs[1:]] + [e.logprob for e in stream.logprobs]
        want = [ref[j - 1, t].item() for j, t in enumerate(ids + toks) if j > 0]
        assert got == pytest.approx(want, abs=1e-4)
        assert [e.token for e in stream.logprobs] == toks
        for j, e in enumerate(stream.prompt_logprobs[1:] + stream.logprobs):
            vals, idx = ref[j].topk(3)
            assert [t for t, _ in e.top] == idx.tolist()
            assert [v for _, v in e.top] == pytest.approx(vals.tolist(), abs=1e-4)
    # Greedy: every generated token is its distribution's top-1.
    assert all(e.token == e.top[0][0] for e in alone.logprobs)
    assert batched[0].prompt_logprobs[1:] and batched[0].tokens


def test_find_loop_detects_repeated_blocks_only() -> None:
    from ternforge_server.controller import find_loop

    block = [5, 9, 11, 3, 7]
    assert find_loop(list(range(100)) + block * 25, 96, 4, 256) == 5
    assert find_loop([1] * 100, 96, 4, 256) == 1
    assert find_loop(list(range(300)), 96, 4, 256) == 0
    assert find_loop(list(range(50)) + block * 10, 96, 4, 256) == 0  # 50 tokens of loop: too short yet


def test_controller_cuts_thinking_at_budget_and_answers(loaded) -> None:
    from ternforge_server.controller import ControllerConfig, Outcome, ReasoningController

    engine, tok = loaded
    # Repetition detection off (a loop would have to span a million tokens), so only the budget can cut.
    cfg = ControllerConfig(reserve={"choice": 40, "math": 40, "code": 40, "default": 40}, loop_min_span=10**6)
    ctl = ReasoningController(engine, tok, cfg)
    text = tok.apply_chat_template([{"role": "user", "content": "what is two plus three"}],
                                   add_generation_prompt=True, tokenize=False)
    assert ctl.thinking_open(text)
    ids = tok.encode(text, add_special_tokens=False)

    async def go(budget: int | None) -> tuple[list, Outcome]:
        items = [x async for x in ctl.run(ids, max_tokens=120, thinking=True, budget=budget)]
        return items[:-1], items[-1]

    # The derived budget (120 - reserve - closing phrase) and a smaller one: both cut exactly there, and a
    # budget cut is not a thinking that ended by itself (the random model never closes </think> that soon).
    derived = 120 - 40 - len(ctl.closing_ids)
    for budget in (None, 12):
        deltas, out = asyncio.run(go(budget))
        want = derived if budget is None else budget
        assert (out.thinking_cut, out.reasoning_tokens) == ("budget", want)
        assert out.content.strip() and "</think>" not in out.content
        assert out.completion_tokens <= 120
        assert out.finish_reason in ("stop", "length")
        assert "".join(d.text for d in deltas if d.kind == "content") == out.content
