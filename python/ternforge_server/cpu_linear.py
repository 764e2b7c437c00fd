"""Decode-shaped linears on a CPU: `W @ x^T` instead of `x @ W^T`.

A decode step multiplies a handful of rows x [B, K] by every weight W [N, K]. `F.linear` hands MKL the
product x @ W^T with B as the short side; asked for the same numbers as W @ x^T (N long, B short), MKL runs
25-35% faster at B = 16 on an AVX2 core (measured on the smol model's shapes, bench/serve.py reports the
effect end to end). For the vocabulary head (N = 49 k..248 k) the product is taken in slices of
HEAD_SLICE rows, whose results stay in cache. Prefill (many rows) keeps `F.linear`.

The sums are the same terms in a different order, so results agree with `F.linear` to float rounding, not
bit for bit. GPUs keep `F.linear`: only `apply` on a CPU model swaps the forward.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

#: Rows (batch x new positions) up to which the transposed product is used.
MAX_ROWS = 64
#: Output rows of W per slice when N is large (the vocabulary head).
HEAD_SLICE = 1024
_LARGE_N = 8 * HEAD_SLICE


def _forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    k = x.shape[-1]
    rows = x.numel() // k if k else 0
    if rows == 0 or rows > MAX_ROWS or x.dtype != self.weight.dtype:
        return F.linear(x, self.weight, self.bias)
    xt = x.reshape(rows, k).t().contiguous()  # [K, B]
    w = self.weight
    if w.shape[0] >= _LARGE_N:
        y = torch.cat([torch.mm(s, xt) for s in w.split(HEAD_SLICE)], dim=0)  # [N, B]
    else:
        y = torch.mm(w, xt)
    y = y.t()
    if self.bias is not None:
        y = y + self.bias
    return y.reshape(*x.shape[:-1], w.shape[0])


def apply(model: torch.nn.Module) -> int:
    """Give every nn.Linear of a CPU model the decode-shaped forward; returns how many were changed."""
    n = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.device.type == "cpu":
            module.forward = _forward.__get__(module, torch.nn.Linear)  # type: ignore[method-assign]
            n += 1
    return n
