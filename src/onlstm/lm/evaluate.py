"""Perplexity of a language model on a token stream, under two documented protocols.

``paper``   The paper's test protocol (the reference's ``evaluate(test_data, batch_size=1)``): the whole
            split is one stream (batch 1), read in segments of ``bptt`` (70) tokens from a zero state,
            the state carried across segments. Every token but the first is predicted. Slow: one
            sequence, no batching.
``batched`` The same split cut into ``B`` equal contiguous columns (default 10 = the reference's
            validation batch, which is how the paper's *validation* numbers are computed), read
            together; the last ``N mod B`` tokens are dropped and each column starts from a zero
            state, so ``B`` times more tokens are predicted without context: the perplexity is
            slightly higher than ``paper``'s (measured on PTB test with the CPU preset after one
            epoch: 291.41 vs 291.36). Several times faster.

With an encoder that carries no state (``stateful=False``: the Transformer) no state goes from one
segment to the next under either protocol: every segment is read afresh, so a token is predicted from at
most ``bptt`` tokens of its own segment (the first token of a segment from one). docs/encoders.md says
what this means for comparing perplexities.

Both report ``exp(total cross-entropy / tokens scored)``, with the number of tokens scored. (The
reference divides the summed loss by the stream length instead of the number of predictions:
a relative difference of ``1/T`` in the loss, 0.001% for PTB test at batch 1.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..runs.engine import Interrupted  # raised inside an evaluation when should_stop() turned true
from .data import batchify, column_share

PROTOCOLS = ("paper", "batched")


@dataclass
class Perplexity:
    loss: float  # mean cross-entropy per scored token, nats
    tokens: int  # tokens scored
    protocol: str
    batch_size: int
    bptt: int
    dropped: int = 0  # tokens at the end of the stream not in any column

    @property
    def ppl(self) -> float:
        return math.exp(self.loss) if self.loss < 700 else float("inf")

    def describe(self) -> str:
        what = "one stream, batch 1" if self.batch_size == 1 else f"{self.batch_size} columns, each from a zero state"
        drop = f", {self.dropped} tokens at the end not scored" if self.dropped else ""
        return (
            f"perplexity {self.ppl:.2f} (loss {self.loss:.4f} nats/token over {self.tokens:,} tokens; "
            f"protocol {self.protocol}: {what}, segments of {self.bptt}{drop})"
        )

    def to_dict(self) -> dict:
        return {
            "ppl": self.ppl,
            "loss": self.loss,
            "tokens": self.tokens,
            "protocol": self.protocol,
            "batch_size": self.batch_size,
            "bptt": self.bptt,
            "dropped": self.dropped,
        }


@torch.no_grad()
def stream_loss(
    model, data: torch.Tensor, bptt: int, should_stop: Callable[[], bool] | None = None, progress=None
) -> tuple[float, int]:
    """Summed cross-entropy and the number of predictions over ``data`` (T, B), read in segments of
    ``bptt`` from a zero state. ``model`` is a :class:`LanguageModel`; it is put in eval mode."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=data.device)
    count = 0
    state = None
    try:
        for i in range(0, data.shape[0] - 1, bptt):
            if should_stop is not None and should_stop():
                raise Interrupted()
            x, y = data[i : i + bptt], data[i + 1 : i + 1 + bptt]
            x = x[: y.shape[0]]
            out, state, _ = model(x, state)
            logits = model.logits(out)
            total += F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").double()
            count += y.numel()
            if progress is not None:
                progress.update(y.numel())
    finally:
        model.train(was_training)
    return float(total), count


def perplexity(
    model,
    ids: torch.Tensor,
    protocol: str = "paper",
    batch_size: int = 10,
    bptt: int = 70,
    device=None,
    progress: bool = False,
    rank: int = 0,
    world: int = 1,
    reduce=None,
    should_stop=None,
) -> Perplexity:
    """Perplexity of ``model`` on the stream ``ids`` (1-D) under ``protocol`` (``paper``: batch 1,
    ``batched``: ``batch_size`` columns). With ``world > 1`` each process scores its share of the
    columns and ``reduce(tensor)`` (an all-reduce sum) combines them."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    b = 1 if protocol == "paper" else batch_size
    if bptt <= 0:
        raise ValueError(f"bptt must be positive, got {bptt}")
    data = batchify(ids, b)
    dropped = ids.numel() - data.numel()
    start, stop = column_share(b, rank, world)
    bar = None
    if progress:
        from ..runs import progress_bar

        bar = progress_bar(
            total=(data.shape[0] - 1) * (stop - start),
            unit="tok",
            unit_scale=True,
            desc=f"eval ({protocol})",
            leave=False,
        )
    try:
        if stop > start:
            total, count = stream_loss(model, data[:, start:stop].to(device), bptt, should_stop, bar)
        else:
            total, count = 0.0, 0
    finally:
        if bar is not None:
            bar.close()
    if world > 1:
        t = torch.tensor([total, float(count)], dtype=torch.float64)
        t = reduce(t)
        total, count = float(t[0]), int(round(float(t[1])))
    return Perplexity(total / count, count, protocol, b, bptt, dropped)
