"""kd.chat_engine (quant/vllm_teacher.py): which engine writes the teacher's transcripts, and why, here where
vLLM is not in the workers' environment; the stop ids and context vLLM would be started with, against the
teacher transformers loads. The vLLM path itself runs in bench/vllm_transcripts.py (vLLM's CPU build, smol)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from ternforge.quant import config as qc
from ternforge.quant.chatdata import TransformersGenerator, load_tokenizer
from ternforge.quant.dist import ONE, World
from ternforge.quant.model import load_float_model
from ternforge.quant.vllm_teacher import (CPU_KV_CACHE_GIB, PROMPT_ROOM, ChatEngineUnavailable, choose, context_for,
                                          engine_environment, stop_ids)

no_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")


def test_transformers_is_the_default_and_needs_nothing() -> None:
    assert qc.KDConfig().chat_engine == "transformers"
    assert choose("transformers", ONE) == ("transformers", "kd.chat_engine is transformers")


@no_vllm
def test_auto_falls_back_with_the_reason_and_vllm_refuses_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    engine, why = choose("auto", ONE)
    assert engine == "transformers" and why.startswith("vLLM does not import in the workers' environment")
    assert "chat transcripts: transformers' generate, not vLLM: vLLM does not import" in capsys.readouterr().err
    with pytest.raises(ChatEngineUnavailable, match="kd.chat_engine is vllm, but vLLM does not import"):
        choose("vllm", ONE)


def test_several_ranks_keep_generate() -> None:
    engine, why = choose("auto", World(rank=0, size=2, backend="gloo"))
    assert engine == "transformers" and why.startswith("2 ranks: each vLLM would start its own process group")
    with pytest.raises(ChatEngineUnavailable, match="2 ranks"):
        choose("vllm", World(rank=1, size=2, backend="gloo"))


def test_vllm_starts_with_usage_reports_off_and_on_the_cpu_with_a_kv_cache_unless_one_is_set() -> None:
    from ternforge_server.engine_vllm import TELEMETRY_OFF

    assert engine_environment({}, "cuda") == TELEMETRY_OFF
    assert TELEMETRY_OFF["VLLM_NO_USAGE_STATS"] == "1" and TELEMETRY_OFF["DO_NOT_TRACK"] == "1"
    assert engine_environment({}, "cpu") == {**TELEMETRY_OFF, "VLLM_CPU_KVCACHE_SPACE": str(CPU_KV_CACHE_GIB)}
    assert "VLLM_CPU_KVCACHE_SPACE" not in engine_environment({"VLLM_CPU_KVCACHE_SPACE": "9"}, "cpu")


@no_vllm
def test_the_preflight_finds_the_engine_before_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    """The preflight's chat_engine fact is choose() at the launch's ranks: the fallback's reason, or the refusal."""
    from ternforge import preflight

    def q(engine: str, nproc: int = 1) -> qc.QuantizeConfig:
        return qc.parse({"method": "gptq+kd", "group_size": 32, "model_dir": "", "out_dir": "",
                         "kd": {"chat_engine": engine}, "launch": {"nproc_per_node": nproc}})[0]

    auto = preflight.chat_engine_facts(q("auto"))
    assert auto["engine"] == "transformers" and auto["error"] is None and auto["vllm"] is None
    assert auto["reason"].startswith("vLLM does not import")
    refused = preflight.chat_engine_facts(q("vllm"))
    assert refused["engine"] is None and refused["error"].startswith("kd.chat_engine is vllm, but vLLM does not import")
    ranks = preflight.chat_engine_facts(q("auto", 2))
    assert ranks["engine"] == "transformers" and ranks["reason"].startswith("2 ranks")
    assert preflight.chat_engine_facts(q("transformers")) == {"asked": "transformers", "engine": "transformers",
                                                               "reason": "kd.chat_engine is transformers", "error": None, "vllm": None}


def test_an_unknown_engine_is_refused_by_name() -> None:
    with pytest.raises(qc.ConfigError, match=r"kd.chat_engine must be one of \['transformers', 'vllm', 'auto'\]"):
        qc.parse({"method": "gptq+kd", "group_size": 32, "model_dir": "m", "out_dir": "o", "kd": {"chat_engine": "tgi"}})


def test_vllm_would_stop_where_generate_stops_and_fit_the_answers(tiny_fetch_dir: Path) -> None:
    model_dir = tiny_fetch_dir / "model"
    teacher = load_float_model(model_dir, torch.float32)
    assert stop_ids(model_dir) == TransformersGenerator(teacher, load_tokenizer(model_dir)).stops
    limit = teacher.config.max_position_embeddings
    assert context_for(model_dir, qc.KDConfig(chat_max_new=128)) == min(limit, PROMPT_ROOM + 128)
    assert context_for(model_dir, qc.KDConfig(chat_max_new=10 * limit)) == limit


@no_vllm
def test_the_worker_reports_which_engine_wrote_the_transcripts(tiny_fetch_dir: Path, tiny_calib: Path, tmp_path: Path,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    import json

    from ternforge.quant import run

    config = {"method": "gptq+kd", "group_size": 32, "seed": 0,
              "calibration": {"seq_len": 32, "sequences": 4, "batch_size": 4},
              "kd": {"steps": 1, "batch_size": 2, "checkpoint_every": 1, "seq_len": 16, "sequences": 4,
                     "chat_prompts": 2, "chat_max_new": 4, "chat_engine": "auto"},
              "model_dir": str(tiny_fetch_dir / "model"), "calib_dir": str(tiny_calib), "out_dir": str(tmp_path / "a")}
    assert run.main(config)["ok"]
    engine = json.loads((tmp_path / "a" / "quantize_report.json").read_text())["kd"]["data"]["chat_engine"]
    assert engine["engine"] == "transformers" and engine["reason"].startswith("vLLM does not import")
    assert "chat transcripts: transformers' generate, not vLLM" in capfd.readouterr().err
    assert run.main({**config, "kd": {**config["kd"], "chat_engine": "vllm"}, "out_dir": str(tmp_path / "b")}) == {"ok": False}
    events = [json.loads(x) for x in capfd.readouterr().out.splitlines() if x.startswith("{")]
    failure = next(e for e in events if e["event"] == "failure")
    assert failure["reason"] == "chat-engine-unavailable" and failure["chat_engine"] == "vllm"
    assert "kd.chat_engine is vllm, but vLLM does not import" in failure["message"]
    assert not (tmp_path / "b" / "quantize_report.json").exists()
