"""`python -m ternforge math-verify`: math-verify 0.9.0 on answers, as lm-eval's minerva_math500 task scores them.

Each pair is a reply (the model's whole content) and a reference answer (LaTeX, as it would sit inside
\\boxed{}). The gold side is parsed from `$\\boxed{reference}$` and the reply as it is, then
`verify(gold, target)`: exactly lm-eval's `verify(gold=parse(doc["solution"]), target=parse(candidates))`,
whose solutions end in a boxed answer. `extracted` is the answer math-verify read from the reply (its string
form), or null when it found none. Each pair is decided under math-verify's own per-call timeouts.
"""
from __future__ import annotations

from importlib.metadata import version
from typing import Any


def check(reply: str, reference: str) -> dict[str, Any]:
    from math_verify import parse, verify

    gold = parse(f"$\\boxed{{{reference}}}$")
    target = parse(reply)
    return {"correct": bool(verify(gold, target)), "extracted": str(target[-1]) if target else None, "gold": str(gold[-1]) if gold else None}


def main(config: dict[str, Any]) -> dict[str, Any]:
    return {"math_verify": version("math-verify"), "verdicts": [check(p["reply"], p["reference"]) for p in config["pairs"]]}
