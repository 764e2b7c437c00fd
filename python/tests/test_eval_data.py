"""fetch-eval (python/ternforge/sources/eval_data.py) against the real huggingface_hub client and a local hub
(tests/hub_server.py): the benchmarks' splits at the locked commit, their index, and the refusals."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest
from hub_server import FakeHub

from ternforge.sources import eval_data, hub_lock

ROWS = b'{"problem": "1+1?", "solution": "$\\\\boxed{2}$", "answer": "2", "unique_id": "t/1"}\n'
SOURCE = {"name": "math-500", "benchmark": "math-500", "dataset": "org/math", "revision": "main", "role": "evaluation", "format": "json", "splits": {"test": ["test.jsonl"]}}


@pytest.fixture()
def fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    h = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    yield h
    h.stop()


def _lock() -> dict:
    done, failed = hub_lock.resolve([hub_lock.PinRequest("math-500", "dataset", "org/math", "main", ("test.jsonl",))])
    assert failed == []
    return done


def test_fetches_each_split_at_the_locked_commit_and_indexes_it(fake_hub: FakeHub, tmp_path: Path) -> None:
    commit = fake_hub.push("dataset", "org/math", {"test.jsonl": ROWS, "README.md": b"x\n"})
    pins = _lock()
    fake_hub.push("dataset", "org/math", {"test.jsonl": b'{"moved": true}\n'})  # the branch moves on
    out = tmp_path / "out"
    r = eval_data.main({"sources": [SOURCE], "pins": pins, "out": str(out), "cache_dir": str(tmp_path / "cache")})
    assert r == {"ok": True, "sources": 1, "index": "eval-data.json"}
    assert (out / "math-500" / "test.jsonl").read_bytes() == ROWS  # the locked bytes, not the branch's
    index = json.loads((out / "eval-data.json").read_text())
    assert index["sources"][0]["commit"] == commit and index["sources"][0]["role"] == "evaluation"
    assert [f["path"] for f in index["sources"][0]["splits"]["test"]] == ["math-500/test.jsonl"]
    assert not (out / "math-500" / "README.md").exists()


def test_no_sources_writes_an_empty_index(tmp_path: Path) -> None:
    assert eval_data.main({"sources": [], "pins": {}, "out": str(tmp_path)}) == {"ok": True, "sources": 0, "index": "eval-data.json"}
    assert json.loads((tmp_path / "eval-data.json").read_text()) == {"version": 1, "sources": []}


def test_refuses_an_unlocked_source_and_bytes_that_differ_from_the_lock(fake_hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert eval_data.main({"sources": [SOURCE], "pins": {}, "out": str(tmp_path / "a")}) == {"ok": False}
    failure = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert failure["reason"] == "unlocked-source" and "tsx pipeline.ts lock fetch-eval" in failure["message"]
    commit = fake_hub.push("dataset", "org/math", {"test.jsonl": ROWS})
    pins = _lock()
    fake_hub.rewrite("dataset", "org/math", commit, "test.jsonl", b'{"tampered": true}\n')
    assert eval_data.main({"sources": [SOURCE], "pins": pins, "out": str(tmp_path / "b"), "cache_dir": str(tmp_path / "cache")}) == {"ok": False}
    failure = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert failure["reason"] == "hash-mismatch" and failure["file"] == "test.jsonl"
    assert not (tmp_path / "b" / "eval-data.json").exists()  # no index for a half-fetched set
