"""`python -m ternforge quantize --config <json>`: source checkpoint -> interchange, for every method.

Config: the quantize profile section (config.py, schemas/stages/quantize.schema.json) plus the stage's paths:
model_dir (fetch-model's `model/`), out_dir, calib_dir (fetch-calib's output; the calibrated methods),
work_dir (distillation checkpoints, outliving an interrupted stage), source_json (default:
<model_dir>/../source.json, for base_model and revision). The method (methods.METHODS) returns its plan and
codes; the one writer (interchange.write_interchange) streams every source tensor into out_dir, then
`quantize_report.json` holds the same figures for every method (files, totals,
ternary_fraction_incl_embedding, per tensor, allocation) plus the method's own. Emits a progress event per
written tensor (and per GPTQ layer, transcript batch and distillation step) and returns the figures. An
expected failure (bad config, group size, unknown method, non-float source tensor, float budget under the
contract floor) is a `failure` event with its reason and facts, and {"ok": false}.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from ..events import emit, log
from ..sources.checkpoint import INDEX_NAME as SOURCE_INDEX, write_json
from . import dist
from .config import METHOD_NAMES, ConfigError, Paths, QuantizeConfig, parse
from .floatplan import Allocation, Encoding, FloatBudgetError
from .interchange import DTYPE_NAMES, PlannedTensor, write_interchange
from .methods import METHODS, Job, Outcome
from .vllm_teacher import ChatEngineUnavailable

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


def plan(model_dir: Path, group_size: int, allocation: Allocation) -> tuple[list[PlannedTensor], dict[str, str], dict[str, str]]:
    """Every tensor of the checkpoint's own index with its encoding under `allocation`, in name order.
    Returns (planned, weight_map, why)."""
    weight_map, meta = _shard_headers(model_dir)
    planned: list[PlannedTensor] = []
    why: dict[str, str] = {}
    for name in sorted(weight_map):
        shape, dtype = meta[name]
        d = allocation.decision(name)
        why[name] = d.why
        planned.append(PlannedTensor(name=name, shape=shape, dtype=DTYPE_NAMES[dtype], encoding=d.encoding,
                                     group_size=group_size if d.encoding is Encoding.TERNARY else None,
                                     exempt=d.exempt, element_size=torch.empty((), dtype=dtype).element_size()))
    return planned, weight_map, why


def check_device(cfg: QuantizeConfig, model_dir: Path, runs_model: bool) -> None:
    """Before any work: a CUDA device must exist; and where the method runs the float model (`runs_model`), a
    model with Gated DeltaNet layers must get flash-linear-attention's delta rule there (kernels.py), unless the
    profile allows the slow path. On CPU the PyTorch path is the only one."""
    if not cfg.device.startswith("cuda"):
        return
    if not torch.cuda.is_available():
        raise QuantizeError("no-cuda-device", f"device {cfg.device} was asked for, but torch {torch.__version__} sees no "
                            "CUDA device (torch.cuda.is_available() is False): run on the GPU box, or set quantize.device=cpu",
                            torch=torch.__version__, torch_cuda=torch.version.cuda)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    layer_types = (config.get("text_config") or config).get("layer_types") or []
    if not runs_model or "linear_attention" not in layer_types:
        return
    from .. import kernels

    record = kernels.probe()
    if record["fast_path"]:
        log(f"quantize: Gated DeltaNet kernels: flash-linear-attention {record['distributions']['flash-linear-attention']}")
        return
    if cfg.allow_slow_kernels:
        log("quantize: WARNING: the Gated DeltaNet layers run transformers' PyTorch delta rule (allow_slow_kernels)")
        return
    try:
        kernels.check_fast_path(cfg.device, record)
    except kernels.KernelsMissing as e:
        raise QuantizeError("kernels-missing", str(e), selected=record["selected"]) from None


def quantize(cfg: QuantizeConfig, paths: Paths, world: dist.World = dist.ONE) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Run cfg.method and, on the reporting rank, write the interchange and its report into paths.out_dir.
    Returns (the report, or None on the other ranks; the ranks' figures under a launch of several, else None)."""
    import time

    model_dir, out_dir = Path(paths.model_dir), Path(paths.out_dir)
    method = METHODS[cfg.method]
    if method.calibrated and not paths.calib_dir:
        raise QuantizeError("missing-calibration", f"method {cfg.method} needs calib_dir (fetch-calib's output)")
    source_json = Path(paths.source_json or model_dir.parent / "source.json")
    origin = json.loads(source_json.read_text(encoding="utf-8"))["origin"] if source_json.exists() else {}
    base_model = str(paths.base_model or origin.get("base_model") or model_dir.name)
    revision = str(paths.revision or origin.get("revision") or "unknown")
    _, meta = _shard_headers(model_dir)  # refuses a non-float tensor before any work
    check_device(cfg, model_dir, method.calibrated)
    t0 = time.monotonic()

    def on_progress(done: int, total: int, what: str) -> None:
        emit("progress", done=done, total=total, what=what)

    def on_step(rec: dict) -> None:
        emit("loss", **rec)
        emit("progress", done=rec["step"], total=rec["total"],
             what=f"gptq+kd: distillation step, loss {rec['loss']:.4g}, about {rec['seconds_left']:.0f} s left")

    job = Job(cfg=cfg, paths=paths, shapes={n: s for n, (s, _) in meta.items()}, on_progress=on_progress,
              on_step=on_step, world=world)
    try:
        outcome = method.run(job)
    except FloatBudgetError as e:
        raise QuantizeError("float-budget", str(e)) from e
    ranks = rank_seconds(world, {"total_s": time.monotonic() - t0, **outcome.seconds})
    if not world.reporter:
        return None, None
    report = write_outcome(cfg, paths, outcome, on_progress, base_model, revision)
    log(f"quantize: {cfg.method} wrote {len(report['files'])} file(s), ternary fraction incl. embedding "
        f"{report['ternary_fraction_incl_embedding']} in {time.monotonic() - t0:.1f} s")
    distributed = None if world.size == 1 else {"world_size": world.size, "backend": world.backend, "ranks": ranks}
    return report, distributed


