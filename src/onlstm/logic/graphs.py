"""CUDA graphs for ``logic train``'s step (issue #49; docs/logic.md, "Training on a GPU").

The eager step packs a batch's formulas, so its shape follows their lengths and no two batches share one. With
graphs, a batch is laid out padded instead: both formulas of every pair as columns of one ``(T, 2B)`` block, ``T``
rounded up to a multiple of :data:`LENGTH_BUCKET`, so a handful of shapes cover every batch, one graph each. The
encoder reads the padded block and each formula's encoding is the output at its last token: what the packed run
ends with, for the recurrent encoders of :data:`GRAPH_CELLS` (causal, their final state their output). A graph holds
the forward pass, the loss, the backward pass and the clipping; Adam's step stays outside (its learning rate
follows the plateau schedule). A batch smaller than the batch size (a pass's last) runs eagerly.

The embeddings' dropout is drawn over the padded block (the eager step draws it over the real tokens only), so the
masks are not the eager run's; given the same masks (no embedding dropout), the graphs train what the eager step
trains (tests/logic/test_logic_graphs.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import graphs as shared
from ..graphs import CudaRecorder, EagerRecorder

#: Formula lengths are rounded up to a multiple of this: the graphs' shapes.
LENGTH_BUCKET = 8
#: The encoders whose output at a formula's last token is the final state the classifier reads.
GRAPH_CELLS = ("onlstm", "lstm-std", "lstm", "gru", "rnn")


def padded_pairs(a: Tensor, a_lengths: Tensor, b: Tensor, b_lengths: Tensor, bucket: int) -> tuple[Tensor, Tensor]:
    """Both formulas of ``B`` pairs as the columns of one ``(T, 2B)`` block of token ids (the first formulas first,
    zeros after each formula), ``T`` the longer formula rounded up to a multiple of ``bucket``; and the lengths."""
    n, longest = a.shape[1], max(a.shape[0], b.shape[0])
    tokens = a.new_zeros(-(-longest // bucket) * bucket, 2 * n)
    tokens[: a.shape[0], :n], tokens[: b.shape[0], n:] = a, b
    return tokens, torch.cat([a_lengths, b_lengths])


class LogicStepGraphs:
    """``logic train``'s step as graphs, one per padded length; :meth:`step` leaves the clipped gradients in the
    parameters' ``.grad`` (the caller steps the optimizer) and returns the batch's mean loss and the pairs it got
    right (device tensors), or None when the step must run eagerly."""

    def __init__(
        self, model, clip: float, batch_size: int, recorder: CudaRecorder | EagerRecorder, log: Callable[[str], None]
    ):
        self.model, self.clip, self.batch_size, self.recorder, self.log = model, clip, batch_size, recorder, log
        self.params = list(model.parameters())
        self.grads = [torch.zeros_like(p) for p in self.params]
        self.loss = self.params[0].new_zeros((), dtype=torch.float32)
        self.correct = self.loss.new_zeros((), dtype=torch.int64)
        self.inputs: dict[int, tuple[Tensor, Tensor, Tensor]] = {}  # each length's tokens, lengths, labels
        self.replays: dict[int, Callable[[], None]] = {}
        self.replayed = 0
        self.off: str | None = None

    @property
    def lengths(self) -> list[int]:
        return sorted(self.replays)

    def step(self, batch: tuple[Tensor, ...]) -> tuple[Tensor, Tensor] | None:
        """One batch as :func:`onlstm.logic.model.collate` makes it (on the CPU)."""
        a, a_lengths, b, b_lengths, y = batch
        if self.off is not None or len(y) != self.batch_size:
            return None
        tokens, lengths = padded_pairs(a, a_lengths, b, b_lengths, LENGTH_BUCKET)
        for p, g in zip(self.params, self.grads):
            p.grad = g  # the optimizer reads them; an eager step in between may have replaced them
        T = tokens.shape[0]
        if T in self.replays:
            for buffer, value in zip(self.inputs[T], (tokens, lengths, y)):
                buffer.copy_(value, non_blocking=True)
            self.replays[T]()
            self.replayed += 1
        else:
            self._first(T, [t.to(self.loss.device) for t in (tokens, lengths, y)])
        return self.loss.clone(), self.correct.clone()

    def _first(self, T: int, inputs: list[Tensor]) -> None:
        """A new length: the step run eagerly (the warm-up), then its graph recorded for the next batches."""
        self.inputs[T] = (inputs[0], inputs[1], inputs[2])

        def body() -> None:
            self._body(T)

        self.recorder.warm(body)
        try:
            self.replays[T] = self.recorder.record(body)
        except Exception as exc:  # the warm-up already made this step; the next ones run eagerly
            self.off = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
            self.replays.clear()
            self.log(f"CUDA graphs off for the rest of this run: recording a step of {T} tokens failed "
                     f"({self.off}); training eagerly (--no-cuda-graphs says so from the start)")  # fmt: skip

    def _body(self, T: int) -> None:
        tokens, lengths, y = self.inputs[T]
        logits = self.model.padded_logits(tokens, lengths)
        loss = F.cross_entropy(logits, y)
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        for buffer, g in zip(self.grads, grads):
            buffer.copy_(g) if g is not None else buffer.zero_()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        with torch.no_grad():
            self.loss.copy_(loss)
            self.correct.copy_((logits.argmax(-1) == y).sum())


def step_graphs(cfg, model, device: torch.device, log: Callable[[str], None]) -> LogicStepGraphs | None:
    """The step as graphs when ``cfg.cuda_graphs`` asks and the device and encoder allow, else None (eager)."""
    if not cfg.cuda_graphs or device.type not in shared.GRAPH_DEVICES:
        return None
    if model.config.cell not in GRAPH_CELLS:
        log(
            f"CUDA graphs off: the {model.config.cell!r} encoder is not among {', '.join(GRAPH_CELLS)}; training eagerly"
        )
        return None
    return LogicStepGraphs(model, cfg.clip, cfg.batch_size, shared.recorder_for(device), log)
