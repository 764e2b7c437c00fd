"""The float budget allocator keeps the audited ternary fraction above 0.95 (DESIGN.md gate 1)."""
from __future__ import annotations

import random

import pytest

from ternforge.quant.floatplan import CONTRACT_FLOOR, AllocConfig, allocate, fraction, is_audited, is_small
from ternforge.quant.model import source_tensor_names

P = "model.language_model.layers"


def qwen35_4b_shapes() -> dict[str, tuple[int, ...]]:
    """The text model of Qwen3.5-4B (DESIGN.md section 4), plus one vision and one MTP tensor."""
    s: dict[str, tuple[int, ...]] = {"model.language_model.embed_tokens.weight": (248320, 2560),
                                     "model.language_model.norm.weight": (2560,),
                                     "model.visual.blocks.0.attn.qkv.weight": (3456, 1152),
                                     "mtp.layers.0.mlp.up_proj.weight": (9216, 2560)}
    for i in range(32):
        p = f"{P}.{i}"
        if i % 4 == 3:
            s |= {f"{p}.self_attn.q_proj.weight": (8192, 2560), f"{p}.self_attn.k_proj.weight": (1024, 2560),
                  f"{p}.self_attn.v_proj.weight": (1024, 2560), f"{p}.self_attn.o_proj.weight": (2560, 4096),
                  f"{p}.self_attn.q_norm.weight": (256,), f"{p}.self_attn.k_norm.weight": (256,)}
        else:
            s |= {f"{p}.linear_attn.in_proj_qkv.weight": (8192, 2560), f"{p}.linear_attn.in_proj_z.weight": (4096, 2560),
                  f"{p}.linear_attn.in_proj_b.weight": (32, 2560), f"{p}.linear_attn.in_proj_a.weight": (32, 2560),
                  f"{p}.linear_attn.conv1d.weight": (8192, 1, 4), f"{p}.linear_attn.A_log": (32,),
                  f"{p}.linear_attn.dt_bias": (32,), f"{p}.linear_attn.norm.weight": (128,),
                  f"{p}.linear_attn.out_proj.weight": (2560, 4096)}
        s |= {f"{p}.mlp.gate_proj.weight": (9216, 2560), f"{p}.mlp.up_proj.weight": (9216, 2560),
              f"{p}.mlp.down_proj.weight": (2560, 9216), f"{p}.input_layernorm.weight": (2560,),
              f"{p}.post_attention_layernorm.weight": (2560,)}
    return s


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def test_the_audited_set_of_the_4b_model_has_the_documented_counts() -> None:
    shapes = qwen35_4b_shapes()
    audited = {n: s for n, s in shapes.items() if is_audited(n)}
    assert len(audited) == 425
    assert sum(_numel(s) for s in audited.values()) == 3_570_052_096
    small = sum(_numel(s) for n, s in audited.items() if len(s) != 2)
    assert small == 961_536


@pytest.mark.parametrize("g, target", [(32, 0.955), (64, 0.97), (128, 0.98)])
def test_allocator_on_the_4b_shapes_stays_above_the_floor(g: int, target: float) -> None:
    shapes = qwen35_4b_shapes()
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
