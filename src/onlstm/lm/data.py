"""Token streams for language modelling: :func:`batchify` (a split as ``B`` contiguous columns), the
variable-length BPTT schedule and its segments (docs/lm.md, "The recipe"); :class:`DistContext` and :func:`setup`:
several processes under ``torchrun`` (gloo on the CPU, nccl with one GPU per process), no-ops in one (docs/lm.md)."""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import NamedTuple

import torch
import torch.distributed as dist

from ..errors import WriteError
from ..runs import resolve_device


def batchify(ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """``ids`` (N,) -> (N // B, B): column ``b`` is the contiguous stretch ``ids[b*T : (b+1)*T]``."""
    if batch_size <= 0:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    rows = ids.numel() // batch_size
    if rows < 2:
        raise ValueError(
            f"a stream of {ids.numel()} tokens is too short for {batch_size} columns "
            "(each column needs at least 2 tokens); use a smaller batch size or more text"
        )
    return ids[: rows * batch_size].view(batch_size, rows).t().contiguous()


def column_share(n_columns: int, rank: int, world: int) -> tuple[int, int]:
    """``(start, stop)`` of the columns process ``rank`` of ``world`` owns (as even as possible, in order)."""
    base, extra = divmod(n_columns, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class Segment(NamedTuple):
    start: int  # first input row
    length: int  # rows of input (targets are the next rows)
    lr_scale: float  # drawn length / bptt (before clipping at the end of the stream), as the reference


def bptt_schedule(
    n_rows: int,
    bptt: int,
    seed: int,
    epoch: int,
    variable: bool = True,
    short_prob: float = 0.05,
    std: float = 5.0,
    min_len: int = 5,
) -> list[Segment]:
    """The segments of one epoch over ``n_rows`` rows. With ``variable``: each length is ``max(min_len,
    int(N(b, std)))``, ``b = bptt`` with probability ``1 - short_prob`` and ``bptt / 2`` otherwise, the last segment
    clipped to the rows left. The lengths depend on ``(seed, epoch)`` only (their own generator), so a resumed run
    and every process draw the same schedule."""
    rng, out, i = random.Random(f"onlstm-lm-bptt:{seed}:{epoch}"), [], 0
    while i < n_rows - 2:  # as the reference: every segment has at least 2 steps
        length = bptt
        if variable:
            length = max(min_len, int(rng.gauss(bptt if rng.random() >= short_prob else bptt / 2, std)))
        out.append(Segment(i, min(length, n_rows - 1 - i), length / bptt))
        i += out[-1].length
    return out


def segment(data: torch.Tensor, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``data[start : start+length]`` and targets one row later."""
    length = min(length, data.shape[0] - 1 - start)
    return data[start : start + length], data[start + 1 : start + 1 + length]


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
