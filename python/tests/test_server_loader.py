"""The loader on the fixture submission: loads exactly the manifest, refuses what does not match."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from server_fixtures import build_submission, rewrite_manifest


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return build_submission(tmp_path_factory.mktemp("fixture") / "sub")


@pytest.fixture()
def sub(pristine: Path, tmp_path: Path) -> Path:
    out = tmp_path / "sub"
    shutil.copytree(pristine, out)
    return out


def test_loads_every_manifest_tensor_as_dequantized_codes(pristine: Path) -> None:
    import json

    from safetensors.torch import load_file

    from ternforge_server.loader import load_model
    from ternforge_server.packing import dequantize, unpack_2bit

    model, tok, report = load_model(pristine, "cpu")
    manifest = json.loads((pristine / "quantization_manifest.json").read_text())
    text_names = sorted(n for n, t in manifest["tensors"].items() if not t.get("exempt"))
    assert sorted(e["name"] for e in report.loaded) == text_names
    assert report.skipped_exempt == ["model.visual.patch_embed.proj.weight", "mtp.fc.weight"]
    assert set(report.phases) == {"verify", "load", "dequantize", "build"}
    assert report.architecture == "Qwen3_5ForCausalLM"
    params = dict(model.named_parameters())
    shard_sha = {s["file"]: s["sha256"] for s in manifest["shards"]}
    for entry in report.loaded:
        assert entry["shard_sha256"] == shard_sha[entry["shard"]]
    # A packed tensor is exactly (c - 1) * scale; a float one is its stored data.
    name = "model.language_model.layers.0.linear_attn.in_proj_qkv.weight"
    m = manifest["tensors"][name]
    shard = load_file(str(pristine / m["shard"]))
    want = dequantize(unpack_2bit(shard[m["codes_key"]], m["shape"][1]), shard[m["scale_key"]], 32, torch.float32)
    assert torch.equal(params["model.layers.0.linear_attn.in_proj_qkv.weight"], want)
    conv = manifest["tensors"]["model.language_model.layers.0.linear_attn.conv1d.weight"]
    assert torch.equal(params["model.layers.0.linear_attn.conv1d.weight"],
                       load_file(str(pristine / conv["shard"]))[conv["data_key"]].float())
    # Tied head: the embedding, stored once, is the head; nothing on meta; the vision tower is absent.
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert not any(t.is_meta for t in list(model.parameters()) + list(model.buffers()))
    assert not any("visual" in n or "mtp" in n for n in params)
    assert tok.convert_tokens_to_ids("</think>") != tok.unk_token_id


def test_refuses_manifest_missing_a_tensor(sub: Path) -> None:
    from ternforge_server.loader import LoadError, load_model

    rewrite_manifest(sub, lambda m: m["tensors"].pop("model.language_model.layers.3.self_attn.o_proj.weight"))
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert e.value.reason == "parameter-not-loaded"
    assert e.value.facts["parameters"] == ["model.layers.3.self_attn.o_proj.weight"]


def test_refuses_shard_with_wrong_sha256(sub: Path) -> None:
    from ternforge_server.loader import LoadError, load_model

    path = sub / "weights/model-00002-of-00002.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes
    path.write_bytes(bytes(data))
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert e.value.reason == "shard-sha256-mismatch"
    assert e.value.facts["path"] == str(path)
    assert e.value.facts["expected"] != e.value.facts["actual"]


def test_refuses_shard_with_wrong_size(sub: Path) -> None:
    from ternforge_server.loader import LoadError, load_model

    path = sub / "weights/model-00001-of-00002.safetensors"
    with open(path, "ab") as f:
        f.write(b"\0")
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert e.value.reason == "shard-size-mismatch"
    assert e.value.facts["actual"] == e.value.facts["expected"] + 1


def test_refuses_manifest_tensor_the_model_does_not_use(sub: Path) -> None:
    from ternforge_server.loader import LoadError, load_model

    def add_stray(m: dict) -> None:
        m["tensors"]["model.language_model.layers.9.mlp.up_proj.weight"] = dict(
            m["tensors"]["model.language_model.layers.0.mlp.up_proj.weight"])

    rewrite_manifest(sub, add_stray)
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert e.value.reason == "tensor-unused"
    assert e.value.facts["tensors"] == ["model.layers.9.mlp.up_proj.weight"]


def test_refuses_key_missing_from_shard(sub: Path) -> None:
    from ternforge_server.loader import LoadError, load_model

    name = "model.language_model.layers.1.mlp.down_proj.weight"
    rewrite_manifest(sub, lambda m: m["tensors"][name].update(scale_key=name + ".nope"))
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert (e.value.reason, e.value.facts["tensor"], e.value.facts["key"]) == \
        ("tensor-missing-in-shard", name, name + ".nope")
