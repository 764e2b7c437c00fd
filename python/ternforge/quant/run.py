"""`python -m ternforge quantize --config <json>`: source checkpoint -> interchange, one tensor at a time.

Config: model_dir (fetch-model's `model/`), out_dir, method (a key of quant.methods.METHODS),
group_size (a multiple of 4), optional keep_float (regexes of tensor names kept in float),
max_file_bytes (interchange file size cap), source_json (default: <model_dir>/../source.json, for
base_model and revision). Writes the interchange into out_dir plus `quantize_report.json` with per-tensor
figures; emits a progress event per tensor and returns totals. An expected failure (bad group size,
unknown method, non-float source tensor) is a `failure` event with its reason and facts, and {"ok": false}.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from ..events import emit, log, progress
from ..sources.checkpoint import INDEX_NAME as SOURCE_INDEX, write_json
from . import interchange
from .interchange import DTYPE_NAMES, PlannedTensor
from .methods import METHODS, MethodContext, get_method
from .policy import Encoding, classify

REPORT_NAME = "quantize_report.json"


class QuantizeError(Exception):
    def __init__(self, reason: str, message: str, **facts: Any) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.facts = facts


def _shard_headers(model_dir: Path) -> tuple[dict[str, str], dict[str, tuple[tuple[int, ...], torch.dtype]]]:
    index = json.loads((model_dir / SOURCE_INDEX).read_text(encoding="utf-8"))
    weight_map: dict[str, str] = index["weight_map"]
    meta: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    for shard in sorted(set(weight_map.values())):
        with safe_open(str(model_dir / shard), framework="pt") as f:
            for name in f.keys():
                sl = f.get_slice(name)
                meta[name] = (tuple(sl.get_shape()), _dtype_from_name(sl.get_dtype()))
    missing = sorted(set(weight_map) - set(meta))
    if missing:
        raise QuantizeError("index-tensor-missing", f"{len(missing)} tensors of the index are in no shard", first=missing[0])
    return weight_map, meta


_SAFE_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}


def _dtype_from_name(name: str) -> torch.dtype:
    if name not in _SAFE_DTYPES:
        raise QuantizeError("unsupported-dtype", f"source dtype {name} is not a float dtype", dtype=name)
    return _SAFE_DTYPES[name]


def plan(model_dir: Path, group_size: int, keep_float: tuple[re.Pattern[str], ...]) -> tuple[list[PlannedTensor], dict[str, str], dict[str, str]]:
    """Every tensor of the checkpoint's own index with its encoding. Returns (planned, weight_map, why)."""
    weight_map, meta = _shard_headers(model_dir)
    planned: list[PlannedTensor] = []
    why: dict[str, str] = {}
    for name in sorted(weight_map):
        shape, dtype = meta[name]
        d = classify(name, shape, group_size, keep_float)
        why[name] = d.why
        planned.append(
            PlannedTensor(
                name=name,
                shape=shape,
                dtype=DTYPE_NAMES[dtype],
                encoding=d.encoding,
                group_size=group_size if d.encoding is Encoding.TERNARY else None,
                exempt=d.exempt,
                element_size=torch.empty((), dtype=dtype).element_size(),
            )
        )
    return planned, weight_map, why


