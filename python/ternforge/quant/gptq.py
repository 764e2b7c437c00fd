"""GPTQ with ternary codes and per-group scales (Frantar et al. 2022, "GPTQ: Accurate Post-Training
Quantization for Generative Pre-trained Transformers"; layout after IST-DASLab/gptq `gptq.py`).

For one linear layer with input activations X, GPTQ minimises ||W X - Q X||^2 column by column: after
quantizing column i it spreads the error onto the columns not yet quantized through the inverse Hessian
H^-1 (H = 2 X X^T / n). Ternary: Q[:, i] = scale * clamp(round(W[:, i] / scale), -1, 1), one scale per
group of `group_size` consecutive ORIGINAL columns, fitted TWN-style (twn.py, closed-form optimal scale over
the searched support) on the group's weights:
- without act-order, when the sweep reaches the group, on its current error-corrected weights;
- with act-order (columns swept by decreasing H_ii), before the sweep, on the original weights, because a
  group's columns are then scattered through the sweep. The permutation is undone before codes are emitted,
  so groups stay consecutive columns of the source order.

Under a launch of several ranks (dist.py) each rank captures the inputs of its share of the calibration
batches (batches rank, rank + N, ...), and `H` is the same running mean, with the same bytes, as one
process's over all batches in order: batch b's term (sqrt(2/n_b) x)^T (sqrt(2/n_b) x), n_b the samples of
batches 0..b, is computed by the rank that holds b and broadcast, and every rank folds the terms in batch
order (`add_batch` is then one round: one batch per rank). A plain sum of the ranks' H would round
differently from the running mean. `fasterquant` then runs on every rank; rank 0's codes and scales are
broadcast, so the ranks propagate through the same weights even where a device's kernels are not bitwise
deterministic.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from . import twn
from .dist import ONE, World
from .interchange import TernaryTensor

if TYPE_CHECKING:
    from .calibration import Prepared
    from .config import GPTQSection, QuantizeConfig


@dataclass(frozen=True)
class GPTQConfig:
    group_size: int = 32
    blocksize: int = 128
    percdamp: float = 0.1  # ternary codes are coarse: heavier damping than GPTQ's 0.01 generalises better
    actorder: bool = True  # the profile's default too (config.GPTQSection)
    scale_search: str = "exact"  # twn.group_scales search: "exact" | "grid"


@dataclass(frozen=True)
class GPTQResult:
    W_q: torch.Tensor  # int8 [rows, columns] in {-1, 0, 1}, source column order
    scale: torch.Tensor  # float32 [rows, columns / group_size]
    loss: float  # sum of the column losses (W - Q)^2 / Hinv_ii / 2: GPTQ's output-error estimate
    rel_err: float  # tr((W-Q) H (W-Q)^T) / tr(W H W^T): output error relative to output energy


class GPTQ:
    def __init__(self, weight: torch.Tensor, world: World = ONE, rounds: int = 0):
        """`rounds` (several ranks): the calibration batches' count divided by the ranks', rounded up; every
        rank takes part in that many rounds (`finish` runs those a rank has no batch for)."""
        self.rows, self.columns = weight.shape
        self.dev = weight.device
        self.H = torch.zeros((self.columns, self.columns), device=self.dev, dtype=torch.float32)
        self.nsamples = 0
        self.world, self.rounds, self.rounds_done = world, rounds, 0

    def add_batch(self, inp: torch.Tensor | None) -> None:
        """Fold a batch of layer inputs [..., columns] into H = 2/n sum x x^T (running mean); with several
        ranks, one round: every rank's batch in rank order (None: this rank has none in this round)."""
        x = None if inp is None else inp.reshape(-1, self.columns).to(self.dev, torch.float32)
        self.rounds_done += 1
        if self.world.size == 1:
            self._fold(self._term(x, self.nsamples + x.shape[0]), x.shape[0])
            return
        counts = torch.zeros(self.world.size, dtype=torch.float64, device=self.world.comm_device())
        counts[self.world.rank] = 0 if x is None else x.shape[0]
        self.world.sum_(counts)
        n = self.nsamples
        for src, tmp in enumerate(int(c) for c in counts.tolist()):
            if tmp == 0:
                continue
            term = self._term(x, n + tmp) if src == self.world.rank else torch.empty_like(self.H)
            self._fold(self.world.broadcast_(term, src), tmp)
            n += tmp

    def _term(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """One batch's share of H once the running count is n."""
        x = math.sqrt(2 / n) * x
        return x.t() @ x

    def _fold(self, term: torch.Tensor, tmp: int) -> None:
        self.H *= self.nsamples / (self.nsamples + tmp)
        self.nsamples += tmp
        self.H += term

    def finish(self) -> None:
        """Several ranks: the rounds this rank has no batch for (its share is one batch short)."""
        while self.rounds_done < self.rounds:
            self.add_batch(None)

    def fasterquant(self, weight: torch.Tensor, config: GPTQConfig) -> GPTQResult:
        g = config.group_size
        if self.columns % g != 0:
            raise ValueError(f"group size {g} does not divide columns = {self.columns}")
        W = weight.detach().to(self.dev, torch.float32).clone()
        W0 = W.clone()
        H = self.H.clone()

        dead = torch.diag(H) == 0
        H[dead, dead] = 1
        W[:, dead] = 0

        scale = torch.zeros((self.rows, self.columns // g), device=self.dev, dtype=torch.float32)
        perm = torch.arange(self.columns, device=self.dev)
        if config.actorder:
            scale = twn.group_scales(W, g, config.scale_search)
            perm = torch.argsort(torch.diag(H), descending=True, stable=True)
            W = W[:, perm]
            H = H[perm][:, perm]
        invperm = torch.argsort(perm)
        group_of = perm // g  # group (source order) of each swept column
        group_start = (perm % g) == 0  # without act-order: the first column of its group

        Q = torch.zeros_like(W)
        Losses = torch.zeros_like(W)

        damp = config.percdamp * torch.mean(torch.diag(H))
        diag = torch.arange(self.columns, device=self.dev)
        H[diag, diag] += damp
        H = torch.linalg.cholesky(H)
        H = torch.cholesky_inverse(H)
        H = torch.linalg.cholesky(H, upper=True)
        Hinv = H

        blocksize = g if g >= config.blocksize else (config.blocksize // g) * g
        for i1 in range(0, self.columns, blocksize):
            i2 = min(i1 + blocksize, self.columns)
            count = i2 - i1

            W1 = W[:, i1:i2].clone()
            Q1 = torch.zeros_like(W1)
            Err1 = torch.zeros_like(W1)
            Losses1 = torch.zeros_like(W1)
            Hinv1 = Hinv[i1:i2, i1:i2]

            for i in range(count):
                w = W1[:, i]
                d = Hinv1[i, i]
                col = i1 + i
                grp = int(group_of[col])
                if not config.actorder and bool(group_start[col]):
                    # the group's current, error-corrected weights (blocks hold whole groups)
                    scale[:, grp] = twn.group_scales(W1[:, i:i + g], g, config.scale_search)[:, 0]
                s = scale[:, grp]
                safe = torch.where(s > 0, s, torch.ones_like(s))
                q = torch.where(s > 0, torch.clamp(torch.round(w / safe), -1, 1) * s, torch.zeros_like(w))
                Q1[:, i] = q
                Losses1[:, i] = (w - q) ** 2 / d**2 / 2

                err1 = (w - q) / d
                W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
                Err1[:, i] = err1

            Q[:, i1:i2] = Q1
            Losses[:, i1:i2] = Losses1
            W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])

        Q = Q[:, invperm]
        safe_scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        W_q = torch.clamp(torch.round(Q.reshape(self.rows, -1, g) / safe_scale.unsqueeze(-1)), -1, 1)
        W_q = W_q.reshape(self.rows, self.columns).to(torch.int8)

        D = W0 - twn.dequantize(W_q, scale, g)
        H0 = self.H
        rel_err = float(torch.sum((D @ H0) * D) / torch.sum((W0 @ H0) * W0).clamp(min=1e-30))
        scale = self.world.broadcast_(scale.contiguous())
        W_q = self.world.broadcast_(W_q.contiguous())
        return GPTQResult(W_q=W_q, scale=scale, loss=float(torch.sum(Losses)), rel_err=rel_err)

    def free(self) -> None:
        self.H = None  # type: ignore[assignment]


def gptq_config(p: "GPTQSection", group_size: int) -> GPTQConfig:
    """The profile's gptq section as fasterquant's settings."""
    return GPTQConfig(group_size=group_size, blocksize=p.blocksize, percdamp=p.percdamp, actorder=p.actorder,
                      scale_search=p.scale_search)


def run_gptq(prep: "Prepared", cfg: "QuantizeConfig", on_layer: Callable[[int, int], None] | None = None,
             world: World = ONE) -> tuple[dict[str, TernaryTensor], dict]:
    """Sequential GPTQ over the real model (hooks.sequential); the float model in `prep` ends up holding
    the dequantized weights. Returns the codes by source name and the per-tensor output errors. With several
    ranks each runs the layers on its share of the batches (world.mine) and the Hessians are shared."""
    from .hooks import sequential

    gcfg = gptq_config(cfg.gptq, prep.group_size)
    if len(prep.batches) < world.size:
        raise ValueError(f"gptq needs calibration batches (fetch-calib's calibration role), at least one for each "
                         f"of the {world.size} ranks: {len(prep.batches)}")
    rounds = -(-len(prep.batches) // world.size)
    ternary = prep.ternary_modules()
    rel_errs: dict[str, float] = {}

    def quantize_group(mods: list[tuple[str, nn.Linear]], feed) -> dict[str, TernaryTensor]:
        gptq = {name: GPTQ(mod.weight, world, rounds) for name, mod in mods}
        feed(lambda name, x: gptq[name].add_batch(x))
        for name, _ in mods:  # forward order: the order every rank's sink called them in
            gptq[name].finish()
        done = {}
        for name, mod in mods:
            res = gptq[name].fasterquant(mod.weight, gcfg)
            gptq[name].free()
            rel_errs[ternary[name]] = res.rel_err
            done[name] = TernaryTensor(W_q=res.W_q.cpu(), scale=res.scale.cpu(), group_size=prep.group_size)
        return done

    got = sequential(prep.model, world.mine(prep.batches), ternary, quantize_group, on_layer)
    out = {ternary[m]: tt for m, tt in got.items()}
    return out, {"gptq_rel_err": rel_errs, "actorder": gcfg.actorder, "scale_search": gcfg.scale_search}
