"""schemas/contract.json, the values the Python side shares with the TypeScript side (exempt tensor prefixes,
gate thresholds, the packing convention with its golden bytes, the submission's file names, the penalty range,
the API's request bounds).

Found beside this module when it runs from a submission (emit ships the contract as
`server/ternforge_server/contract.json`), else at the repository's `schemas/contract.json`. The quantizer and
the server both take their values from here; python/tests/test_contract.py holds them to the file.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONTRACT_FORMAT = "ternforge-contract/1"
CONTRACT_FILE = "contract.json"


class ContractError(RuntimeError):
    """The contract file is missing or not the layout this code reads."""


def contract_path() -> Path:
    """The shipped copy beside this package (a submission), else the repository's schemas/contract.json."""
    here = Path(__file__).resolve().parent
    candidates = (here / CONTRACT_FILE, here.parent.parent / "schemas" / CONTRACT_FILE)
    for p in candidates:
        if p.is_file():
            return p
    raise ContractError("contract-missing: no contract.json at " + " or ".join(str(p) for p in candidates)
                        + " (emit copies schemas/contract.json into the server package)")


def read_contract(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ContractError(f"contract-invalid: {path}: {e}") from None
    if not isinstance(value, dict) or value.get("format") != CONTRACT_FORMAT:
        raise ContractError(f"contract-invalid: {path}: format is not {CONTRACT_FORMAT!r}")
    return value


CONTRACT: dict[str, Any] = read_contract(contract_path())

_tensors = CONTRACT["tensors"]
EXEMPT_PREFIXES: tuple[str, ...] = tuple(_tensors["exempt_prefixes"])
TEXT_PREFIX: str = _tensors["text_prefix"]
OUTPUT_HEAD: str = _tensors["output_head"]
EMBEDDING_SUFFIX: str = _tensors["embedding_suffix"]

_gates = CONTRACT["gates"]
TERNARY_FRACTION_MIN: float = float(_gates["ternary_fraction_min"])
STORED_RATIO_MAX: float = float(_gates["stored_ratio_max"])
STARTUP_LIMIT_S: float = float(_gates["startup_limit_s"])
# Kept back from vLLM's share of the start-up limit for the built-in engine, should vLLM fail late.
BUILTIN_RESERVE_S: float = float(CONTRACT["startup"]["builtin_reserve_s"])

_packing = CONTRACT["packing"]
CODE_BITS: int = _packing["code_bits"]
CODES_PER_BYTE: int = _packing["codes_per_byte"]
CODE_OFFSET: int = _packing["code_offset"]
INVALID_CODE: int = _packing["invalid_code"]
GROUP_SIZE_MULTIPLE: int = _packing["group_size_multiple"]
SCALE_MAX: float = float(_packing["scale_max"])
# The `packing` object a manifest must carry, exactly.
MANIFEST_PACKING: dict[str, str] = dict(_packing["manifest"])
MANIFEST_FORMAT: str = CONTRACT["manifest_format"]

SUBMISSION: dict[str, str] = dict(CONTRACT["submission"])

PENALTY_RANGE: tuple[float, float] = (float(CONTRACT["sampling"]["penalty_min"]), float(CONTRACT["sampling"]["penalty_max"]))

# Bounds on one API request (app.py): completions `logprobs`, chat `top_logprobs`, prompts per /v1/completions.
MAX_COMPLETION_LOGPROBS: int = int(CONTRACT["api"]["max_completion_logprobs"])
MAX_CHAT_TOP_LOGPROBS: int = int(CONTRACT["api"]["max_chat_top_logprobs"])
MAX_PROMPTS: int = int(CONTRACT["api"]["max_prompts"])


def is_exempt_name(name: str) -> bool:
    """Vision tower or MTP head: the name starts with an exempt prefix (never matched elsewhere in the name)."""
    return name.startswith(EXEMPT_PREFIXES)
