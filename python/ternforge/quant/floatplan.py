"""The float-budget policy: which source tensors stay float and which become ternary, one plan for every
method, counted the way the audit counts (DESIGN.md sections 2 and 4, gate 1).

Exempt (float, never served, outside the audited set): the vision tower (`model.visual.*`) and the MTP
head (`mtp.*`), by the name's start only. Not audited, float: the input embedding and the output head. The
audited set is every other tensor. Prefixes, names and the floor are schemas/contract.json's (the audit's). A ternary tensor of n weights at group size g counts n codes + n/g scales; a float tensor
counts its n elements. The ternary fraction is codes / (codes + scales + floats); its cap is g / (g + 1)
(0.970 at g = 32), and the contract's floor is 0.95.
1. Forced float: the small tensors (`in_proj_a`, `in_proj_b`, `conv1d`, `A_log`, `dt_bias`, every norm;
   anything not a 2-D `.weight`), any matrix whose `in` is not a multiple of g, and any tensor a profile
   names in `keep_float` (regular expressions).
2. Optional float: the remaining matrices, kept float greedily by measured sensitivity per parameter,
   highest first, while the fraction stays at or above `target_fraction` (0.955 by default: a margin over
   0.95), and only when a tensor's score is at least `min_relative_score` times the median score.
   The score of a matrix W [out, in] is the calibration output error that TWN rounding causes per
   parameter, sum_j E[x_j^2] * ||W[:, j] - Q[:, j]||^2 / (out * in), with E[x_j^2] the mean squared input
   of column j over the calibration tokens (diag(H) / 2, one float forward; `hooks.input_energy`). The
   data-free methods have no scores: their plan is the forced floats only. Method `none` keeps all float.
The tensor list always comes from the checkpoint's own index.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from enum import Enum

import torch

from ternforge_server.contract import EMBEDDING_SUFFIX, EXEMPT_PREFIXES, OUTPUT_HEAD, TERNARY_FRACTION_MIN

from . import twn

CONTRACT_FLOOR = TERNARY_FRACTION_MIN
SMALL_NAME = re.compile(r"(in_proj_a|in_proj_b|conv1d|A_log|dt_bias|norm)(\.|$)")


class FloatBudgetError(ValueError):
    """The forced floats alone leave the ternary fraction at or under the contract's floor."""


class Encoding(str, Enum):
    TERNARY = "ternary"
    FLOAT = "float"


@dataclass(frozen=True)
class Decision:
    encoding: Encoding
    exempt: bool
    why: str


@dataclass(frozen=True)
class AllocConfig:
    group_size: int = 32
    target_fraction: float = 0.955
    min_relative_score: float = 2.0
    keep_float: tuple[str, ...] = ()  # regular expressions (re.search) of tensor names kept float


@dataclass(frozen=True)
class Allocation:
    plan: dict[str, str]  # audited tensor name -> "ternary" | "float"
    fraction: float  # audited ternary fraction with this plan
    forced_float: list[str]
    chosen_float: list[str]  # optional floats picked by sensitivity, in pick order
    scores: dict[str, float] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)  # audited tensor name -> why it is float or ternary

    def ternary(self) -> list[str]:
        return sorted(n for n, e in self.plan.items() if e == "ternary")

    def decision(self, name: str) -> Decision:
        """Encoding, exempt flag and reason of any source tensor under this plan."""
        if name.startswith(EXEMPT_PREFIXES):
            return Decision(Encoding.FLOAT, True, "vision tower or MTP head")
        if not is_audited(name):
            return Decision(Encoding.FLOAT, False, "input embedding or output head")
        enc = Encoding.TERNARY if self.plan.get(name) == "ternary" else Encoding.FLOAT
        return Decision(enc, False, self.why.get(name, "linear weight"))

    def all_float(self) -> "Allocation":
        """The same tensors all kept float (method `none`, the float baseline)."""
        return Allocation(plan={n: "float" for n in self.plan}, fraction=0.0, forced_float=self.forced_float,
                          chosen_float=[], scores={}, why={n: "float build (method none)" for n in self.plan})


def is_audited(name: str) -> bool:
    """Not exempt, not the input embedding, not the output head (as lib/audit counts the audited set)."""
    return not name.startswith(EXEMPT_PREFIXES) and name != OUTPUT_HEAD and not name.endswith(EMBEDDING_SUFFIX)


def is_small(name: str, shape: tuple[int, ...]) -> bool:
    return (len(shape) != 2 or not name.endswith(".weight")
            or SMALL_NAME.search(name.removesuffix(".weight").removesuffix(".bias") + ".") is not None)


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
    keep = [re.compile(p) for p in config.keep_float]
    plan: dict[str, str] = {}
    why: dict[str, str] = {}
    forced: list[str] = []
    for name in sorted(shapes):
        if not is_audited(name):
            continue
        shape = shapes[name]
        if is_small(name, shape):
            why[name] = "small tensor (not a 2-D linear weight, or a small linear-attention projection)"
        elif shape[1] % g != 0:
            why[name] = f"group size {g} does not divide row length {shape[1]}"
        elif any(p.search(name) for p in keep):
            why[name] = "kept float by profile"
        else:
            plan[name] = "ternary"
            why[name] = "linear weight"
            continue
        plan[name] = "float"
        forced.append(name)
    base = fraction(plan, shapes, g)
    if base <= CONTRACT_FLOOR:
        raise FloatBudgetError(f"with only the forced float tensors the ternary fraction is {base:.4f} <= {CONTRACT_FLOOR} "
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
                why[name] = "chosen float by sensitivity"
            else:
                plan[name] = "ternary"
    return Allocation(plan=plan, fraction=fraction(plan, shapes, g), forced_float=forced, chosen_float=chosen,
                      scores={n: scores[n] for n in cands}, why=why)


def twn_output_error(W: torch.Tensor, energy: torch.Tensor, group_size: int) -> float:
    """sum_j E[x_j^2] ||W[:, j] - Q[:, j]||^2 / numel with Q the TWN (exact search) rounding of W."""
    W_q, scale = twn.quantize(W.float(), twn.TWNConfig(group_size=group_size))
    D = W.float() - twn.dequantize(W_q, scale, group_size)
    return float((D * D).sum(0).mul(energy.float()).sum() / W.numel())
