"""The bf16 checkpoint vLLM is started on (`python -m ternforge_server export-bf16`), checked on CPU: loaded
with transformers it gives exactly the built-in loader's logits; it holds the text model only, under the
source checkpoint's names, with the source config; shards that fail their sha256 are refused."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from server_fixtures import build_submission

PYDIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sub(tmp_path_factory) -> Path:
    return build_submission(tmp_path_factory.mktemp("export") / "sub")


def _export(sub: Path, out: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(PYDIR))
    return subprocess.run([sys.executable, "-m", "ternforge_server", "export-bf16", "--dir", str(sub), "--out",
                           str(out), "--device", "cpu"], capture_output=True, text=True, env=env, timeout=300)


def test_bf16_checkpoint_loaded_by_transformers_gives_the_builtin_loaders_logits(sub: Path, tmp_path: Path) -> None:
    from safetensors import safe_open
    from transformers import Qwen3_5ForCausalLM

    from ternforge_server.loader import load_model, read_config

    out = tmp_path / "bf16"
    r = _export(sub, out)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["status"] == "ok" and rep["tied_head"] is True
    manifest_shards = json.loads((sub / "quantization_manifest.json").read_text())["shards"]
    assert [(s["file"], s["sha256"]) for s in rep["shards"]] == [(s["file"], s["sha256"]) for s in manifest_shards]
    assert (out / "config.json").read_bytes() == (sub / "config.json").read_bytes()  # the source config, as is
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert (out / "tokenizer.json").is_file() and not (out / "quantization_manifest.json").exists()
    assert sorted(p.name for p in out.glob("*.safetensors*")) == ["model.safetensors"]
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        dtypes = {f.get_slice(k).get_dtype() for k in keys}
    manifest = json.loads((sub / "quantization_manifest.json").read_text())
    text = {n for n, e in manifest["tensors"].items() if not e.get("exempt")}
    assert keys == text  # every text tensor under its source name; no vision, no MTP, the tied head once
    assert all(k.startswith("model.language_model.") for k in keys) and "lm_head.weight" not in keys
    assert "BF16" in dtypes and dtypes <= {"BF16", "F32"}
    assert rep["tensors"] == len(keys) and rep["bytes"] + 8 < (out / "model.safetensors").stat().st_size

    text_cfg, _ = read_config(out)
    theirs = Qwen3_5ForCausalLM.from_pretrained(str(out), config=text_cfg, dtype=torch.bfloat16,
                                                key_mapping={r"^model\.language_model\.": "model."}).eval()
    ours, tok, _ = load_model(sub, "cpu", "bfloat16")
    ids = torch.tensor([tok.encode("once upon time there was cat that sat on mat", add_special_tokens=False)])
    with torch.inference_mode():
        a = ours(input_ids=ids).logits
        b = theirs(input_ids=ids).logits
    assert a.dtype == b.dtype == torch.bfloat16
    assert torch.equal(a, b)
    sd_ours, sd_theirs = ours.state_dict(), theirs.state_dict()
    assert set(sd_ours) == set(sd_theirs)
    assert all(torch.equal(sd_ours[k], sd_theirs[k]) and sd_ours[k].dtype == sd_theirs[k].dtype for k in sd_ours)


def test_export_refuses_a_shard_whose_sha256_differs(sub: Path, tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(sub, bad)
    shard = bad / "weights" / "model-00002-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x01  # same size, different bytes
    shard.write_bytes(bytes(data))
    r = _export(bad, tmp_path / "out")
    assert r.returncode == 2
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["status"] == "refused" and got["error"]["reason"] == "shard-sha256-mismatch"
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_vllm_command_is_text_only_loopback_without_speculation() -> None:
    from ternforge_server.__main__ import parse_args
    from ternforge_server.engine_vllm import vllm_command, vllm_share

    args = parse_args(["--dir", "x", "--max-model-len", "16384"])
    cmd = vllm_command(Path("/dev/shm/ckpt"), "qwen", 41234, args)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "--language-model-only" in cmd
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "41234"
    assert cmd[cmd.index("--max-model-len") + 1] == "16384" and cmd[cmd.index("--served-model-name") + 1] == "qwen"
    assert not any("specul" in c or "mtp" in c.lower() for c in cmd)
    # FlashInfer's Gated DeltaNet prefill (vLLM 0.19.1's pick on SM 9.0) is JIT-built with nvcc: never used.
    assert cmd[cmd.index("--gdn-prefill-backend") + 1] == "triton"
    import time

    os.environ["TERNFORGE_INSTALL_SECONDS"] = "40"
    try:
        now = time.monotonic()
        reserve = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "contract.json").read_text())["startup"]["builtin_reserve_s"]
        assert abs(vllm_share(300, now - 20) - (300 - 40 - 20 - reserve)) < 1  # the built-in engine's reserve
        assert vllm_share(300, now - 200) == 60  # never below a minute
    finally:
        del os.environ["TERNFORGE_INSTALL_SECONDS"]


def test_export_states_the_tie_in_the_text_config_where_vllm_reads_it(sub: Path, tmp_path: Path) -> None:
    """tiny's generated config has tie_word_embeddings only at the top level; vLLM 0.19.1's
    Qwen3_5ForCausalLM reads it from the text config (hf_config.get_text_config(), default False), builds an
    untied head the export has no tensor for, and refuses to start. Read here the way vLLM reads it."""
    import shutil

    from transformers import AutoConfig

    top_only = tmp_path / "top-only"
    shutil.copytree(sub, top_only)
    raw = json.loads((top_only / "config.json").read_text())
    del raw["text_config"]["tie_word_embeddings"]
    (top_only / "config.json").write_text(json.dumps(raw, indent=2))
    assert AutoConfig.from_pretrained(str(top_only)).get_text_config().tie_word_embeddings is False  # the fault

    out = tmp_path / "bf16"
    r = _export(top_only, out)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["tied_head"] is True
    assert rep["config_edits"] == ["text_config.tie_word_embeddings: null -> true"]
    assert AutoConfig.from_pretrained(str(out)).get_text_config().tie_word_embeddings is True
    written = json.loads((out / "config.json").read_text())
    assert {k: v for k, v in written.items() if k != "text_config"} == \
        {k: v for k, v in raw.items() if k != "text_config"}  # nothing else changed
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        assert not any(k.endswith("lm_head.weight") for k in f.keys())


def test_temp_root_is_shm_then_the_submission_then_the_system_tmp(tmp_path: Path) -> None:
    import tempfile

    from ternforge_server.engine_vllm import temp_root

    sub = tmp_path / "sub"
    sub.mkdir()
    assert temp_root(sub, 1, shm=tmp_path) == tmp_path
    assert temp_root(sub, 1 << 60, shm=tmp_path) == sub / "tmp"  # no file system has an exbibyte free
    (sub / "tmp").rmdir()
    (sub / "tmp").write_text("a file where the directory would go")
    assert temp_root(sub, 1 << 60, shm=tmp_path) == Path(tempfile.gettempdir())