def rank_seconds(world: dist.World, seconds: dict[str, float]) -> list[dict[str, float]]:
    """Every rank's seconds per phase (the same phases on each), by rank."""
    names = sorted(seconds)
    return [{"rank": r, **{n: round(v, 3) for n, v in zip(names, got)}}
            for r, got in enumerate(world.gather_figures([seconds[n] for n in names]))]


def write_outcome(cfg: QuantizeConfig, paths: Paths, outcome: Outcome, on_progress: Callable[[int, int, str], None],
                  base_model: str, revision: str) -> dict[str, Any]:
    """The interchange of `outcome` (its plan and codes) and quantize_report.json in paths.out_dir."""
    model_dir, out_dir = Path(paths.model_dir), Path(paths.out_dir)
    planned, weight_map, why = plan(model_dir, cfg.group_size, outcome.allocation)
    not_float = sorted(set(outcome.floats) - {t.name for t in planned if t.encoding is Encoding.FLOAT})
    if not_float:
        raise RuntimeError(f"the method trained float values for tensors the plan does not keep float: {not_float[:5]}")
    open_shards: dict[str, Any] = {}

    def read(name: str) -> torch.Tensor:
        shard = weight_map[name]
        if shard not in open_shards:
            open_shards[shard] = safe_open(str(model_dir / shard), framework="pt")
        W = open_shards[shard].get_tensor(name)
        if name not in outcome.floats:
            return W
        new = outcome.floats[name]
        if tuple(new.shape) != tuple(W.shape) or not bool(torch.isfinite(new).all()):
            raise RuntimeError(f"{name}: the method's trained values ({tuple(new.shape)}) are not a finite "
                               f"tensor of the source's shape {tuple(W.shape)}")
        return new.to(W.dtype)  # stored in the source's dtype, as every float tensor

    try:
        figures = write_interchange(out_dir, planned, read, outcome.codes, cfg.method, base_model, revision,
                                    cfg.max_file_bytes, why, lambda d, n, name: on_progress(d, n, name))
    finally:
        open_shards.clear()
    a = outcome.allocation
    # The report is an output: it holds no timings (same inputs, same bytes); the time goes in the result event.
    report = {**outcome.report, "method": cfg.method, "group_size": cfg.group_size, **figures,
              "allocation": {"ternary_fraction": a.fraction, "forced_float": a.forced_float,
                             "chosen_float": a.chosen_float, "scores": a.scores},
              "ternary_tensors": sorted(n for n, t in figures["tensors"].items() if t["encoding"] == "ternary")}
    write_json(out_dir / REPORT_NAME, report)
    return report


def result_of(report: dict[str, Any], distributed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The result event: the same figures whatever the method (stages/quantize.ts records them), and under a
    launch of several ranks the world and each rank's seconds."""
    return {"ok": True, "method": report["method"], "files": report["files"], "totals": report["totals"],
            "ternary_fraction_incl_embedding": report["ternary_fraction_incl_embedding"],
            "ternary_fraction": report["allocation"]["ternary_fraction"],
            **({} if distributed is None else {"distributed": distributed})}


def main(config: dict[str, Any]) -> dict[str, Any]:
    try:
        method, g = config.get("method"), config.get("group_size")
        if method not in METHOD_NAMES:
            raise QuantizeError("unknown-method", f"unknown quantization method {method!r}", expected=sorted(METHOD_NAMES),
                                actual=method)
        if not isinstance(g, int) or isinstance(g, bool) or g < 4 or g % 4 != 0:
            raise QuantizeError("bad-group-size", f"group size {g} is not a positive multiple of 4",
                                expected="multiple of 4", actual=g)
        try:
            cfg, paths = parse(config)
        except ConfigError as e:
            raise QuantizeError("bad-config", str(e), problems=e.problems) from e
        try:
            world = dist.join(cfg.launch.backend, cfg.device, cfg.launch.world_size)
        except dist.LaunchError as e:
            raise QuantizeError("bad-launch", str(e)) from e
        try:
            cfg = dataclasses.replace(cfg, device=dist.rank_device(world, cfg.device))
            log(f"quantize: {paths.model_dir} -> {paths.out_dir} method={cfg.method} g={cfg.group_size}"
                + ("" if world.size == 1 else f" rank {world.rank} of {world.size} ({world.backend}) on {cfg.device}"))
            try:
                report, distributed = quantize(cfg, paths, world)
            except ChatEngineUnavailable as e:
                raise QuantizeError("chat-engine-unavailable", str(e), chat_engine=cfg.kd.chat_engine) from e
        finally:
            dist.leave(world)
    except QuantizeError as e:
        log(str(e))
        emit("failure", reason=e.reason, message=str(e), **e.facts)
        return {"ok": False}
    return {"ok": True} if report is None else result_of(report, distributed)
