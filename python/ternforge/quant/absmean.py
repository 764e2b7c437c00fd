"""BitNet b1.58 absmean ternarisation, per group of consecutive weights along `in`.

    Ma et al., "The Era of 1-bit LLMs" (2024), eq. 1-3, with the scale taken per group instead of per tensor:
        gamma = mean(|W_group|)
        T     = clamp(round(W / gamma), -1, 1)
        W_q   = T * gamma

Data-free: no calibration, no error feedback. A group that is all zero gets gamma = 0 and T = 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AbsmeanConfig:
    group_size: int


def quantize(W: torch.Tensor, config: AbsmeanConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """W [out, in] (any float dtype) -> (T int8 [out, in] in {-1, 0, 1}, gamma float32 [out, in / g])."""
    g = config.group_size
    out, cols = W.shape
    if cols % g != 0:
        raise ValueError(f"absmean: group size {g} does not divide row length {cols}")
    W_f = W.to(torch.float32).reshape(out, cols // g, g)
    gamma = W_f.abs().mean(dim=-1)
    safe = torch.where(gamma > 0, gamma, torch.ones_like(gamma))
    T = torch.clamp(torch.round(W_f / safe.unsqueeze(-1)), -1, 1)
    return T.reshape(out, cols).to(torch.int8), gamma.contiguous()