def quantize_checkpoint(
    model_dir: Path,
    out_dir: Path,
    method: str,
    group_size: int,
    base_model: str,
    revision: str,
    keep_float: tuple[str, ...] = (),
    max_file_bytes: int = 2 << 30,
) -> dict[str, Any]:
    """Write the interchange for `model_dir` into `out_dir`. Returns the report (also written to disk)."""
    if group_size < 4 or group_size % 4 != 0:
        raise QuantizeError("bad-group-size", f"group size {group_size} is not a positive multiple of 4", expected="multiple of 4", actual=group_size)
    if method not in METHODS:
        raise QuantizeError("unknown-method", f"unknown quantization method {method!r}", expected=sorted(METHODS), actual=method)
    quantizer = get_method(method)
    patterns = tuple(re.compile(p) for p in keep_float)
    planned, weight_map, why = plan(model_dir, group_size, patterns)
    files = interchange.plan_files(planned, max_file_bytes)
    names = [interchange.file_name(k, len(files)) for k in range(1, len(files) + 1)]
    out_dir.mkdir(parents=True, exist_ok=True)

    entries: dict[str, Any] = {}
    per_tensor: dict[str, Any] = {}
    totals = {"ternary_tensors": 0, "float_tensors": 0, "exempt_tensors": 0, "ternary_params": 0, "scale_params": 0, "float_params": 0}
    done = 0
    open_shards: dict[str, Any] = {}
    try:
        for fname, group in zip(names, files):
            data: dict[str, torch.Tensor] = {}
            for t in group:
                shard = weight_map[t.name]
                if shard not in open_shards:
                    open_shards[shard] = safe_open(str(model_dir / shard), framework="pt")
                W = open_shards[shard].get_tensor(t.name)
                n = W.numel()
                if t.encoding is Encoding.TERNARY:
                    assert t.group_size is not None
                    T, scale = quantizer(W, t.group_size, MethodContext(tensor_name=t.name))
                    _check_codes(t, T, scale)
                    data[t.name], data[f"{t.name}.scale"] = T, scale
                    W_q = (T.to(torch.float32).reshape(T.shape[0], -1, t.group_size) * scale.unsqueeze(-1)).reshape(T.shape)
                    W_f = W.to(torch.float32)
                    rel = float((W_f - W_q).norm() / W_f.norm().clamp_min(1e-30))
                    per_tensor[t.name] = {
                        "encoding": "ternary",
                        "rel_error": round(rel, 6),
                        "zero_fraction": round(float((T == 0).float().mean()), 6),
                    }
                    totals["ternary_tensors"] += 1
                    totals["ternary_params"] += n
                    totals["scale_params"] += scale.numel()
                else:
                    data[t.name] = W
                    per_tensor[t.name] = {"encoding": "float", "exempt": t.exempt, "why": why[t.name]}
                    totals["exempt_tensors" if t.exempt else "float_tensors"] += 1
                    if not t.exempt:
                        totals["float_params"] += n
                entries[t.name] = interchange.index_entry(t, fname)
                done += 1
                progress(done, len(planned), t.name)
            interchange.write_file(out_dir / fname, data)
            del data
    finally:
        open_shards.clear()

    interchange.write_index(out_dir, base_model, revision, method, names, entries)
    audited = totals["ternary_params"] + totals["scale_params"] + totals["float_params"]
    report = {
        "method": method,
        "group_size": group_size,
        "files": names,
        "totals": totals,
        # Ternary share of the non-exempt tensors including embeddings; the audit computes the gate itself.
        "ternary_fraction_incl_embedding": round(totals["ternary_params"] / audited, 6) if audited else 0.0,
        "tensors": per_tensor,
    }
    write_json(out_dir / REPORT_NAME, report)
    return report


def _check_codes(t: PlannedTensor, T: torch.Tensor, scale: torch.Tensor) -> None:
    """A method's output must be exactly what the interchange promises; a mismatch is a method bug."""
    assert t.group_size is not None
    out, cols = t.shape
    if T.dtype != torch.int8 or tuple(T.shape) != (out, cols) or int(T.min()) < -1 or int(T.max()) > 1:
        raise RuntimeError(f"{t.name}: method returned codes {T.dtype} {tuple(T.shape)} outside int8 {{-1,0,1}} [{out}, {cols}]")
    if scale.dtype != torch.float32 or tuple(scale.shape) != (out, cols // t.group_size):
        raise RuntimeError(f"{t.name}: method returned scales {scale.dtype} {tuple(scale.shape)}, expected float32 [{out}, {cols // t.group_size}]")


def main(config: dict[str, Any]) -> dict[str, Any]:
    from .capture import MODEL_METHODS, quantize_model  # model-level methods: calibration, GPTQ, KD

    if str(config.get("method")) in MODEL_METHODS:
        return quantize_model(config)
    model_dir = Path(config["model_dir"])
    source_json = Path(config.get("source_json") or model_dir.parent / "source.json")
    origin = json.loads(source_json.read_text(encoding="utf-8"))["origin"] if source_json.exists() else {}
    base_model = str(config.get("base_model") or origin.get("base_model") or model_dir.name)
    revision = str(config.get("revision") or origin.get("revision") or "unknown")
    log(f"quantize: {model_dir} -> {config['out_dir']} method={config['method']} g={config['group_size']}")
    try:
        report = quantize_checkpoint(
            model_dir,
            Path(config["out_dir"]),
            method=str(config["method"]),
            group_size=int(config["group_size"]),
            base_model=base_model,
            revision=revision,
            keep_float=tuple(config.get("keep_float", ())),
            max_file_bytes=int(config.get("max_file_bytes", 2 << 30)),
        )
    except QuantizeError as e:
        log(str(e))
        emit("failure", reason=e.reason, message=str(e), **e.facts)
        return {"ok": False}
    return {"ok": True, "files": report["files"], "totals": report["totals"], "ternary_fraction_incl_embedding": report["ternary_fraction_incl_embedding"]}
