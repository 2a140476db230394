"""CUDA graphs for ``lm train``'s step (issue #49; docs/lm.md, "Training on a GPU").

Eagerly, one step of the paper's model launches thousands of small kernels (each layer's time loop, forward and
backward) and the GPU idles between them while Python prepares the next. On CUDA the trainer records the step as
a CUDA graph, one per segment length, and replays it: forward, loss, backward and gradient clipping in one launch.
What a graph reads and writes lives outside it, in buffers made once: its own token buffers, the carried state
(shared by every graph), the gradients (each parameter's ``.grad``) and the loss. The optimizer's step stays
outside, eager: its learning rate changes with each segment's length.

A length's first step runs the same body eagerly on a side stream (the warm-up that lazy initialisation and
Triton's compilation need before a capture); that step is a real training step, then the graph is recorded for
the next segments of that length. Dropout and DropConnect masks are drawn inside the graph from the CUDA
generator, which CUDA graphs advance at every replay as an eager step would advance it, so a run with graphs
draws the masks the eager run draws. If recording fails, the run says so once and trains eagerly from then on.

:class:`~onlstm.graphs.EagerRecorder` stands in for CUDA's recorder on any device: the "graph" is the body run
again, so the buffers' bookkeeping is tested on the CPU (tests/lm/test_lm_graphs.py); the capture itself on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .. import graphs as shared
from ..graphs import CudaRecorder, EagerRecorder, GraphedSteps, Graphs

#: ``(x, y, state) -> (loss, raw loss, new state)``: the objective of one segment (the state: nested tuples/lists).
Objective = Callable[[Tensor, Tensor, Any], tuple[Tensor, Tensor, Any]]


def step_graphs(cfg, ctx, model: torch.nn.Module, objective: Objective, log: Callable[[str], None]):
    """The trainer's step as graphs when ``cfg.cuda_graphs`` asks and the device allows, else None (eager)."""
    if not cfg.cuda_graphs or ctx.device.type not in shared.GRAPH_DEVICES:
        return None
    if ctx.distributed:
        log("CUDA graphs off: not recorded across processes (torchrun); training eagerly")
        return None
    autocast = torch.bfloat16 if cfg.precision == "bf16" else None
    params = list(model.parameters())
    recorder = shared.recorder_for(ctx.device)
    return StepGraphs(objective, params, cfg.clip, autocast, recorder, log, model.stateful)


class StepGraphs(GraphedSteps):
    """The training step of :class:`~onlstm.lm.train.Trainer` as graphs, one per segment length.

    :meth:`step` runs forward, loss, backward and clipping for one segment and leaves the clipped gradients in the
    parameters' ``.grad`` (the caller steps the optimizer); it returns the raw loss (a fresh tensor), or None when
    the step must run eagerly: the run's first step, whose state gives the carried state's layout, and every step
    after a failed recording. :attr:`state` is the carried state after the step."""

    def __init__(
        self,
        objective: Objective,
        params: list[Tensor],
        clip: float,
        autocast: torch.dtype | None,
        recorder: CudaRecorder | EagerRecorder,
        log: Callable[[str], None],
        stateful: bool = True,
    ):
        super().__init__(params, clip, recorder, log)
        self.objective, self.autocast = objective, autocast
        self.stateful = stateful  # False: the layers start afresh at every segment (no state to carry)
        self.raw = params[0].new_zeros((), dtype=torch.float32)
        self.state: Any = None  # the carried state's buffers, made from the first eager step's state

    def step(self, x: Tensor, y: Tensor, state: Any) -> Tensor | None:
        if self.off is not None or (self.stateful and state is None and self.state is None):
            return None
        self._take_state(state)
        length = x.shape[0]
        self.staged(length, (x, y), x.device)
        self.run(length, lambda: self._body(length), f"a {length}-token step")
        return self.raw.clone()

    def _body(self, length: int) -> None:
        """What a graph holds: forward and loss, the gradients into ``.grad``, clipping, the state and loss out."""
        x, y = self.inputs[length]
        device = x.device.type
        with torch.autocast(device, dtype=self.autocast or torch.bfloat16, enabled=self.autocast is not None,
                            cache_enabled=False):  # fmt: skip
            loss, raw, new_state = self.objective(x, y, self.state)
        self.gradients(loss)
        with torch.no_grad():
            _copy_state(self.state, new_state)
            self.raw.copy_(raw)

    def _take_state(self, state: Any) -> None:
        if self.stateful:
            self.state = take_state(self.state, state)


class ForwardGraph(Graphs):
    """Evaluation's segment (forward, the summed cross-entropy, the new state) as one CUDA graph of one shape.

    :meth:`__call__` returns ``(summed loss, state)``, or None when the segment must run eagerly: the stream's first
    (its zero state gives the state's layout) and every one after a failed recording (which turns the graph off
    quietly: evaluation is correct either way). The first call with a state runs the body eagerly (the warm-up)
    and records it; later calls replay it."""

    def __init__(self, model: torch.nn.Module, recorder: CudaRecorder | EagerRecorder):
        super().__init__(recorder)
        self.model = model
        self.state: Any = None
        self.loss = next(model.parameters()).new_zeros((), dtype=torch.float32)  # the segment's summed loss, out

    def __call__(self, x: Tensor, y: Tensor, state: Any) -> tuple[Tensor, Any] | None:
        stateful = self.model.stateful
        if self.off is not None or (stateful and state is None and self.state is None):
            return None
        if stateful:
            self.state = take_state(self.state, state)
        length = x.shape[0]
        self.staged(length, (x, y), x.device)
        self.run(length, lambda: self._body(length), "an evaluation segment")
        return self.loss.clone(), self.state

    @torch.no_grad()
    def _body(self, length: int) -> None:
        x, y = self.inputs[length]
        loss, new_state = segment_loss(self.model, x, y, self.state)
        self.loss.copy_(loss)
        _copy_state(self.state, new_state)


def segment_loss(model: torch.nn.Module, x: Tensor, y: Tensor, state: Any) -> tuple[Tensor, Any]:
    """The summed cross-entropy of one segment's predictions ``y`` from tokens ``x``, and the state after it:
    evaluation's step, eager (``lm/evaluate.py``) or in :class:`ForwardGraph`."""
    out, new_state, _ = model(x, state)
    logits = model.logits(out)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")
    return loss, new_state


def take_state(buffers: Any, state: Any) -> Any:
    """The carried ``state`` put into ``buffers`` (made like it at the first call, zeroed for None: a new epoch or
    stream; copied when it comes from elsewhere: an eager step, a resume); returns the buffers."""
    if buffers is None:
        buffers = _buffers_like(state)
    if state is None:
        _zero_state(buffers)
    elif state is not buffers:
        with torch.no_grad():
            _copy_state(buffers, state)
    return buffers


def _buffers_like(state: Any) -> Any:
    if isinstance(state, Tensor):
        return torch.zeros_like(state, dtype=torch.float32 if state.is_floating_point() else state.dtype)
    if state is None:
        return None
    return type(state)(_buffers_like(s) for s in state)


def _zero_state(state: Any) -> None:
    if isinstance(state, Tensor):
        state.zero_()
    elif state is not None:
        for s in state:
            _zero_state(s)


def _copy_state(into: Any, values: Any) -> None:
    if isinstance(into, Tensor):
        into.copy_(values)
    elif into is not None:
        for a, b in zip(into, values, strict=True):
            _copy_state(a, b)
