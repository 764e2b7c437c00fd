"""Load a submission's text model from exactly the tensors its manifest names.

Order of work (each phase timed into the start-up report):
  verify       every shard listed in the manifest exists, has the listed size and sha256 (streamed)
  load         every non-exempt manifest tensor is read from its shard (codes + scale, or float data)
  dequantize   W = (c - 1) * scale via packing.unpack_2bit + packing.dequantize, into the compute dtype
  build        the text-only model is constructed on the meta device and every parameter is assigned;
               non-persistent buffers (rotary frequencies) are rebuilt on the device; nothing may stay on meta

Refusals are `LoadError`s with a kebab-case `reason` and the facts (path, tensor, expected, actual).
`load_model(submission_dir, device, dtype) -> (model, tokenizer, report)` is a plain function: the pipeline's
quality stage calls it too.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .contract import EXEMPT_PREFIXES, GROUP_SIZE_MULTIPLE, MANIFEST_FORMAT, MANIFEST_PACKING, SCALE_MAX, SUBMISSION, TEXT_PREFIX
from .packing import dequantize, unpack_2bit

SAFETENSORS_DTYPES = {
    "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "U8": torch.uint8, "I8": torch.int8,
    "F64": torch.float64,
}


class LoadError(Exception):
    """An expected refusal to serve: `reason` is kebab-case, `facts` name the path/tensor/expected/actual."""

    def __init__(self, reason: str, message: str, **facts: Any) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.facts = facts

    def to_json(self) -> dict:
        return {"reason": self.reason, "message": str(self), **{k: _jsonable(v) for k, v in self.facts.items()}}


def _jsonable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


@dataclass
class LoadReport:
    """What start-up did: loaded tensors with their provenance, skipped exempt ones, phase timings (s)."""

    submission: str
    device: str
    dtype: str
    architecture: str = ""
    shards: list[dict] = field(default_factory=list)
    loaded: list[dict] = field(default_factory=list)
    skipped_exempt: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "submission": self.submission, "device": self.device, "dtype": self.dtype,
            "architecture": self.architecture, "shards": self.shards, "loaded": self.loaded,
            "loaded_count": len(self.loaded), "skipped_exempt": self.skipped_exempt, "phases": self.phases,
        }


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """auto: bf16 on a GPU, float32 on a CPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise LoadError("bad-dtype", f"unknown compute dtype {dtype!r}", expected=sorted(table), actual=dtype)
    return table[dtype]


# ---------------------------------------------------------------------------------------------- manifest


# What schemas/manifest.schema.json allows, checked by hand (the served box has no JSON Schema library;
# python/tests/test_contract.py runs these checks against the schema on valid and invalid manifests).
_MANIFEST_KEYS = ("format", "base_model", "revision", "method", "packing", "shards", "tensors")
_SHARD_KEYS = ("file", "size", "sha256")
_SHARD_FILE = re.compile(r"^weights/[A-Za-z0-9._-]+\.safetensors$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ENCODINGS = ("packed_2bit", "float")
_TENSOR_REQUIRED = ("encoding", "shape", "dtype", "shard")
_TENSOR_OPTIONAL = ("group_size", "codes_key", "scale_key", "data_key", "tied_to", "exempt")


def _is_int(v: Any) -> bool:
    """A JSON integer as JSON Schema counts it (1.0 is one; true is not)."""
    return not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))


