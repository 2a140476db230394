"""Perplexity of a language model on a token stream (:func:`perplexity`) under the protocols of docs/lm.md
("Evaluation protocols"): ``paper`` (one stream, batch 1, the state carried), ``batched`` (``B`` columns)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from ..device import evaluating
from ..models.language_model import stream_words
from ..progress import progress_bar
from ..runs.dist import DistContext
from ..runs.engine import Interrupted  # raised inside an evaluation when should_stop() turned true
from .data import batchify, column_share
from .graphs import ForwardGraph, segment_loss

PROTOCOLS = ("paper", "batched")


@dataclasses.dataclass
class Perplexity:
    loss: float  # mean cross-entropy per scored token, nats
    tokens: int  # tokens scored
    protocol: str
    batch_size: int
    bptt: int
    dropped: int = 0  # tokens at the end of the stream not in any column
    stream: int = 0  # tokens in the columns (scored ones and the first of each column): the authors' divisor

    @property
    def ppl(self) -> float:
        return exp_loss(self.loss)

    @property
    def authors_loss(self) -> float:
        """The loss as the authors' ``evaluate()`` reports it: the same summed loss divided by the length of the
        stream read (every token in the columns, ``tokens + batch_size``), not by the tokens scored: the first
        token of each column is read but never predicted."""
        return self.loss * self.tokens / self.stream if self.stream else self.loss

    @property
    def authors_ppl(self) -> float:
        return exp_loss(self.authors_loss)

    def describe(self) -> str:
        what = stream_words(self.batch_size)
        drop = f", {self.dropped} tokens at the end not scored" if self.dropped else ""
        return (
            f"perplexity {self.ppl:.2f} (loss {self.loss:.4f} nats/token over {self.tokens:,} tokens; "
            f"protocol {self.protocol}: {what}, segments of {self.bptt}{drop}); the authors' evaluate() prints "
            f"{self.authors_ppl:.2f} (it divides the same summed loss by the {self.stream:,} tokens read, the "
            "first of each column included, which is never predicted)"
        )

    def to_dict(self) -> dict:
        return {"ppl": self.ppl, **dataclasses.asdict(self), "authors_ppl": self.authors_ppl,
                "authors_loss": self.authors_loss}  # fmt: skip


def exp_loss(loss: float) -> float:
    """The perplexity of a mean loss: infinite where ``exp`` overflows (a diverged run), never a capped number."""
    return math.exp(loss) if loss < 700 else float("inf")


@torch.no_grad()
def stream_loss(
    model, data: torch.Tensor, bptt: int, should_stop: Callable[[], bool] | None = None, progress=None, recorder=None
) -> tuple[float, int]:
    """Summed cross-entropy and the number of predictions over ``data`` (T, B), read in segments of
    ``bptt`` from a zero state. ``model`` is a :class:`LanguageModel`, read in eval mode (its mode given back). With a
    ``recorder`` (:mod:`onlstm.lm.graphs`), the segments of ``bptt`` tokens replay one CUDA graph."""
    count, state, total = 0, None, data.new_zeros((), dtype=torch.float64)
    graph = ForwardGraph(model, recorder) if recorder is not None else None
    with evaluating(model):
        for i in range(0, data.shape[0] - 1, bptt):
            if should_stop is not None and should_stop():
                raise Interrupted()
            y = data[i + 1 : i + 1 + bptt]
            x = data[i : i + y.shape[0]]
            done = graph(x, y, state) if graph is not None and y.shape[0] == bptt else None
            loss, state = done if done is not None else segment_loss(model, x, y, state)
            total += loss.double()
            count += y.numel()
            if progress is not None:
                progress.update(y.numel())
    return float(total), count


def perplexity(
    model,
    ids: torch.Tensor,
    protocol: str = "paper",
    batch_size: int = 10,
    bptt: int = 70,
    device=None,
    progress: bool = False,
    ctx: DistContext | None = None,
    should_stop=None,
    recorder=None,
) -> Perplexity:
    """Perplexity of ``model`` on the stream ``ids`` (1-D) under ``protocol`` (``paper``: batch 1, ``batched``:
    ``batch_size`` columns). With ``ctx``, a :class:`~onlstm.runs.dist.DistContext` of several processes, each
    scores its share of the columns and the sums are added up; ``should_stop()`` true raises Interrupted;
    ``recorder``: see :func:`stream_loss`."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if bptt <= 0:
        raise ValueError(f"bptt must be positive, got {bptt}")
    b = 1 if protocol == "paper" else batch_size
    data = batchify(ids, b)
    start, stop = column_share(b, ctx.rank, ctx.world) if ctx is not None else (0, b)
    total, count = 0.0, 0
    opts = dict(total=(data.shape[0] - 1) * (stop - start), unit="tok", unit_scale=True, leave=False)
    with progress_bar(progress, desc=f"eval ({protocol})", **opts) as bar:
        if stop > start:
            total, count = stream_loss(model, data[:, start:stop].to(device), bptt, should_stop, bar, recorder)
    if ctx is not None and ctx.distributed:
        t = ctx.all_reduce_sum(torch.tensor([total, float(count)], dtype=torch.float64))
        total, count = float(t[0]), int(round(float(t[1])))
    return Perplexity(total / count, count, protocol, b, bptt, ids.numel() - data.numel(), data.numel())


#: The header of lm-zoo's ``get-surprisals`` output, which ``onlstm lm surprisal`` writes.
SURPRISAL_HEADER = ("sentence_id", "token_id", "token", "surprisal")


def surprisal_table(tokens: list[list[str]], bits: list[torch.Tensor], vocab) -> tuple[str, int]:
    """The TSV of ``lm surprisal`` (sentence and token ids from 1; a word outside ``vocab`` written as ``<unk>``,
    what the model read) and how many tokens were unknown. A tab or newline cannot occur in a token (they are
    split on whitespace)."""
    from ..data.vocab import UNK

    lines, unknown = ["\t".join(SURPRISAL_HEADER)], 0
    for i, (words, values) in enumerate(zip(tokens, bits), start=1):
        for j, (word, value) in enumerate(zip(words, values.tolist()), start=1):
            if word not in vocab:
                word, unknown = UNK, unknown + 1
            lines.append(f"{i}\t{j}\t{word}\t{value:.6f}")
    return "\n".join(lines) + "\n", unknown
