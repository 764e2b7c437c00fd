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

    src, stray = "model.language_model.layers.0.mlp.up_proj.weight", "model.language_model.layers.9.mlp.up_proj.weight"

    def add_stray(m: dict) -> None:  # its own keys (an entry may not borrow another's)
        m["tensors"][stray] = dict(m["tensors"][src], codes_key=stray + ".codes", scale_key=stray + ".scale")

    def copy_bytes(tensors: dict) -> None:
        for suffix in (".codes", ".scale"):
            tensors[stray + suffix] = tensors[src + suffix].clone()

    rewrite_shard(sub, src, copy_bytes)
    rewrite_manifest(sub, add_stray)
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert e.value.reason == "tensor-unused"
    assert e.value.facts["tensors"] == ["model.layers.9.mlp.up_proj.weight"]


def test_refuses_key_missing_from_shard(sub: Path) -> None:
    from ternforge_server.loader import LoadError, load_model

    name = "model.language_model.layers.1.mlp.down_proj.weight"
    shard = rewrite_shard(sub, name, lambda tensors: tensors.pop(name + ".scale"))
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert (e.value.reason, e.value.facts["tensor"], e.value.facts["key"]) == \
        ("tensor-missing-in-shard", name, name + ".scale")
    assert shard.startswith("weights/")


def rewrite_shard(sub: Path, name: str, edit) -> str:
    """Apply `edit(tensors)` to the shard holding manifest entry `name`, and rewrite the manifest's size and
    sha256 to match (so only the new check can refuse it). Returns the shard's name."""
    import json

    from safetensors.torch import load_file, save_file

    manifest = json.loads((sub / "quantization_manifest.json").read_text())
    shard = manifest["tensors"][name]["shard"]
    tensors = load_file(str(sub / shard))
    edit(tensors)
    save_file(tensors, str(sub / shard), metadata={"format": "pt"})
    _rehash(sub, shard, (sub / shard).read_bytes())
    return shard


def _relocate(sub: Path, old: str, new: str) -> None:
    def edit(m: dict) -> None:
        for s in m["shards"]:
            if s["file"] == old:
                s["file"] = new
        for t in m["tensors"].values():
            if t["shard"] == old:
                t["shard"] = new

    rewrite_manifest(sub, edit)


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_refuses_shard_names_outside_weights(sub: Path, tmp_path: Path, how: str) -> None:
    """With weights/ emptied of one shard and the shard elsewhere, the loader refuses by name (never opens it)."""
    from ternforge_server.loader import LoadError, load_model

    old = "weights/model-00002-of-00002.safetensors"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(str(sub / old), str(elsewhere / "x.safetensors"))
    if how == "absolute":
        new = str(elsewhere / "x.safetensors")
    elif how == "dotdot":
        new = "weights/../../elsewhere/x.safetensors"
    else:
        (sub / "weights/link.safetensors").symlink_to(elsewhere / "x.safetensors")
        new = "weights/link.safetensors"
    _relocate(sub, old, new)
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert e.value.reason == "shard-path-outside-weights"
    assert e.value.facts["shard"] == new


def test_refuses_etc_passwd_as_a_shard_without_reading_it(sub: Path) -> None:
    from ternforge_server.loader import LoadError, load_model

    _relocate(sub, "weights/model-00002-of-00002.safetensors", "/etc/passwd")
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert e.value.reason == "shard-path-outside-weights"
    assert "size" not in str(e.value.to_json())


SCALED = "model.language_model.layers.1.mlp.down_proj.weight"


@pytest.mark.parametrize("value,reason", [(float("nan"), "scale-not-finite"), (float("inf"), "scale-not-finite"),
                                          (-0.5, "scale-out-of-range"), (0.0, "scale-out-of-range"),
                                          (1e38, "scale-out-of-range")])
def test_refuses_bad_scale_with_hashes_rewritten(sub: Path, value: float, reason: str) -> None:
    from ternforge_server.loader import LoadError, load_model

    def edit(tensors: dict) -> None:
        tensors[SCALED + ".scale"].view(-1)[5] = value

    rewrite_shard(sub, SCALED, edit)
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert (e.value.reason, e.value.facts["tensor"], e.value.facts["key"]) == (reason, SCALED, SCALED + ".scale")


@pytest.mark.parametrize("value", [float("nan"), float("-inf")])
def test_refuses_non_finite_norm_weight(sub: Path, value: float) -> None:
    from ternforge_server.loader import LoadError, load_model

    name = "model.language_model.norm.weight"

    def edit(tensors: dict) -> None:
        tensors[name].view(-1)[3] = value

    rewrite_shard(sub, name, edit)
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert (e.value.reason, e.value.facts["tensor"]) == ("float-not-finite", name)


def test_refuses_swapped_keys_of_two_same_shaped_tensors(sub: Path) -> None:
    from ternforge_server.loader import LoadError, load_model

    a, b = "model.language_model.layers.0.mlp.up_proj.weight", "model.language_model.layers.1.mlp.up_proj.weight"

    def swap(m: dict) -> None:
        ta, tb = m["tensors"][a], m["tensors"][b]
        assert ta["shape"] == tb["shape"] and ta["shard"] == tb["shard"]
        for k in ("codes_key", "scale_key"):
            ta[k], tb[k] = tb[k], ta[k]

    rewrite_manifest(sub, swap)
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert e.value.reason == "key-not-own"
    assert (e.value.facts["tensor"], e.value.facts["actual"]) == (a, b + ".codes")


def _rehash(sub: Path, shard: str, data: bytes) -> None:
    """Write `data` as the shard and rewrite the manifest's size and sha256 to match."""
    import hashlib

    (sub / shard).write_bytes(data)

    def fix(m: dict) -> None:
        for s in m["shards"]:
            if s["file"] == shard:
                s.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())

    rewrite_manifest(sub, fix)


@pytest.mark.parametrize("how,detail", [("trailing-json", "invalid-header-json"), ("appended", "trailing-bytes"),
                                        ("cut", "truncated-data"), ("dtype", "unknown-dtype")])
def test_a_tampered_header_is_refused_with_the_audits_reason(sub: Path, how: str, detail: str) -> None:
    """The shard's bytes no longer parse as the library wants (hashes rewritten, so only the parse refuses):
    a LoadError naming the shard and the audit's reason, not the library's raw message."""
    import json as _json

    from ternforge_server.loader import LoadError, load_model

    shard = _json.loads((sub / "quantization_manifest.json").read_text())["shards"][0]["file"]
    data = (sub / shard).read_bytes()
    n = int.from_bytes(data[:8], "little")
    header, body = data[8:8 + n], data[8 + n:]
    bad = {"trailing-json": (n + 2).to_bytes(8, "little") + header + b"}}" + body,
           "appended": data + b"\0" * 16,
           "cut": data[:-16],
           "dtype": data[:8] + header.replace(b'"F32"', b'"F99"', 1) + body}[how]
    _rehash(sub, shard, bad)
    with pytest.raises(LoadError) as e:
        load_model(sub, "cpu")
    assert (e.value.reason, e.value.facts["detail"]) == ("shard-invalid", detail), str(e.value)
    assert str(e.value).startswith(f"shard-invalid: {shard}: {detail} (")
