"""schemas/contract.json holds the two languages together: the server (loader, packing, API), the quantizer's
float-budget plan and the allocator take exactly its values, and the server's hand-written manifest checks
agree with schemas/manifest.schema.json on valid and invalid manifests. The TypeScript side is held to the
same file by test/contract.test.ts. Nothing here needs node.
"""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import jsonschema
import pytest
import torch

from ternforge.quant import floatplan
from ternforge.quant.floatplan import AllocConfig, FloatBudgetError, allocate
from ternforge_server import contract as server_contract
from ternforge_server import loader
from ternforge_server.__main__ import parse_args, sampling_defaults
from ternforge_server.app import _num_field
from ternforge_server.packing import pack_2bit, unpack_2bit

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
CONTRACT = json.loads((SCHEMAS / "contract.json").read_text())
MANIFEST_SCHEMA = json.loads((SCHEMAS / "manifest.schema.json").read_text())


def test_contract_file_passes_its_schema_and_is_the_one_the_server_reads() -> None:
    jsonschema.Draft7Validator(json.loads((SCHEMAS / "contract.schema.json").read_text())).validate(CONTRACT)
    assert server_contract.contract_path() == SCHEMAS / "contract.json"
    assert server_contract.CONTRACT == CONTRACT


# ------------------------------------------------------------------------------------------ exempt prefixes


def probe_names() -> list[str]:
    """Names under each contract prefix, and look-alikes that must not be exempt (a prefix matched elsewhere
    in the name, or without its dot)."""
    names = ["model.language_model.layers.0.mlp.up_proj.weight", "model.language_model.embed_tokens.weight",
             "lm_head.weight", "visual.blocks.0.attn.qkv.weight", "model.language_model.visual.x.weight",
             "model.language_model.layers.0.mtp.fc.weight", "model.mtp.fc.weight"]
    for p in CONTRACT["tensors"]["exempt_prefixes"]:
        names += [f"{p}blocks.0.attn.qkv.weight", f"{p}fc.weight", f"{p.rstrip('.')}x.weight",
                  f"model.language_model.{p}fc.weight"]
    return sorted(set(names))


def contract_exempt(name: str) -> bool:
    return any(name.startswith(p) for p in CONTRACT["tensors"]["exempt_prefixes"])


@pytest.mark.parametrize("name", probe_names())
def test_server_quantizer_and_allocator_exempt_exactly_the_contract_prefixes(name: str) -> None:
    want = contract_exempt(name)
    assert loader.is_exempt(name, {}) is want, "server loader"
    plan = floatplan.Allocation(plan={}, fraction=0.0, forced_float=[], chosen_float=[])
    assert plan.decision(name).exempt is want, "quantizer's float-budget plan (what index.json marks exempt)"
    if want:
        assert not floatplan.is_audited(name), "allocator: an exempt tensor is never audited"
    t = CONTRACT["tensors"]
    audited = not want and name != t["output_head"] and not name.endswith(t["embedding_suffix"])
    assert floatplan.is_audited(name) is audited, "allocator's audited set (as lib/audit counts it)"


# ------------------------------------------------------------------------------------------------- gates


def test_allocator_refuses_a_plan_at_the_contract_floor_and_accepts_one_just_above() -> None:
    """95 x 32 ternary at g = 32 is 3040 codes + 95 scales; 65 float weights make 3040/3200, exactly the floor."""
    floor = CONTRACT["gates"]["ternary_fraction_min"]
    matrix = {"model.layers.0.mlp.up_proj.weight": (95, 32)}
    at_floor = {**matrix, "model.layers.0.input_layernorm.weight": (65,)}
    assert floatplan.fraction({"model.layers.0.mlp.up_proj.weight": "ternary",
                               "model.layers.0.input_layernorm.weight": "float"}, at_floor, 32) == floor
    with pytest.raises(FloatBudgetError):
        allocate(at_floor, AllocConfig(group_size=32, target_fraction=floor))
    above = {**matrix, "model.layers.0.input_layernorm.weight": (64,)}
    assert allocate(above, AllocConfig(group_size=32, target_fraction=floor)).fraction > floor


