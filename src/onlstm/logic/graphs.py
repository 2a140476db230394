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
from ..graphs import CudaRecorder, EagerRecorder, GraphedSteps

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


class LogicStepGraphs(GraphedSteps):
    """``logic train``'s step as graphs, one per padded length; :meth:`step` leaves the clipped gradients in the
    parameters' ``.grad`` (the caller steps the optimizer) and returns the batch's mean loss and the pairs it got
    right (device tensors), or None when the step must run eagerly."""

    def __init__(
        self, model, clip: float, batch_size: int, recorder: CudaRecorder | EagerRecorder, log: Callable[[str], None]
    ):
        super().__init__(list(model.parameters()), clip, recorder, log)
        self.model, self.batch_size = model, batch_size
        self.loss = self.params[0].new_zeros((), dtype=torch.float32)
        self.correct = self.loss.new_zeros((), dtype=torch.int64)

    def step(self, batch: tuple[Tensor, ...]) -> tuple[Tensor, Tensor] | None:
        """One batch as :func:`onlstm.logic.model.collate` makes it (on the CPU)."""
        a, a_lengths, b, b_lengths, y = batch
        if self.off is not None or len(y) != self.batch_size:
            return None
        tokens, lengths = padded_pairs(a, a_lengths, b, b_lengths, LENGTH_BUCKET)
        T = tokens.shape[0]
        self.staged(T, (tokens, lengths, y), self.loss.device)  # each length's tokens, lengths, labels
        self.run(T, lambda: self._body(T), f"a step of {T} tokens")
        return self.loss.clone(), self.correct.clone()

    def _body(self, T: int) -> None:
        tokens, lengths, y = self.inputs[T]
        logits = self.model.padded_logits(tokens, lengths)
        loss = F.cross_entropy(logits, y)
        self.gradients(loss)
        with torch.no_grad():
            self.loss.copy_(loss)
            self.correct.copy_((logits.argmax(-1) == y).sum())


def step_graphs(cfg, model, device: torch.device, log: Callable[[str], None]) -> LogicStepGraphs | None:
    """The step as graphs when ``cfg.cuda_graphs`` asks and the device and encoder allow, else None (eager)."""
    if not cfg.cuda_graphs or device.type not in shared.GRAPH_DEVICES:
        return None
    if cfg.precision != "fp32":  # the graphs record float32 steps
        log(f"CUDA graphs off: they record float32 steps, and precision is {cfg.precision}; training eagerly")
        return None
    if model.config.cell not in GRAPH_CELLS:
        log(
            f"CUDA graphs off: the {model.config.cell!r} encoder is not among {', '.join(GRAPH_CELLS)}; training eagerly"
        )
        return None
    return LogicStepGraphs(model, cfg.clip, cfg.batch_size, shared.recorder_for(device), log)
