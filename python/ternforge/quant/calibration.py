"""Calibration preparation for the calibrated methods: the float model, calibration batches from
fetch-calib's calibration role (and, for gptq+kd's GPTQ, from the teacher's transcripts), per-linear input
energies and the float budget plan built on them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .config import CalibrationConfig, QuantizeConfig
from .floatplan import AllocConfig, Allocation, allocate, twn_output_error
from .hooks import input_energy
from .model import DTYPES, load_float_model, module_to_source, set_deterministic, source_tensor_names


@dataclass
class Prepared:
    """Everything a method needs: the float model, calibration batches, and the float budget's plan."""

    model: nn.Module
    batches: list[torch.Tensor]
    shapes: dict[str, tuple[int, ...]]
    m2s: dict[str, str]  # linear module name -> source tensor name
    allocation: Allocation
    group_size: int

    def ternary_modules(self) -> dict[str, str]:
        """Module name -> source name of every linear the plan makes ternary."""
        plan = self.allocation.plan
        return {m: s for m, s in self.m2s.items() if plan.get(s) == "ternary"}


def calibration_batches(calib_dir: str | Path, eos_id: int, cfg: CalibrationConfig, role: str = "calibration"
                        ) -> list[torch.Tensor]:
    from ..calib.tokens import batches, load_role, sequences

    seqs = sequences(load_role(calib_dir, role), cfg.seq_len, cfg.sequences, eos_id)
    return batches(seqs, cfg.batch_size)


def chat_calibration(transcripts: list[list[int]], n: int, seq_len: int, batch_size: int
                     ) -> list[torch.Tensor]:
    """gptq.chat_windows: n windows of seq_len tokens spread evenly over the teacher's transcripts (joined end to
    end), in batches of batch_size; fewer (whole batches) when the transcripts hold fewer."""
    from .chatdata import windows

    w = windows(transcripts, seq_len)
    take = min(n, w.shape[0]) // batch_size * batch_size
    if take <= 0:
        return []
    idx = torch.linspace(0, w.shape[0] - 1, take).round().long()
    return list(w[idx].split(batch_size))


def eos_of(model: nn.Module) -> int:
    eos = model.config.eos_token_id
    return int(eos[0] if isinstance(eos, list) else (eos if eos is not None else 0))


def prepare(model_dir: str | Path, calib_dir: str | Path | None, cfg: QuantizeConfig) -> Prepared:
    """The float model (cfg.dtype on cfg.device), the calibration batches (none without `calib_dir`), and
    the float budget plan: forced floats, `keep_float`, and further floats by measured sensitivity when
    there are batches and allocation.sensitivity is on."""
    set_deterministic(cfg.seed)
    g = cfg.group_size
    model = load_float_model(model_dir, DTYPES[cfg.dtype], cfg.device)
    shapes = source_tensor_names(model_dir)
    m2s = module_to_source(model, shapes)
    batches = calibration_batches(calib_dir, eos_of(model), cfg.calibration) if calib_dir else []
    batches = [b.to(cfg.device) for b in batches]
    a = cfg.allocation
    alloc_config = AllocConfig(group_size=g, target_fraction=a.target_fraction, min_relative_score=a.min_relative_score,
                               keep_float=cfg.keep_float)
    scores: dict[str, float] = {}
    if batches and a.sensitivity:
        energy = input_energy(model, batches, m2s)
        mods = dict(model.named_modules())
        for m, s in m2s.items():
            if m in energy and shapes[s][1] % g == 0:
                scores[s] = twn_output_error(mods[m].weight.detach(), energy[m], g)
    allocation = allocate(shapes, alloc_config, scores)
    return Prepared(model=model, batches=batches, shapes=shapes, m2s=m2s, allocation=allocation, group_size=g)
