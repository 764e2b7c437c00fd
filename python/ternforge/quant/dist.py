"""The ranks of a torchrun launch (`quantize.launch`, PLAN.md section 4): who this process is, and the few
collectives that GPTQ and distillation use.

torchrun (`python -m torch.distributed.run`, started by stages/quantize.ts) sets RANK, LOCAL_RANK and
WORLD_SIZE for each process it starts; without them this is one process (`ONE`) and nothing here calls
torch.distributed. Every rank runs the same worker on the same config; rank 0 (`World.reporter`) alone emits
events (events.py), writes the interchange, the report and the distillation checkpoints.

Collectives take tensors only (no pickled objects): broadcasts of tensors every rank already has the shape
of, sums, a gather of float64 figures (`gather_figures`) and one of token-id rows (`gather_rows`).
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import TypeVar

import torch

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str | None = None  # None: one process, no process group

    @property
    def reporter(self) -> bool:
        """The one rank that emits events and writes files."""
        return self.rank == 0

    def mine(self, items: list[T]) -> list[T]:
        """This rank's share of a list every rank holds whole: items rank, rank + size, ..."""
        return items[self.rank::self.size]

    def broadcast_(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        """t on every rank becomes src's t, in place (its shape and dtype must agree on every rank)."""
        if self.size > 1:
            torch.distributed.broadcast(t, src)
        return t

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """t becomes the sum of every rank's t, in place (the same bytes on every rank)."""
        if self.size > 1:
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
        return t

    def share(self, t: torch.Tensor) -> torch.Tensor:
        """Rank 0's tensor (of any shape; rank 0's shape and dtype) on every rank; `t` itself with one rank."""
        if self.size == 1:
            return t
        shape = torch.zeros(8, dtype=torch.int64, device=self.comm_device())
        shape[0] = t.dim()
        shape[1:1 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
        self.broadcast_(shape)
        got = t.contiguous() if self.reporter else torch.empty(shape[1:1 + int(shape[0])].tolist(), dtype=t.dtype,
                                                                device=t.device)
        return self.broadcast_(got)

    def gather_figures(self, figures: list[float]) -> list[list[float]]:
        """Every rank's `figures` (the same count on each), by rank."""
        mine = torch.tensor(figures, dtype=torch.float64, device=self.comm_device())
        if self.size == 1:
            return [mine.tolist()]
        got = [torch.empty_like(mine) for _ in range(self.size)]
        torch.distributed.all_gather(got, mine)
        return [g.tolist() for g in got]

    def gather_rows(self, rows: list[list[int]]) -> list[list[list[int]]]:
        """Every rank's `rows` (lists of ints of any length, any count on each rank), by rank."""
        if self.size == 1:
            return [rows]
        flat = torch.tensor([len(rows), *map(len, rows), *(t for r in rows for t in r)], dtype=torch.int64)
        sizes = [torch.zeros(1, dtype=torch.int64, device=self.comm_device()) for _ in range(self.size)]
        torch.distributed.all_gather(sizes, torch.tensor([flat.numel()], dtype=torch.int64, device=self.comm_device()))
        width = max(int(s) for s in sizes)
        mine = torch.zeros(width, dtype=torch.int64, device=self.comm_device())
        mine[:flat.numel()] = flat.to(mine.device)
        got = [torch.empty_like(mine) for _ in range(self.size)]
        torch.distributed.all_gather(got, mine)
        out = []
        for g in got:
            v = g.tolist()
            at, theirs = 1 + v[0], []
            for length in v[1:1 + v[0]]:
                theirs.append(v[at:at + length])
                at += length
            out.append(theirs)
        return out

    def comm_device(self) -> str:
        return f"cuda:{self.local_rank}" if self.backend == "nccl" else "cpu"


ONE = World()


class LaunchError(ValueError):
    """The environment torchrun set disagrees with what the profile asked for."""


def join(backend: str | None, device: str, expected_size: int | None) -> World:
    """This process's place in the launch: ONE without torchrun's environment; else the process group is
    initialised (backend: the profile's, or nccl on a CUDA device and gloo on the CPU). `expected_size`:
    nproc_per_node x nnodes of the profile's launch, refused when torchrun's WORLD_SIZE differs."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if expected_size is not None and size != expected_size:
        raise LaunchError(f"quantize.launch asks for {expected_size} processes, but torchrun started "
                          f"WORLD_SIZE={size}")
    if size == 1:
        return ONE
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    backend = backend or ("nccl" if device.startswith("cuda") else "gloo")  # config.BACKEND_NAMES
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    # A rank waits in a collective while another works alone (rank 0 resuming Block-AP's layers from its
    # checkpoints while the others recompute them): a long timeout. A rank that dies is torchrun's to report.
    torch.distributed.init_process_group(backend, rank=rank, world_size=size, timeout=datetime.timedelta(minutes=60))
    return World(rank=rank, size=size, local_rank=local_rank, backend=backend)


def rank_device(world: World, device: str) -> str:
    """The device this rank computes on: `cuda` becomes the rank's own GPU (cuda:LOCAL_RANK) under a launch."""
    return f"cuda:{world.local_rank}" if world.size > 1 and device == "cuda" else device


def leave(world: World) -> None:
    if world.size > 1 and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
