"""Token streams for language modelling: :func:`batchify` (a split as ``B`` contiguous columns), the
variable-length BPTT schedule and its segments (docs/lm.md, "The recipe")."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

from ..files import same_fingerprint, sha256_file


def batchify(ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """``ids`` (N,) -> (N // B, B): column ``b`` is the contiguous stretch ``ids[b*T : (b+1)*T]``."""
    if batch_size <= 0:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    if why := too_short(ids.numel(), batch_size):
        raise ValueError(f"{why}; use a smaller batch size or more text")
    rows = ids.numel() // batch_size
    return ids[: rows * batch_size].view(batch_size, rows).t().contiguous()


def too_short(n_tokens: int, batch_size: int) -> str | None:
    """Why a stream of ``n_tokens`` cannot be cut into ``batch_size`` columns (:func:`batchify`), None if it can."""
    if n_tokens // batch_size >= 2:
        return None
    return f"a stream of {n_tokens} tokens is too short for {batch_size} columns (each column needs at least 2 tokens)"


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


#: Where a run records its training text's fingerprint: ``config.json``'s ``data`` section, under this key.
TEXT_FINGERPRINT = "train_sha256"


def same_training_text(train_file: Path, saved: dict | None, run: Path, warn: Callable[[str], None]) -> str:
    """The fingerprint of ``train_file``; on resume (``saved``: the run's ``data`` header) the text must be the one
    the run was started on: another text with the same vocabulary would go on silently with other batches. A run
    written before fingerprints were recorded is resumed with a warning (there is nothing to compare)."""
    fix = "resume with the run's own --data-dir, or train into a new --out"
    options = {"source": train_file, "run": run, "what": "training text", "fix": fix, "warn": warn}
    return same_fingerprint(sha256_file(train_file), saved, TEXT_FINGERPRINT, **options)