def check_manifest(manifest: Any, path: str = "quantization_manifest.json") -> dict:
    """Structurally check a parsed manifest: everything schemas/manifest.schema.json requires, then what it
    cannot say (each tensor's shard is listed, each encoding's keys are present and its own). Raises LoadError:
    `packing-mismatch` for a packing convention other than the contract's, `key-not-own`, else
    `manifest-invalid`, each naming the field."""
    def bad(message: str, **facts: Any) -> LoadError:
        return LoadError("manifest-invalid", message, path=path, **facts)

    if not isinstance(manifest, dict):
        raise bad("manifest is not an object")
    for key in _MANIFEST_KEYS:
        if key not in manifest:
            raise bad(f"manifest lacks {key!r}", expected=key)
    extra = sorted(set(manifest) - set(_MANIFEST_KEYS))
    if extra:
        raise bad(f"manifest has unknown field(s) {extra}", actual=extra)
    if manifest["format"] != MANIFEST_FORMAT:
        raise bad("unknown manifest format", expected=MANIFEST_FORMAT, actual=manifest["format"])
    for key in ("base_model", "revision", "method"):
        if not isinstance(manifest[key], str):
            raise bad(f"{key} is not a string", field=key, actual=manifest[key])
    packing = manifest["packing"]
    if packing != MANIFEST_PACKING:
        fields = sorted(k for k in set(MANIFEST_PACKING) | set(packing if isinstance(packing, dict) else {})
                        if not isinstance(packing, dict) or packing.get(k) != MANIFEST_PACKING.get(k))
        raise LoadError("packing-mismatch", f"the manifest's packing differs from the contract's in {fields}: this "
                        "server reads only the convention of schemas/contract.json", path=path, fields=fields,
                        expected=[MANIFEST_PACKING.get(k) for k in fields],
                        actual=[packing.get(k) if isinstance(packing, dict) else packing for k in fields])
    shards = manifest["shards"]
    if not isinstance(shards, list) or not shards:
        raise bad("shards is not a non-empty list", actual=shards)
    shard_files = set()
    for i, s in enumerate(shards):
        if not isinstance(s, dict) or set(s) != set(_SHARD_KEYS):
            raise bad(f"shards[{i}] must have exactly {list(_SHARD_KEYS)}: {s!r}", field=f"shards[{i}]")
        if not isinstance(s["file"], str) or not _SHARD_FILE.match(s["file"]):
            raise LoadError("shard-path-outside-weights", f"shards[{i}].file {s['file']!r} is not "
                            f"{SUBMISSION['weights_dir']}/<name>.safetensors", path=path, shard=s["file"])
        if not _is_int(s["size"]) or s["size"] < 8:
            raise bad(f"shards[{i}].size {s['size']!r} is not an integer >= 8", field=f"shards[{i}].size")
        if not isinstance(s["sha256"], str) or not _SHA256.match(s["sha256"]):
            raise bad(f"shards[{i}].sha256 is not 64 lowercase hex digits", field=f"shards[{i}].sha256")
        shard_files.add(s["file"])
    if not isinstance(manifest["tensors"], dict):
        raise bad("tensors is not an object")
    for name, t in manifest["tensors"].items():
        if not isinstance(t, dict):
            raise bad(f"tensor {name}: entry is not an object", tensor=name)
        missing = [k for k in _TENSOR_REQUIRED if k not in t]
        unknown = sorted(set(t) - set(_TENSOR_REQUIRED) - set(_TENSOR_OPTIONAL))
        if missing or unknown:
            raise bad(f"tensor {name}: " + (f"lacks {missing}" if missing else f"unknown field(s) {unknown}"),
                      tensor=name, expected=missing, actual=unknown)
        enc = t["encoding"]
        if enc not in _ENCODINGS:
            raise bad(f"tensor {name}: unknown encoding", tensor=name, expected=list(_ENCODINGS), actual=enc)
        if not isinstance(t["shape"], list) or not all(_is_int(x) and x >= 0 for x in t["shape"]):
            raise bad(f"tensor {name}: shape {t['shape']!r} is not a list of integers >= 0", tensor=name)
        for k in ("dtype", "shard", "codes_key", "scale_key", "data_key"):
            if k in t and not isinstance(t[k], str):
                raise bad(f"tensor {name}: {k} is not a string", tensor=name, field=k)
        if "group_size" in t and (not _is_int(t["group_size"]) or t["group_size"] < GROUP_SIZE_MULTIPLE):
            raise bad(f"tensor {name}: group_size {t['group_size']!r} is not an integer >= {GROUP_SIZE_MULTIPLE}",
                      tensor=name)
        if "tied_to" in t and (not isinstance(t["tied_to"], list) or not all(isinstance(x, str) for x in t["tied_to"])):
            raise bad(f"tensor {name}: tied_to is not a list of names", tensor=name)
        if "exempt" in t and not isinstance(t["exempt"], bool):
            raise bad(f"tensor {name}: exempt is not a boolean", tensor=name)
        # Beyond the schema: the shard is listed, the encoding's keys are there and are the tensor's own.
        if t["shard"] not in shard_files:
            raise bad(f"tensor {name}: shard not listed in shards[]", tensor=name, actual=t["shard"])
        needed = ("codes_key", "scale_key", "group_size") if enc == "packed_2bit" else ("data_key",)
        for k in needed:
            if k not in t:
                raise bad(f"tensor {name}: {enc} needs {k}", tensor=name, expected=k)
        # Each entry's keys are its own (as pack names them), so two same-shaped tensors cannot swap bytes.
        own = {"codes_key": f"{name}.codes", "scale_key": f"{name}.scale"} if enc == "packed_2bit" \
            else {"data_key": name}
        for k, want in own.items():
            if t[k] != want:
                raise LoadError("key-not-own", f"tensor {name}: {k} {t[k]!r} is not its own ({want!r})",
                                tensor=name, expected=want, actual=t[k])
    return manifest


