"""math-verify 0.9.0 as the eval scores MATH (python/ternforge/mathcheck.py, the way lm-eval's minerva_math500 calls
it), on the answer-equivalence cases the retired hand-written checker held (data/math_cases.json): every case
as decided by hand, except the documented exceptions, whose math-verify verdict is pinned with the reason."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ternforge.mathcheck import check, main

CASES = json.loads((Path(__file__).parent / "data" / "math_cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['predicted']}|{c['reference']}" for c in CASES])
def test_math_verify_on_the_hand_written_checkers_cases(case: dict) -> None:
    got = check(f"\\boxed{{{case['predicted']}}}", case["reference"])["correct"]
    expected = case.get("math_verify", case["by_hand"])
    assert got is expected, case.get("why", "decided as by hand")


def test_the_exceptions_are_few_and_each_has_a_reason() -> None:
    exceptions = [c for c in CASES if "math_verify" in c]
    assert 0 < len(exceptions) <= 12
    assert all(c["math_verify"] is not c["by_hand"] and len(c["why"]) > 20 for c in exceptions)
    assert len(CASES) >= 80


def test_a_reply_is_read_as_lm_eval_reads_it() -> None:
    # the whole reply is parsed; an unboxed final answer counts; none at all is wrong, never an error
    # an exception to the retired checker (which took the last box): math-verify reads two boxes as one set
    # answer {3, 6/4}, so a reply that changes its mind is wrong
    assert check("First \\boxed{3}, but wait, \\boxed{\\dfrac{6}{4}}.", "\\frac{3}{2}") == {"correct": False, "extracted": "3,\\frac{6}{4}", "gold": "\\frac{3}{2}"}
    assert check("The answer is 3/2.", "\\frac{3}{2}")["correct"] is True  # the retired checker wanted a box
    assert check("", "5") == {"correct": False, "extracted": None, "gold": "5"}
    assert main({"pairs": [{"reply": "$\\boxed{210}$", "reference": "210"}]})["verdicts"][0]["correct"] is True
