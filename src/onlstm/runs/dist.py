"""Several processes under ``torchrun`` (gloo on the CPU, nccl with one GPU per process), no-ops in one:
:class:`DistContext` and :func:`setup` (docs/lm.md); the engine's ``agree`` and the main process's writes."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ..device import resolve_device
from ..errors import WriteError


@dataclass
class DistContext:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if not self.distributed:
            return t
        x = t.to(self.device)
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x.to(t.device)

    def any(self, flag: bool) -> bool:
        """True on every process if ``flag`` is true on any (used to stop all processes at the same step)."""
        if not self.distributed:  # asked after every step: one process needs no tensor
            return flag
        return bool(self.all_reduce_sum(torch.tensor([float(flag)]))[0] > 0)

    def gather_columns(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """Concatenate every process's ``t`` along ``dim`` in rank order (equal shapes required)."""
        if not self.distributed:
            return t
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts, dim=dim)

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def main_writes(self, write: Callable[[], object]) -> None:
        """``write()`` on the first process, which writes the run's files; when the disk refuses it, every process
        raises a :class:`WriteError` together (one line each, exit 4) instead of the others failing in their next
        collective with a traceback (gloo), or waiting there for a process that has left (a backend that does not
        notice)."""
        error = None
        if self.is_main:
            try:
                write()
            except WriteError as exc:
                error = exc
        if self.any(error is not None):
            if error is None:
                error = WriteError(None, OSError(errno.EIO, "the first process could not write the run's files"))
                error.message = (
                    f"process {self.rank}: the first process could not write the run's files (its line says why)"
                )
            raise error


def setup(device: str = "auto") -> DistContext:
    """Join the process group when started by torchrun (``WORLD_SIZE`` > 1); otherwise a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext(device=resolve_device(device))
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", timeout=timedelta(hours=2))
    return DistContext(rank, world, dev)


def teardown() -> None:
    """Leave the process group, if this process joined one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
