"""Quantization methods by name: one protocol, one table, never an if-chain.

A method gets a `Job` (the parsed config, the stage's paths, the source tensor list, progress sinks) and
returns an `Outcome`: the float-budget plan it used (floatplan.Allocation: which tensors are ternary) and
`codes(planned, W)`, the ternary codes and scales of one planned tensor given its source weight, plus the
figures only it has (GPTQ's output errors, the distillation's losses) and any float tensors it trained
(gptq+kd's norms and float linears with kd.norm_lr and kd.float_lr). The one interchange writer
(interchange.write_interchange) then streams every source tensor through `codes`, so keep_float,
max_file_bytes, the file layout and the evidence figures are the same for every method.

- absmean (data-free): the plan's forced floats only; codes computed per tensor as it is written.
- none: the float baseline; every tensor float.
- twn: the float budget by measured sensitivity (calibration.prepare), then data-free codes per tensor as
  it is written.
- gptq, gptq+kd: the float model and calibration batches (calibration.prepare), the float
  budget by measured sensitivity, then sequential GPTQ (gptq.run_gptq) and, for gptq+kd, distillation
  (distill.run_gptq_kd); codes computed before writing and looked up by name.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from . import absmean, twn
from .config import Paths, QuantizeConfig
from .dist import ONE, World
from .floatplan import AllocConfig, Allocation, allocate
from .interchange import PlannedTensor, TernaryTensor


@dataclass(frozen=True)
class Job:
    cfg: QuantizeConfig
    paths: Paths
    shapes: dict[str, tuple[int, ...]]  # every source tensor (from the checkpoint's headers)
    on_progress: Callable[[int, int, str], None] = lambda done, total, what: None
    on_step: Callable[[dict], None] | None = None  # each distillation step's record
    world: World = ONE  # the launch's ranks (dist.py); the calibrated methods split their work over them


@dataclass(frozen=True)
class Outcome:
    allocation: Allocation
    codes: Callable[[PlannedTensor, torch.Tensor], TernaryTensor]
    report: dict[str, Any] = field(default_factory=dict)
    # Float tensors the method trained (source name -> values), written in place of the source's in its dtype.
    floats: dict[str, torch.Tensor] = field(default_factory=dict)
    # This rank's seconds per phase (`gptq_s`, ...): for the result event under a launch, never the report.
    seconds: dict[str, float] = field(default_factory=dict)


class Method(Protocol):
    name: str
    calibrated: bool  # reads fetch-calib's calibration tokens and the float model

    def run(self, job: Job) -> Outcome: ...


def forced_plan(job: Job) -> Allocation:
    """The plan without sensitivities: forced floats and keep_float only."""
    c = job.cfg
    return allocate(job.shapes, AllocConfig(group_size=c.group_size, target_fraction=c.allocation.target_fraction,
                                            min_relative_score=c.allocation.min_relative_score,
                                            keep_float=c.keep_float))


def _no_codes(t: PlannedTensor, _W: torch.Tensor) -> TernaryTensor:
    raise RuntimeError(f"{t.name}: planned ternary but the method computed no codes for it")


def _lookup(codes: dict[str, TernaryTensor]) -> Callable[[PlannedTensor, torch.Tensor], TernaryTensor]:
    return lambda t, _W: codes[t.name] if t.name in codes else _no_codes(t, _W)


class Absmean:
    name, calibrated = "absmean", False

    def run(self, job: Job) -> Outcome:
        g = job.cfg.group_size

        def codes(t: PlannedTensor, W: torch.Tensor) -> TernaryTensor:
            T, gamma = absmean.quantize(W, absmean.AbsmeanConfig(group_size=g))
            return TernaryTensor(W_q=T, scale=gamma, group_size=g)

        return Outcome(forced_plan(job), codes)


class TWN:
    name, calibrated = "twn", True  # its float budget is measured on calibration data; the codes are data-free

    def run(self, job: Job) -> Outcome:
        from .calibration import prepare
        from .model import DTYPES

        plan = prepare(job.paths.model_dir, job.paths.calib_dir, job.cfg).allocation
        g, dtype = job.cfg.group_size, DTYPES[job.cfg.dtype]
        tcfg = twn.TWNConfig(group_size=g, search=job.cfg.twn.search)

        def codes(t: PlannedTensor, W: torch.Tensor) -> TernaryTensor:
            # The weight as the float model holds it (cfg.dtype), as the model-level methods see it.
            W_q, scale = twn.quantize(W.to(dtype), tcfg)
            return TernaryTensor(W_q=W_q.cpu(), scale=scale.cpu(), group_size=g)

        return Outcome(plan, codes, {"twn_search": tcfg.search})


class NoQuantization:
    name, calibrated = "none", False

    def run(self, job: Job) -> Outcome:
        return Outcome(forced_plan(job).all_float(), _no_codes)


class GPTQMethod:
    name, calibrated = "gptq", True

    def run(self, job: Job) -> Outcome:
        from .calibration import prepare
        from .gptq import run_gptq

        prep = prepare(job.paths.model_dir, job.paths.calib_dir, job.cfg)
        t0 = time.monotonic()
        codes, report = run_gptq(prep, job.cfg, lambda d, n: job.on_progress(d, n, "gptq: layer"), job.world)
        return Outcome(prep.allocation, _lookup(codes), report, seconds={"gptq_s": time.monotonic() - t0})


class GPTQKD:
    name, calibrated = "gptq+kd", True

    def run(self, job: Job) -> Outcome:
        from .calibration import prepare
        from .distill import check_config, run_gptq_kd

        check_config(job.cfg.kd)  # refuses bad kd settings before the GPTQ pass
        prep = prepare(job.paths.model_dir, job.paths.calib_dir, job.cfg)
        seconds: dict[str, float] = {}
        codes, report, floats = run_gptq_kd(prep, job.cfg, job.paths,
                                            lambda d, n: job.on_progress(d, n, "gptq+kd: layer"),
                                            job.on_step, job.on_progress, job.world, seconds)
        return Outcome(prep.allocation, _lookup(codes), report, floats, seconds)


METHODS: dict[str, Method] = {m.name: m for m in (Absmean(), NoQuantization(), TWN(), GPTQMethod(), GPTQKD())}


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown quantization method {name!r}; known: {sorted(METHODS)}") from None
