"""Quantization methods by name: a table lookup, never an if-chain.

A method maps one float weight W [out, in] and a group size to ternary codes T (int8 [out, in] in
{-1, 0, 1}) and scales (float32 [out, in / g]) such that W ~= T * scale per group. The quantization issue adds
its methods (twn, gptq, gptq+kd) here; methods that need calibration data take it through `MethodContext`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import absmean


@dataclass(frozen=True)
class MethodContext:
    """What a method may use besides the weight itself (empty for data-free methods)."""

    tensor_name: str
    extra: dict[str, Any] = field(default_factory=dict)


Method = Callable[[torch.Tensor, int, MethodContext], tuple[torch.Tensor, torch.Tensor]]


def _absmean(W: torch.Tensor, group_size: int, _ctx: MethodContext) -> tuple[torch.Tensor, torch.Tensor]:
    return absmean.quantize(W, absmean.AbsmeanConfig(group_size=group_size))


METHODS: dict[str, Method] = {
    "absmean": _absmean,
}


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown quantization method {name!r}; known: {sorted(METHODS)}") from None