def read_manifest(sub: Path) -> dict:
    """Read quantization_manifest.json and check it (`check_manifest`)."""
    path = sub / SUBMISSION["manifest"]
    if not path.is_file():
        raise LoadError("manifest-missing", f"no manifest at {path}", path=str(path))
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LoadError("manifest-invalid", f"{path} is not JSON: {e}", path=str(path)) from None
    return check_manifest(manifest, str(path))


def is_exempt(name: str, entry: dict) -> bool:
    return bool(entry.get("exempt")) or name.startswith(EXEMPT_PREFIXES)


def sha256_file(path: Path, chunk: int = 8 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def shard_path(sub: Path, file: Any) -> Path:
    """The path of a manifest shard name, which must resolve inside <sub>/weights/; refused by name otherwise
    (absolute, "..", or a symlink leading out), before anything is opened."""
    weights_dir = SUBMISSION["weights_dir"]
    if not isinstance(file, str) or not file.startswith(weights_dir + "/") or file.startswith("/") or "\\" in file \
            or "\0" in file or any(part in ("", ".", "..") for part in file.split("/")):
        raise LoadError("shard-path-outside-weights", f"shard name {file!r} is not a path inside weights/",
                        shard=file)
    weights = (sub / weights_dir).resolve()
    path = (sub / file).resolve()
    if weights not in path.parents:
        raise LoadError("shard-path-outside-weights", f"shard {file!r} resolves outside weights/", shard=file)
    return sub / file


def check_values(name: str, key: str, t: torch.Tensor, scale: bool) -> None:
    """Scales finite and in (0, SCALE_MAX]; float tensors finite (as the audit checks them)."""
    if not t.is_floating_point():
        return
    bad = ~torch.isfinite(t)
    reason = "scale-not-finite" if scale else "float-not-finite"
    if scale and not bool(bad.any()):
        bad = ~((t > 0) & (t <= SCALE_MAX))
        reason = "scale-out-of-range"
    if bool(bad.any()):
        i = int(bad.flatten().nonzero()[0])
        value = float(t.flatten()[i])
        raise LoadError(reason, f"{name}: {key} element {i} is {value}"
                        + (f" (scales must be finite, > 0, <= {SCALE_MAX:g})" if scale else " (must be finite)"),
                        tensor=name, key=key, actual=repr(value))


def verify_shards(sub: Path, manifest: dict) -> list[dict]:
    """Size then sha256 of every listed shard; raises on the first mismatch."""
    out = []
    for s in manifest["shards"]:
        path = shard_path(sub, s["file"])
        if not path.is_file():
            raise LoadError("shard-missing", f"shard {s['file']} not found", path=str(path))
        size = path.stat().st_size
        if size != s["size"]:
            raise LoadError("shard-size-mismatch", f"shard {s['file']} has {size} bytes, manifest says {s['size']}",
                            path=str(path), expected=s["size"], actual=size)
        digest = sha256_file(path)
        if digest != s["sha256"]:
            raise LoadError("shard-sha256-mismatch", f"shard {s['file']} sha256 differs from the manifest",
                            path=str(path), expected=s["sha256"], actual=digest)
        out.append({"file": s["file"], "size": size, "sha256": digest})
    return out


# ---------------------------------------------------------------------------------------------- model


def read_config(sub: Path) -> tuple[Any, str]:
    """The text-only config and the model family ('qwen3_5' or 'auto')."""
    from transformers import AutoConfig

    path = sub / "config.json"
    if not path.is_file():
        raise LoadError("config-missing", f"no config.json in {sub}", path=str(path))
    raw = json.loads(path.read_text(encoding="utf-8"))
    if raw.get("model_type") in ("qwen3_5", "qwen3_5_text"):
        from transformers import Qwen3_5Config, Qwen3_5TextConfig

        if raw["model_type"] == "qwen3_5":
            composite = Qwen3_5Config.from_dict(raw)
            text = composite.text_config
            tie = bool(raw.get("tie_word_embeddings", False) or raw.get("text_config", {}).get("tie_word_embeddings"))
            text.tie_word_embeddings = tie
        else:
            text = Qwen3_5TextConfig.from_dict(raw)
        return text, "qwen3_5"
    return AutoConfig.from_pretrained(str(sub), local_files_only=True), "auto"


def build_empty_model(config: Any, family: str) -> torch.nn.Module:
    """The text-only causal LM with every tensor on the meta device (no memory, no init)."""
    with torch.device("meta"):
        if family == "qwen3_5":
            from transformers import Qwen3_5ForCausalLM

            model = Qwen3_5ForCausalLM(config)
        else:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_config(config)
    return model


def model_name_for(source_name: str) -> str:
    """Source (checkpoint) tensor name -> text-only model parameter name."""
    if source_name.startswith(TEXT_PREFIX):
        return "model." + source_name[len(TEXT_PREFIX):]
    return source_name


def _fp32_keep(model: torch.nn.Module) -> tuple[str, ...]:
    keep = []
    for attr in ("_keep_in_fp32_modules", "_keep_in_fp32_modules_strict"):
        keep.extend(getattr(model, attr, None) or [])
    return tuple(keep)


def _rebuild_meta_buffers(model: torch.nn.Module, device: torch.device) -> None:
    """Non-persistent buffers (rotary inv_freq) are computed at init, not stored: rebuild their modules."""
    for mod_name, module in list(model.named_modules()):
        if not any(b.is_meta for b in module.buffers(recurse=False)):
            continue
        cfg = getattr(module, "config", None)
        if cfg is None:
            continue  # left on meta: the final check names it
        with torch.device(device):
            fresh = type(module)(config=cfg)
        parent_name, _, child = mod_name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, fresh)


