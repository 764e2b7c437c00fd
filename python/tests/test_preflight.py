"""The preflight worker's figures that lib/preflight/decide.ts also states (one definition, the other side held here)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_preflight_projects_self_written_requests_at_chatdatas_length() -> None:
    """lib/preflight/decide.ts counts each self-written request's decode steps as chatdata writes them."""
    from ternforge.quant import chatdata

    ts = (ROOT / "lib" / "preflight" / "decide.ts").read_text()
    m = re.search(r"export const SELF_REQUEST_TOKENS = (\d+);", ts)
    assert m and int(m.group(1)) == chatdata.SELF_REQUEST_TOKENS
