"""Float budget allocation: which tensors stay in float, counted the way the audit counts (DESIGN.md gate 1).

Audited set: the text model's tensors other than the input embedding and the output head (and never the
vision tower or MTP head). A ternary tensor of n weights at group size g counts n codes + n/g scales; a
float tensor counts its n elements. The ternary fraction is codes / (codes + scales + floats); its cap is
g / (g + 1) (0.970 at g = 32), and the contract's floor is 0.95.

1. Forced float: the small tensors (`in_proj_a`, `in_proj_b`, `conv1d`, `A_log`, `dt_bias`, every norm;
   anything not 2-D) and any matrix whose `in` is not a multiple of g.
2. Optional float: the remaining matrices, kept float greedily by measured sensitivity per parameter,
   highest first, while the fraction stays at or above `target_fraction` (0.955 by default: a margin over
   0.95), and only when a tensor's score is at least `min_relative_score` times the median score.
   The score of a matrix W [out, in] is the calibration output error that TWN rounding causes per
   parameter, sum_j E[x_j^2] * ||W[:, j] - Q[:, j]||^2 / (out * in), with E[x_j^2] the mean squared input
   of column j over the calibration tokens (diag(H) / 2, one float forward; `capture.input_energy`).
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

import torch

from . import twn

CONTRACT_FLOOR = 0.95
SMALL_NAME = re.compile(r"(in_proj_a|in_proj_b|conv1d|A_log|dt_bias|norm)(\.|$)")
EXCLUDED_NAME = re.compile(r"(^|\.)(embed_tokens|lm_head)\.|(^|\.)visual\.|^mtp\.|\.mtp\.")


@dataclass(frozen=True)
class AllocConfig:
    group_size: int = 32
    target_fraction: float = 0.955
    min_relative_score: float = 2.0


@dataclass(frozen=True)
class Allocation:
    plan: dict[str, str]  # audited tensor name -> "ternary" | "float"
    fraction: float  # audited ternary fraction with this plan
    forced_float: list[str]
    chosen_float: list[str]  # optional floats picked by sensitivity, in pick order
    scores: dict[str, float] = field(default_factory=dict)

    def ternary(self) -> list[str]:
        return sorted(n for n, e in self.plan.items() if e == "ternary")


def is_audited(name: str) -> bool:
    return EXCLUDED_NAME.search(name) is None


def is_small(name: str, shape: tuple[int, ...]) -> bool:
    return len(shape) != 2 or SMALL_NAME.search(name.removesuffix(".weight").removesuffix(".bias") + ".") is not None


def fraction(plan: dict[str, str], shapes: dict[str, tuple[int, ...]], group_size: int) -> float:
    codes = scales = floats = 0
    for name, enc in plan.items():
        n = 1
        for s in shapes[name]:
            n *= s
        if enc == "ternary":
            codes += n
            scales += n // group_size
        else:
            floats += n
    total = codes + scales + floats
    return codes / total if total else 0.0


def allocate(shapes: dict[str, tuple[int, ...]], config: AllocConfig,
             scores: dict[str, float] | None = None) -> Allocation:
    """`shapes`: every source tensor (non-audited ones are ignored). `scores`: sensitivity per parameter."""
    g = config.group_size
    plan: dict[str, str] = {}
    forced: list[str] = []
    for name in sorted(shapes):
        if not is_audited(name):
            continue
        shape = shapes[name]
        if is_small(name, shape) or shape[1] % g != 0:
            plan[name] = "float"
            forced.append(name)
        else:
            plan[name] = "ternary"
    base = fraction(plan, shapes, g)
    if base <= CONTRACT_FLOOR:
        raise ValueError(f"with only the forced float tensors the ternary fraction is {base:.4f} <= {CONTRACT_FLOOR} "
                         f"at g={g}; a smaller group size or fewer float tensors is needed")
    chosen: list[str] = []
    scores = scores or {}
    cands = [n for n in plan if plan[n] == "ternary" and n in scores]
    if cands:
        median = statistics.median(scores[n] for n in cands)
        for name in sorted(cands, key=lambda n: (-scores[n], n)):
            if scores[name] < config.min_relative_score * median:
                break
            plan[name] = "float"
            if fraction(plan, shapes, g) >= config.target_fraction:
                chosen.append(name)
            else:
                plan[name] = "ternary"
    return Allocation(plan=plan, fraction=fraction(plan, shapes, g), forced_float=forced, chosen_float=chosen,
                      scores={n: scores[n] for n in cands})


def twn_output_error(W: torch.Tensor, energy: torch.Tensor, group_size: int) -> float:
    """sum_j E[x_j^2] ||W[:, j] - Q[:, j]||^2 / numel with Q the TWN (exact search) rounding of W."""
    W_q, scale = twn.quantize(W.float(), twn.TWNConfig(group_size=group_size))
    D = W.float() - twn.dequantize(W_q, scale, group_size)
    return float((D * D).sum(0).mul(energy.float()).sum() / W.numel())