def _check_shape(name: str, key: str, t: torch.Tensor, expected: list[int], dtype: torch.dtype) -> None:
    if list(t.shape) != expected:
        raise LoadError("tensor-shape-mismatch", f"{name}: {key} has shape {list(t.shape)}, expected {expected}",
                        tensor=name, key=key, expected=expected, actual=list(t.shape))
    if t.dtype != dtype:
        raise LoadError("tensor-dtype-mismatch", f"{name}: {key} is {t.dtype}, expected {dtype}",
                        tensor=name, key=key, expected=str(dtype), actual=str(t.dtype))


# What the safetensors library's refusals mean, in the audit's words (lib/safetensors/errors.ts
# SafetensorsReason; test/safetensors.test.ts holds the names and the reasons to it): the same tampered shard gets the same reason
# from `verify` and from the server. First match wins; the message is kept beside the reason.
SAFETENSORS_REASONS: tuple[tuple[str, str], ...] = (
    ("header too small", "header-too-small"),
    ("header too large", "header-too-large"),
    ("invalid header length", "invalid-header-length"),
    ("metadata incomplete buffer", "invalid-header-length"),
    ("invalid utf-8 in header", "invalid-header-utf8"),
    ("unknown variant", "unknown-dtype"),
    ("duplicate field", "duplicate-key"),
    ("invalid value", "invalid-header-structure"),
    ("invalid type", "invalid-header-structure"),
    ("missing field", "invalid-header-structure"),
    ("unknown field", "invalid-header-structure"),
    ("invalid length", "invalid-header-structure"),
    ("invalid json in header", "invalid-header-json"),
    ("invalid header start", "invalid-header-json"),
    ("overflow computing buffer size", "shape-overflow"),
    ("invalid shape, data type, or offset", "span-mismatch"),
)
# The library's one message for several of the audit's reasons: the layout of the header tells which.
_LAYOUT_MESSAGES = ("invalid offset for tensor", "file not fully covered")


