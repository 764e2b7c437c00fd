"""The float budget allocator keeps the audited ternary fraction above 0.95 (DESIGN.md gate 1)."""
from __future__ import annotations

import random

import pytest

from ternforge.quant.floatplan import CONTRACT_FLOOR, AllocConfig, allocate, fraction, is_audited, is_small
from ternforge.quant.model import source_tensor_names

P = "model.language_model.layers"


@pytest.fixture(scope="module")
def qwen35_4b_shapes() -> dict[str, tuple[int, ...]]:
    """Every tensor of Qwen3.5-4B (text, vision tower, MTP head) from the project's own layout source: the
    tiny generator's QWEN35_4B shape (DESIGN.md section 4's config values) through transformers' model on
    the meta device, the same path that names and shapes the tiny checkpoint's tensors. No table kept here."""
    from ternforge.sources.tiny import QWEN35_4B, build_config, build_tokenizer, tensor_specs

    config = build_config(QWEN35_4B, build_tokenizer().ids, QWEN35_4B.vocab_size)
    return {spec.name: spec.shape for spec in tensor_specs(config, QWEN35_4B)}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def test_the_audited_set_of_the_4b_model_has_the_documented_counts(qwen35_4b_shapes) -> None:
    shapes = qwen35_4b_shapes
    assert any(n.startswith("model.visual.") for n in shapes) and any(n.startswith("mtp.") for n in shapes)
    audited = {n: s for n, s in shapes.items() if is_audited(n)}
    assert len(audited) == 425
    assert sum(_numel(s) for s in audited.values()) == 3_570_052_096
    small = sum(_numel(s) for n, s in audited.items() if len(s) != 2)
    assert small == 961_536


@pytest.mark.parametrize("g, target", [(32, 0.955), (64, 0.97), (128, 0.98)])
def test_allocator_on_the_4b_shapes_stays_above_the_floor(g: int, target: float, qwen35_4b_shapes) -> None:
    shapes = qwen35_4b_shapes
    rng = random.Random(0)
    scores = {n: rng.lognormvariate(0, 1.5) for n, s in shapes.items() if is_audited(n) and not is_small(n, s)}
    a = allocate(shapes, AllocConfig(group_size=g, target_fraction=target, min_relative_score=1.0), scores)
    assert a.fraction >= target > CONTRACT_FLOOR
    assert a.fraction == fraction(a.plan, shapes, g)
    assert a.chosen_float, "the budget should buy some float tensors"
    assert all(a.plan[n] == "float" for n in shapes if is_audited(n) and is_small(n, shapes[n]))
    assert all(a.plan[f"{P}.{i}.linear_attn.in_proj_{x}.weight"] == "float" for i in range(32) if i % 4 != 3 for x in "ab")
    assert "model.language_model.embed_tokens.weight" not in a.plan and "model.visual.blocks.0.attn.qkv.weight" not in a.plan
    # Picks go by score per parameter: a picked tensor outranks every optional tensor left ternary that would fit.
    left = [n for n in scores if a.plan[n] == "ternary"]
    for n in a.chosen_float:
        assert all(scores[n] >= scores[m] or fraction({**a.plan, m: "float"}, shapes, g) < target for m in left)


def test_without_scores_only_the_forced_tensors_are_float(tiny_fetch_dir) -> None:
    shapes = source_tensor_names(tiny_fetch_dir / "model")
    a = allocate(shapes, AllocConfig(group_size=32))
    assert a.chosen_float == [] and a.fraction > CONTRACT_FLOOR
    assert set(a.forced_float) == {n for n, e in a.plan.items() if e == "float"}


def test_allocator_on_tiny_shapes_with_scores_keeps_the_margin(tiny_fetch_dir) -> None:
    shapes = source_tensor_names(tiny_fetch_dir / "model")
    scores = {n: float(i + 1) for i, n in enumerate(sorted(n for n, s in shapes.items() if is_audited(n) and not is_small(n, s)))}
    a = allocate(shapes, AllocConfig(group_size=32, target_fraction=0.955, min_relative_score=1.0), scores)
    assert a.fraction >= 0.955


def test_a_budget_the_forced_floats_already_break_is_refused() -> None:
    shapes = {f"{P}.0.mlp.up_proj.weight": (64, 128), f"{P}.0.input_layernorm.weight": (2000,)}
    with pytest.raises(ValueError, match="forced float tensors"):
        allocate(shapes, AllocConfig(group_size=32))
