"""What data may be used for what (DESIGN.md section 3, the reviewer's rules).

Roles: `calibration` (fits weights), `heldout` (perplexity), `selection` (chooses defaults), `evaluation`
(scores only). Benchmark data (GPQA, MATH-500 and MATH, LiveCodeBench, MMLU-Pro and their known mirrors)
and any validation, test or dev split may only have the role `evaluation`; nothing with that role may
reach quantize or any choice of defaults. A violation is refused with a `CalibRefused` naming the source,
the rule and what would be allowed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

ROLES = ("calibration", "heldout", "selection", "evaluation")
FITTING_ROLES = ("calibration", "heldout", "selection")  # roles that may feed quantize or a default

# Benchmark datasets and known mirrors, matched against the dataset id (lower-cased) and its config.
BENCHMARK_PATTERNS: tuple[tuple[str, str], ...] = (
    ("GPQA", r"gpqa"),
    ("MATH-500", r"math[-_ ]?500"),
    ("MATH (hendrycks)", r"hendrycks[-_ ]?math|competition[-_ ]?math|(^|/)math$|(^|/)math[-_ ]?(hard|lighteval)|lighteval/math|eleutherai/hendrycks_math|math_dataset_hendrycks"),
    ("PRM800K (MATH test problems)", r"prm800k"),
    ("LiveCodeBench", r"livecodebench|code[-_]?generation[-_]?lite|lcb[-_]?(v\d|codegen)"),
    ("MMLU-Pro", r"mmlu[-_ ]?pro"),
    ("MMLU", r"(^|/)mmlu($|[-_])|hendrycks[-_]?test|cais/mmlu"),
)
HELD_SPLIT = re.compile(r"^(validation|valid|val|test|testing|dev|eval|evaluation)([-_.\[].*)?$", re.IGNORECASE)


class CalibRefused(ValueError):
    """A declared source breaks a data rule; the message names the source, the rule and the fix."""


@dataclass(frozen=True)
class Verdict:
    source: str
    benchmark: str | None  # which benchmark family the name matched, if any
    held_split: bool


def classify(dataset: str, config: str | None, split: str) -> Verdict:
    name = f"{dataset}/{config}" if config else dataset
    lowered = name.lower()
    bench = next((label for label, pat in BENCHMARK_PATTERNS if re.search(pat, lowered)), None)
    return Verdict(source=name, benchmark=bench, held_split=bool(HELD_SPLIT.match(split.strip())))


def check(dataset: str, config: str | None, split: str, role: str) -> Verdict:
    """Refuse a source whose role is not allowed for it; return its classification otherwise."""
    if role not in ROLES:
        raise CalibRefused(f"source {dataset!r}: unknown role {role!r} (roles: {', '.join(ROLES)})")
    v = classify(dataset, config, split)
    if role != "evaluation" and v.benchmark is not None:
        raise CalibRefused(
            f"source {v.source!r} split {split!r}: refused for role {role!r}: it matches the benchmark "
            f"{v.benchmark}, and benchmark data may only have the role 'evaluation' (never calibration, "
            f"held-out perplexity or the selection of defaults)")
    if role != "evaluation" and v.held_split:
        raise CalibRefused(
            f"source {v.source!r} split {split!r}: refused for role {role!r}: validation, test and dev splits "
            f"may only have the role 'evaluation'; use a train split (held-out text is carved from train "
            f"documents, disjoint from calibration)")
    return v
