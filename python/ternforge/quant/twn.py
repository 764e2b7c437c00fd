"""TWN-style ternary rounding with a searched scale, per row or per group (data-free).

Ternary Weight Networks (Li, Zhang, Liu 2016) approximate a weight block W by alpha * T with T in {-1, 0, 1}:
for a support I = {i : |W_i| > delta} the L2-optimal scale is closed-form,

    alpha(I) = sum_{i in I} |W_i| / |I|,     ||W - alpha T||^2 = sum W^2 - (sum_{i in I} |W_i|)^2 / |I|,

and TWN picks delta = 0.7 * mean|W|. Here delta is searched instead, per group of `group_size` consecutive
weights along `in` (group_size = in: per row):
- `search = "exact"`: every threshold at once. The optimal support is always the k largest |W_i| for some k,
  so sorting each group and taking the k that maximises (cumsum_k)^2 / k is the exact optimum.
- `search = "grid"`: delta = r * mean|W| for r in `ratios` (TWN's 0.7 among them), the best r per group.

Names: `W_f` float input, `W_q` ternary codes (int8), `scale` one float32 per group, `W_r` = W_q * scale.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

DEFAULT_RATIOS: tuple[float, ...] = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2)


@dataclass(frozen=True)
class TWNConfig:
    group_size: int = 32
    search: str = "exact"  # "exact" | "grid"
    ratios: tuple[float, ...] = DEFAULT_RATIOS


def _grouped(W_f: torch.Tensor, group_size: int) -> torch.Tensor:
    rows, cols = W_f.shape
    if cols % group_size != 0:
        raise ValueError(f"group size {group_size} does not divide in = {cols}")
    return W_f.float().reshape(rows, cols // group_size, group_size)


def _scale_exact(A: torch.Tensor) -> torch.Tensor:
    """Optimal alpha for |W| grouped as [..., g]: top-k support with k maximising (cumsum_k)^2 / k."""
    A_sorted, _ = torch.sort(A, dim=-1, descending=True)
    csum = torch.cumsum(A_sorted, dim=-1)
    k = torch.arange(1, A.shape[-1] + 1, dtype=A.dtype, device=A.device)
    gain = csum * csum / k
    best = torch.argmax(gain, dim=-1, keepdim=True)
    return (torch.gather(csum, -1, best) / (best + 1).to(A.dtype)).squeeze(-1)


def _scale_grid(A: torch.Tensor, ratios: tuple[float, ...]) -> torch.Tensor:
    """alpha for the best delta = r * mean|W| per group, r in ratios."""
    mean = A.mean(dim=-1, keepdim=True)
    best_gain = torch.full(A.shape[:-1], -1.0, dtype=A.dtype, device=A.device)
    best_alpha = torch.zeros(A.shape[:-1], dtype=A.dtype, device=A.device)
    for r in ratios:
        mask = A > r * mean
        count = mask.sum(dim=-1).to(A.dtype)
        s = (A * mask).sum(dim=-1)
        gain = torch.where(count > 0, s * s / count.clamp(min=1), torch.zeros_like(s))
        alpha = torch.where(count > 0, s / count.clamp(min=1), torch.zeros_like(s))
        better = gain > best_gain
        best_gain = torch.where(better, gain, best_gain)
        best_alpha = torch.where(better, alpha, best_alpha)
    return best_alpha


def group_scales(W_f: torch.Tensor, group_size: int, search: str = "exact",
                 ratios: tuple[float, ...] = DEFAULT_RATIOS) -> torch.Tensor:
    """The searched scale of each group: float32 [out, in / group_size]."""
    A = _grouped(W_f, group_size).abs()
    if search == "exact":
        return _scale_exact(A)
    if search == "grid":
        return _scale_grid(A, ratios)
    raise ValueError(f"unknown TWN search {search!r} (exact, grid)")


def round_to_scale(W_f: torch.Tensor, scale: torch.Tensor, group_size: int) -> torch.Tensor:
    """Nearest ternary code given per-group scales: round(clamp(W / scale, -1, 1)); a zero scale gives 0."""
    G = _grouped(W_f, group_size)
    s = scale.unsqueeze(-1)
    safe = torch.where(s > 0, s, torch.ones_like(s))
    W_q = torch.where(s > 0, torch.clamp(torch.round(G / safe), -1, 1), torch.zeros_like(G))
    return W_q.reshape(W_f.shape).to(torch.int8)


def quantize(W_f: torch.Tensor, config: TWNConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """W_f [out, in] -> (W_q int8 [out, in] in {-1,0,1}, scale float32 [out, in / g])."""
    scale = group_scales(W_f, config.group_size, config.search, config.ratios)
    return round_to_scale(W_f, scale, config.group_size), scale.float().contiguous()


def dequantize(W_q: torch.Tensor, scale: torch.Tensor, group_size: int) -> torch.Tensor:
    """W_r = W_q * scale, float32 [out, in]."""
    rows, cols = W_q.shape
    return (W_q.float().reshape(rows, cols // group_size, group_size) * scale.unsqueeze(-1)).reshape(rows, cols)
