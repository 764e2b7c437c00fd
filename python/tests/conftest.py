"""Shared pytest setup: the `slow` marker (run with --runslow) and a session-wide tiny checkpoint."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow (network, minutes)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: needs the network or minutes; runs with --runslow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_fetch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fetch-model's output for the tiny profile (seed 0, two shards), generated once per session."""
    from ternforge.sources.tiny import generate

    out = tmp_path_factory.mktemp("tiny-fetch")
    generate(out, seed=0, max_shard_bytes=2_000_000)
    return out


@pytest.fixture(scope="module")
def tiny_calib(tiny_fetch_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fetch-calib's output for the tiny profile's own sources, on tiny_fetch_dir's tokenizer."""
    from ternforge.calib import fetch

    profile = json.loads((Path(__file__).resolve().parents[2] / "profiles" / "tiny.json").read_text())
    out = tmp_path_factory.mktemp("calib")
    assert fetch.main({"model_dir": str(tiny_fetch_dir / "model"), "out": str(out),
                       "sources": profile["stages"]["fetch-calib"]["sources"]})["ok"]
    return out