def test_server_start_up_budget_defaults_to_the_contract_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TERNFORGE_STARTUP_BUDGET", raising=False)
    assert parse_args(["--dir", "."]).startup_budget == CONTRACT["gates"]["startup_limit_s"]


def test_the_builtin_reserve_is_the_contracts() -> None:
    # vllm_share keeps it back: python/tests/test_server_vllm_export.py
    assert server_contract.BUILTIN_RESERVE_S == CONTRACT["startup"]["builtin_reserve_s"]


def test_the_api_bounds_are_the_contracts() -> None:
    # what the server does at them: python/tests/test_server_hostile.py
    api = CONTRACT["api"]
    assert (server_contract.MAX_COMPLETION_LOGPROBS, server_contract.MAX_CHAT_TOP_LOGPROBS,
            server_contract.MAX_PROMPTS) == (api["max_completion_logprobs"], api["max_chat_top_logprobs"],
                                             api["max_prompts"])


# ------------------------------------------------------------------------------------------------ packing


def golden() -> list[tuple[torch.Tensor, bytes]]:
    return [(torch.tensor(g["ternary"], dtype=torch.int8), bytes.fromhex(g["packed_hex"]))
            for g in CONTRACT["packing"]["golden"]]


def test_python_pack_round_trip_reaches_the_contract_golden_bytes() -> None:
    for t, want in golden():
        packed = pack_2bit(t)
        assert packed.dtype == torch.uint8
        assert list(packed.shape) == [t.shape[0], t.shape[1] // CONTRACT["packing"]["codes_per_byte"]]
        assert packed.flatten().numpy().tobytes() == want
        assert torch.equal(unpack_2bit(packed, t.shape[1]), t)


@pytest.mark.parametrize("byte", CONTRACT["packing"]["invalid_bytes"])
def test_server_unpack_refuses_every_contract_invalid_byte(byte: int) -> None:
    with pytest.raises(ValueError, match=f"invalid code {CONTRACT['packing']['invalid_code']}"):
        unpack_2bit(torch.tensor([[byte]], dtype=torch.uint8), CONTRACT["packing"]["codes_per_byte"])


def test_server_scale_bound_is_the_contract_scale_max() -> None:
    top = float(CONTRACT["packing"]["scale_max"])
    loader.check_values("t", "t.scale", torch.tensor([[top]], dtype=torch.float32), scale=True)
    with pytest.raises(loader.LoadError) as e:
        loader.check_values("t", "t.scale", torch.tensor([[top * 1.001]], dtype=torch.float32), scale=True)
    assert e.value.reason == "scale-out-of-range"


# ---------------------------------------------------------------------------------------- penalty range


def test_server_penalty_range_is_the_contract_range(tmp_path: Path) -> None:
    lo, hi = CONTRACT["sampling"]["penalty_min"], CONTRACT["sampling"]["penalty_max"]
    assert _num_field({"presence_penalty": hi}, "presence_penalty", *server_contract.PENALTY_RANGE, 0.0) == hi
    assert _num_field({"presence_penalty": lo}, "presence_penalty", *server_contract.PENALTY_RANGE, 0.0) == lo
    args = argparse.Namespace(presence_penalty=None, frequency_penalty=None)
    for value, ok in ((hi, True), (lo, True), (hi + 0.5, False), (lo - 0.5, False)):
        (tmp_path / CONTRACT["submission"]["architecture"]).write_text(json.dumps(
            {"serving": {"sampling_defaults": {"presence_penalty": value, "frequency_penalty": 0}}}))
        if ok:
            assert sampling_defaults(tmp_path, args)["presence_penalty"] == value
        else:
            with pytest.raises(SystemExit, match=f"between {lo:g} and {hi:g}"):
                sampling_defaults(tmp_path, args)


def test_schemas_pin_the_contract_values() -> None:
    """JSON Schema cannot read the contract, so the values it repeats are held equal here."""
    props = MANIFEST_SCHEMA["properties"]
    assert props["format"]["const"] == CONTRACT["manifest_format"]
    assert {k: v["const"] for k, v in props["packing"]["properties"].items()} == CONTRACT["packing"]["manifest"]
    assert props["shards"]["items"]["properties"]["file"]["pattern"].startswith(
        "^" + CONTRACT["submission"]["weights_dir"] + "/")
    assert loader._SHARD_FILE.pattern == props["shards"]["items"]["properties"]["file"]["pattern"]
    tensor = MANIFEST_SCHEMA["definitions"]["ManifestTensor"]
    assert tensor["properties"]["group_size"]["minimum"] == CONTRACT["packing"]["group_size_multiple"]
    penalties = [
        json.loads((SCHEMAS / "architecture.schema.json").read_text())["properties"]["serving"]["properties"]["sampling_defaults"],
        json.loads((SCHEMAS / "stages" / "emit.schema.json").read_text())["properties"]["sampling_defaults"],
    ]
    for s in penalties:
        for key in ("presence_penalty", "frequency_penalty"):
            assert (s["properties"][key]["minimum"], s["properties"][key]["maximum"]) == (
                CONTRACT["sampling"]["penalty_min"], CONTRACT["sampling"]["penalty_max"])


# ----------------------------------------------------------------------- the server's manifest checks


def valid_manifest() -> dict:
    sha = "0" * 64
    return {
        "format": CONTRACT["manifest_format"], "base_model": "m", "revision": "r", "method": "absmean",
        "packing": dict(CONTRACT["packing"]["manifest"]),
        "shards": [{"file": "weights/model-00001-of-00001.safetensors", "size": 1024, "sha256": sha}],
        "tensors": {
            "model.language_model.layers.0.mlp.up_proj.weight": {
                "encoding": "packed_2bit", "shape": [8, 64], "dtype": "BF16", "group_size": 32,
                "shard": "weights/model-00001-of-00001.safetensors",
                "codes_key": "model.language_model.layers.0.mlp.up_proj.weight.codes",
                "scale_key": "model.language_model.layers.0.mlp.up_proj.weight.scale"},
            "model.language_model.embed_tokens.weight": {
                "encoding": "float", "shape": [16, 64], "dtype": "BF16", "tied_to": ["lm_head.weight"],
                "shard": "weights/model-00001-of-00001.safetensors", "data_key": "model.language_model.embed_tokens.weight"},
            "mtp.fc.weight": {
                "encoding": "float", "shape": [0, 64], "dtype": "BF16", "exempt": True,
                "shard": "weights/model-00001-of-00001.safetensors", "data_key": "mtp.fc.weight"},
        },
    }


def _resolve(s: dict) -> dict:
    while "$ref" in s:
        s = MANIFEST_SCHEMA["definitions"][s["$ref"].split("/")[-1]]
    return s


def _wrong_type(s: dict) -> object:
    t = s.get("type")
    return {"string": 7, "integer": "7", "number": "7", "boolean": "yes", "array": {}, "object": []}.get(t, None)


def schema_mutations(s: dict, value: object, path: tuple) -> list[tuple[str, tuple, object]]:
    """(what, path, new value) for one violation of each constraint the schema puts on `value`, recursively:
    wrong type, const, enum, required key deleted, unknown key added, pattern, minimum, minItems, integer."""
    s = _resolve(s)
    out: list[tuple[str, tuple, object]] = []
    where = "/".join(map(str, path)) or "/"
    if "type" in s:
        out.append((f"{where}: wrong type", path, _wrong_type(s)))
    if "const" in s:
        out.append((f"{where}: not the const", path, f"{s['const']} (changed)"))
    if "enum" in s:
        out.append((f"{where}: not in the enum", path, "not-an-encoding"))
    if "pattern" in s:
        out.append((f"{where}: pattern", path, "../outside.bin"))
    if "minimum" in s:
        out.append((f"{where}: below minimum", path, s["minimum"] - 1))
    if s.get("type") == "integer":
        out.append((f"{where}: not an integer", path, 8.5))
    if s.get("type") == "object" and isinstance(value, dict):
        for key in s.get("required", []):
            out.append((f"{where}: lacks {key}", path + (key,), _DELETE))
        if s.get("additionalProperties") is False:
            out.append((f"{where}: unknown field", path + ("zz_unknown",), 1))
        for key, sub in s.get("properties", {}).items():
            if key in value:
                out += schema_mutations(sub, value[key], path + (key,))
        if isinstance(s.get("additionalProperties"), dict):
            for key in value:
                out += schema_mutations(s["additionalProperties"], value[key], path + (key,))
    if s.get("type") == "array" and isinstance(value, list):
        if s.get("minItems", 0) >= 1:
            out.append((f"{where}: empty", path, []))
        if value and "items" in s:
            out += schema_mutations(s["items"], value[0], path + (0,))
    return out


_DELETE = object()


def apply(manifest: dict, path: tuple, new: object) -> dict:
    m = copy.deepcopy(manifest)
    if not path:
        return new  # type: ignore[return-value]
    node = m
    for k in path[:-1]:
        node = node[k]
    if new is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = new
    return m


def server_verdict(manifest: object) -> str:
    try:
        loader.check_manifest(manifest)
    except loader.LoadError as e:
        return e.reason
    return "ok"


def schema_ok(manifest: object) -> bool:
    return jsonschema.Draft7Validator(MANIFEST_SCHEMA).is_valid(manifest)


def test_valid_manifests_pass_both_the_schema_and_the_server() -> None:
    base = valid_manifest()
    variants = [base, apply(base, ("shards", 0, "size"), 8), apply(base, ("shards", 0, "size"), 1024.0),
                apply(base, ("tensors",), {})]
    for m in variants:
        assert schema_ok(m)
        assert server_verdict(m) == "ok"


MUTATIONS = schema_mutations(MANIFEST_SCHEMA, valid_manifest(), ())


@pytest.mark.parametrize("what,path,new", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_every_manifest_the_schema_refuses_the_server_refuses(what: str, path: tuple, new: object) -> None:
    m = apply(valid_manifest(), path, new)
    assert not schema_ok(m), f"mutation does not violate the schema: {what}"
    verdict = server_verdict(m)
    assert verdict != "ok", f"the server accepts a manifest the schema refuses: {what}"
    if path[:1] == ("packing",) and new is not _DELETE:
        assert verdict == "packing-mismatch"


def test_mutations_cover_every_constraint_kind() -> None:
    kinds = {m[0].split(": ", 1)[1].split(" ")[0] for m in MUTATIONS}
    assert {"wrong", "not", "lacks", "unknown", "pattern", "below", "empty"} <= kinds
    assert len(MUTATIONS) > 60


def test_a_manifest_whose_packing_differs_is_refused_naming_the_field() -> None:
    for field in CONTRACT["packing"]["manifest"]:
        m = apply(valid_manifest(), ("packing", field), "a different convention")
        with pytest.raises(loader.LoadError) as e:
            loader.check_manifest(m)
        assert e.value.reason == "packing-mismatch"
        assert e.value.facts["fields"] == [field]
        assert field in str(e.value)


@pytest.mark.parametrize("what,path,new,reason", [
    ("shard not listed", ("tensors", "mtp.fc.weight", "shard"), "weights/other.safetensors", "manifest-invalid"),
    ("packed without codes_key", ("tensors", "model.language_model.layers.0.mlp.up_proj.weight", "codes_key"), _DELETE,
     "manifest-invalid"),
    ("float without data_key", ("tensors", "mtp.fc.weight", "data_key"), _DELETE, "manifest-invalid"),
    ("another tensor's key", ("tensors", "mtp.fc.weight", "data_key"), "model.language_model.embed_tokens.weight",
     "key-not-own"),
])
def test_server_checks_beyond_the_schema(what: str, path: tuple, new: object, reason: str) -> None:
    m = apply(valid_manifest(), path, new)
    assert schema_ok(m), what
    assert server_verdict(m) == reason, what
