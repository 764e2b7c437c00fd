"""The 2-bit packing convention (DESIGN.md section 2), the Python side.

    ternary t in {-1, 0, 1}  ->  code c = t + 1 in {0, 1, 2}   (3 is invalid)
    four codes per byte, least significant bits first, row-major:
        byte = c0 | c1 << 2 | c2 << 4 | c3 << 6          (t = [-1, 0, 1, -1] -> 0b00_10_01_00 = 0x24)
    codes tensor: U8 [out, in / 4];  scales: F32 [out, in / g];  W[o, i] = (c - 1) * scale[o, i // g]

The constants come from schemas/contract.json (contract.py), whose golden bytes both packers are tested
against. The TypeScript packer (lib/pack) is the writer; this module is the server's reader, plus a reference
writer for tests. Both directions are exact inverses.
"""
from __future__ import annotations

import torch

from .contract import CODE_BITS, CODE_OFFSET, CODES_PER_BYTE, INVALID_CODE

SHIFTS = tuple(CODE_BITS * k for k in range(CODES_PER_BYTE))  # (0, 2, 4, 6)
MASK = (1 << CODE_BITS) - 1  # 0b11


def pack_2bit(t: torch.Tensor) -> torch.Tensor:
    """int8 ternary [out, in] (in % 4 == 0) -> uint8 [out, in/4]."""
    if t.dim() != 2 or t.shape[1] % CODES_PER_BYTE != 0:
        raise ValueError(f"pack_2bit needs [out, in] with in % {CODES_PER_BYTE} == 0, got {tuple(t.shape)}")
    c = (t.to(torch.int16) + CODE_OFFSET).to(torch.uint8).reshape(t.shape[0], -1, CODES_PER_BYTE)
    out = c[..., 0] << SHIFTS[0]
    for k in range(1, CODES_PER_BYTE):
        out |= c[..., k] << SHIFTS[k]
    return out


def unpack_2bit(packed: torch.Tensor, cols: int) -> torch.Tensor:
    """uint8 [out, cols/4] -> int8 ternary [out, cols]. Raises on the invalid code 3."""
    if packed.dtype != torch.uint8 or packed.dim() != 2 or packed.shape[1] * CODES_PER_BYTE != cols:
        raise ValueError(f"unpack_2bit: expected uint8 [out, {cols // CODES_PER_BYTE}], got {packed.dtype} {tuple(packed.shape)}")
    c = torch.stack([(packed >> s) & MASK for s in SHIFTS], dim=-1).reshape(packed.shape[0], cols)
    if bool((c == INVALID_CODE).any()):
        raise ValueError(f"unpack_2bit: invalid code {INVALID_CODE} in packed data")
    return c.to(torch.int8) - CODE_OFFSET


def dequantize(t: torch.Tensor, scale: torch.Tensor, group_size: int, dtype: torch.dtype) -> torch.Tensor:
    """W = t * scale, one scale per `group_size` consecutive columns, computed in float32 then cast."""
    out, cols = t.shape
    if cols % group_size != 0 or tuple(scale.shape) != (out, cols // group_size):
        raise ValueError(f"dequantize: scale {tuple(scale.shape)} does not match codes {tuple(t.shape)} at g={group_size}")
    w = t.to(torch.float32).reshape(out, cols // group_size, group_size) * scale.to(torch.float32).unsqueeze(-1)
    return w.reshape(out, cols).to(dtype)