def safetensors_reason(message: str, path: str | Path | None = None) -> str:
    """The audit's reason for a safetensors error message (read from the file's header where the message
    alone cannot tell); `unreadable` when none matches."""
    low = message.lower()
    if path is not None and any(m in low for m in _LAYOUT_MESSAGES):
        return _layout_reason(Path(path)) or "unreadable"
    return next((reason for needle, reason in SAFETENSORS_REASONS if needle in low), "unreadable")


def _layout_reason(path: Path) -> str | None:
    """How the data offsets of a header the library parsed fail to tile the data section."""
    try:
        with path.open("rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        data = path.stat().st_size - 8 - n
        spans = sorted((int(v["data_offsets"][0]), int(v["data_offsets"][1]))
                       for k, v in header.items() if k != "__metadata__")
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    at = 0
    for begin, end in spans:
        if end < begin:
            return "invalid-header-structure"
        if begin > at:
            return "offsets-gap"
        if begin < at:
            return "offsets-overlap"
        at = end
    return "truncated-data" if at > data else "trailing-bytes" if at < data else None


def load_model(submission_dir: str | Path, device: str | torch.device = "auto",
               dtype: str | torch.dtype | None = "auto") -> tuple[torch.nn.Module, Any, LoadReport]:
    """Verify, load, dequantize, build. Returns (model in eval mode, tokenizer, report)."""
    from safetensors import SafetensorError, safe_open
    from transformers import AutoTokenizer

    sub = Path(submission_dir).resolve()
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    cdtype = resolve_dtype(dtype, dev)
    report = LoadReport(submission=str(sub), device=str(dev), dtype=str(cdtype).replace("torch.", ""))

    t0 = time.perf_counter()
    manifest = read_manifest(sub)
    report.shards = verify_shards(sub, manifest)
    sha_of = {s["file"]: s["sha256"] for s in report.shards}
    report.phases["verify"] = round(time.perf_counter() - t0, 4)

    t0 = time.perf_counter()
    config, family = read_config(sub)
    model = build_empty_model(config, family)
    report.architecture = type(model).__name__
    params = dict(model.named_parameters(remove_duplicate=False))
    keep_fp32 = _fp32_keep(model)
    # Read everything the manifest names (non-exempt), grouped by shard.
    by_shard: dict[str, list[str]] = {}
    for name, entry in sorted(manifest["tensors"].items()):
        if is_exempt(name, entry):
            report.skipped_exempt.append(name)
            continue
        by_shard.setdefault(entry["shard"], []).append(name)
    raw: dict[str, tuple[dict, dict[str, torch.Tensor]]] = {}
    load_device = "cpu" if dev.type == "cpu" else str(dev)
    for shard, names in by_shard.items():
        try:
            with safe_open(str(shard_path(sub, shard)), framework="pt", device=load_device) as f:
                keys = set(f.keys())
                for name in names:
                    entry = manifest["tensors"][name]
                    wanted = [entry["codes_key"], entry["scale_key"]] if entry["encoding"] == "packed_2bit" \
                        else [entry["data_key"]]
                    got = {}
                    for key in wanted:
                        if key not in keys:
                            raise LoadError("tensor-missing-in-shard", f"{name}: key {key} not in {shard}",
                                            tensor=name, key=key, path=str(sub / shard))
                        got[key] = f.get_tensor(key)
                    raw[name] = (entry, got)
        except SafetensorError as e:
            detail = safetensors_reason(str(e), shard_path(sub, shard))
            raise LoadError("shard-invalid", f"{shard}: {detail} ({e})", path=str(sub / shard), detail=detail) from None
    report.phases["load"] = round(time.perf_counter() - t0, 4)

    t0 = time.perf_counter()
    weights: dict[str, torch.Tensor] = {}
    for name in list(raw):
        entry, got = raw.pop(name)  # its packed bytes go as its weight arrives: peak = weights + one tensor's input
        shape = [int(x) for x in entry["shape"]]
        target = model_name_for(name)
        want_dtype = torch.float32 if any(k in target for k in keep_fp32) else cdtype
        if entry["encoding"] == "packed_2bit":
            g = int(entry["group_size"])
            if len(shape) != 2 or shape[1] % 4 or shape[1] % g or g % 4:
                raise LoadError("tensor-shape-mismatch", f"{name}: packed tensor shape {shape} at g={g} is invalid",
                                tensor=name, actual=shape)
            codes, scale = got[entry["codes_key"]], got[entry["scale_key"]]
            _check_shape(name, entry["codes_key"], codes, [shape[0], shape[1] // 4], torch.uint8)
            _check_shape(name, entry["scale_key"], scale, [shape[0], shape[1] // g], torch.float32)
            check_values(name, entry["scale_key"], scale, scale=True)
            try:
                t = unpack_2bit(codes, shape[1])
            except ValueError as e:
                raise LoadError("invalid-code", f"{name}: {e}", tensor=name) from None
            w = dequantize(t, scale, g, want_dtype)
            provenance = {"codes_key": entry["codes_key"], "scale_key": entry["scale_key"], "group_size": g}
        else:
            data = got[entry["data_key"]]
            src_dtype = SAFETENSORS_DTYPES.get(str(entry["dtype"]).upper())
            _check_shape(name, entry["data_key"], data, shape, src_dtype or data.dtype)
            check_values(name, entry["data_key"], data, scale=False)
            w = data.to(want_dtype)
            provenance = {"data_key": entry["data_key"]}
        weights[target] = w.to(dev)
        report.loaded.append({"name": name, "param": target, "encoding": entry["encoding"], "shape": shape,
                              "shard": entry["shard"], "shard_sha256": sha_of[entry["shard"]], **provenance})
        for tied in entry.get("tied_to", []) or []:
            weights.setdefault(model_name_for(tied), weights[target])
    del raw
    report.phases["dequantize"] = round(time.perf_counter() - t0, 4)

    t0 = time.perf_counter()
    unused = sorted(n for n in weights if n not in params)
    if unused:
        raise LoadError("tensor-unused", f"{len(unused)} manifest tensors map to no model parameter: "
                        + ", ".join(unused[:8]), tensors=unused)
    tie = bool(getattr(config, "tie_word_embeddings", False))
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    emb_name = next(n for n, p in params.items() if p is emb.weight)
    head_name = next((n for n, p in params.items() if head is not None and p is head.weight), None)
    if head_name and head_name not in weights and emb_name in weights and (tie or head.weight is emb.weight):
        weights[head_name] = weights[emb_name]  # tied head, stored once
    missing = sorted(n for n in params if n not in weights)
    if missing:
        raise LoadError("parameter-not-loaded", f"{len(missing)} model parameters are not in the manifest: "
                        + ", ".join(missing[:8]), parameters=missing)
    for n in params:
        if list(params[n].shape) != list(weights[n].shape):
            raise LoadError("tensor-shape-mismatch", f"{n}: manifest shape {list(weights[n].shape)} does not fit "
                            f"the model's {list(params[n].shape)}", tensor=n,
                            expected=list(params[n].shape), actual=list(weights[n].shape))
    shared: dict[int, torch.nn.Parameter] = {}
    for n in params:
        w = weights[n]
        p = shared.get(id(w))
        if p is None:
            p = torch.nn.Parameter(w, requires_grad=False)
            shared[id(w)] = p
        mod_name, _, attr = n.rpartition(".")
        model.get_submodule(mod_name)._parameters[attr] = p
    _rebuild_meta_buffers(model, dev)
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if left:
        raise LoadError("meta-tensor-left", "tensors left on the meta device: " + ", ".join(left[:8]), tensors=left)
    model.eval()
    model.requires_grad_(False)
    report.phases["build"] = round(time.perf_counter() - t0, 4)

    tokenizer = AutoTokenizer.from_pretrained(str(sub), local_files_only=True)
    return model, tokenizer, report
