"""Which source tensors become ternary, which stay float, and which are exempt (DESIGN.md sections 2 and 4).

Ternary: 2-D linear weights of the text model. Float: the input embedding and output head, the small
tensors (in_proj_a, in_proj_b, conv1d, A_log, dt_bias, norms: anything not 2-D), any tensor a profile
names in `keep_float`, and a linear weight whose row length the group size does not divide. Exempt (float,
never served): the vision tower and the MTP head. The tensor list always comes from the checkpoint's index.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

EXEMPT_PREFIXES = ("model.visual.", "mtp.")
EMBEDDING_OR_HEAD = re.compile(r"(^|\.)(embed_tokens|lm_head)\.weight$")
SMALL_LINEAR = re.compile(r"\.(in_proj_a|in_proj_b)\.weight$")


class Encoding(str, Enum):
    TERNARY = "ternary"
    FLOAT = "float"


@dataclass(frozen=True)
class Decision:
    encoding: Encoding
    exempt: bool
    why: str


def classify(name: str, shape: tuple[int, ...], group_size: int, keep_float: tuple[re.Pattern[str], ...] = ()) -> Decision:
    if name.startswith(EXEMPT_PREFIXES):
        return Decision(Encoding.FLOAT, True, "vision tower or MTP head")
    if len(shape) != 2 or not name.endswith(".weight"):
        return Decision(Encoding.FLOAT, False, "not a 2-D weight")
    if EMBEDDING_OR_HEAD.search(name):
        return Decision(Encoding.FLOAT, False, "input embedding or output head")
    if SMALL_LINEAR.search(name):
        return Decision(Encoding.FLOAT, False, "small linear-attention projection")
    if any(p.search(name) for p in keep_float):
        return Decision(Encoding.FLOAT, False, "kept float by profile")
    if shape[1] % group_size != 0:
        return Decision(Encoding.FLOAT, False, f"group size {group_size} does not divide row length {shape[1]}")
    return Decision(Encoding.TERNARY, False, "linear weight")
