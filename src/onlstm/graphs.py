"""Recording a training step as a CUDA graph, for every trainer that replays one (``lm/graphs.py``,
``logic/graphs.py``; issue #49): :class:`CudaRecorder` on CUDA, :class:`EagerRecorder` everywhere else (its
"graph" runs the body again, so that the trainers' bookkeeping around their graphs is tested on the CPU)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

# Devices where the trainers record their steps (a module constant so that a test can add the CPU, where
# EagerRecorder stands in for CUDA's).
GRAPH_DEVICES = ("cuda",)


class CudaRecorder:
    """Records a body as a CUDA graph; every graph allocates from one memory pool (safe here: a graph's results
    are copied into buffers made outside the pool before it ends, so no graph reads another's memory)."""

    def __init__(self, device: torch.device):
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device)

    def warm(self, body: Callable[[], None]) -> None:
        """Run ``body`` eagerly on the side stream that captures use (a real step)."""
        current = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            body()
        current.wait_stream(self.stream)

    def record(self, body: Callable[[], None]) -> Callable[[], None]:
        """Capture ``body`` (nothing runs) and return the replay. A capture that fails leaves the default CUDA
        generator marked as capturing (the capture's end, which unmarks it, is what raised), and every random
        draw after it would fail ("Offset increment outside graph capture"): its state from before is put back."""
        generator = torch.cuda.default_generators[self.stream.device.index or 0]
        before = generator.clone_state()
        graph = torch.cuda.CUDAGraph()
        compiled: list[str] = []
        try:
            with triton_compiles(compiled), torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                body()
        except BaseException as exc:
            generator.graphsafe_set_state(before)
            if compiled and isinstance(exc, Exception):
                raise RuntimeError(compiled_during_capture(exc, compiled)) from exc
            raise
        return graph.replay


def compiled_during_capture(exc: BaseException, compiled: list[str]) -> str:
    """A failed capture's first line, and the Triton kernels compiled inside it: loading a new kernel is an operation
    a capture forbids, so a kernel first met there (not in the warm-up) is a likely cause (issue #49)."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{first} (Triton compiled {', '.join(dict.fromkeys(compiled))} during the capture)"


def _triton_runtime_knobs() -> Any:
    """Triton's runtime settings where they have the hook called before each kernel compile, else None."""
    try:
        from triton import knobs
    except ImportError:
        return None
    return knobs.runtime if hasattr(knobs.runtime, "jit_cache_hook") else None


@contextlib.contextmanager
def triton_compiles(seen: list[str]) -> Iterator[None]:
    """Inside, the name of every Triton kernel compiled is appended to ``seen`` (a hook set and then restored; a hook
    already set still runs, and its answer is kept: a true one skips the compile)."""
    knobs = _triton_runtime_knobs()
    if knobs is None:
        yield
        return
    before = knobs.jit_cache_hook

    def hook(*args: Any, **kwargs: Any) -> Any:
        seen.append(str(kwargs.get("repr", "a kernel")).split("[", 1)[0])
        return before(*args, **kwargs) if before else None

    knobs.jit_cache_hook = hook
    try:
        yield
    finally:
        knobs.jit_cache_hook = before


class EagerRecorder:
    """The recorder's contract without CUDA: warming runs the body, a "replay" runs it again."""

    def warm(self, body: Callable[[], None]) -> None:
        body()

    def record(self, body: Callable[[], None]) -> Callable[[], None]:
        return body


def recorder_for(device: torch.device) -> CudaRecorder | EagerRecorder:
    return CudaRecorder(device) if device.type == "cuda" else EagerRecorder()


class Graphs:
    """One graph per shape key, recorded at the key's first call (the body run eagerly first: the warm-up, a real
    call) and replayed after; a failed recording turns the graphs off for good (:attr:`off` says why) and
    :meth:`failed` is told once. Evaluation's forward graph (``lm/graphs.py``) turns off quietly: it is correct
    either way."""

    def __init__(self, recorder: CudaRecorder | EagerRecorder):
        self.recorder = recorder
        self.replays: dict[int, Callable[[], None]] = {}
        self.inputs: dict[int, tuple[torch.Tensor, ...]] = {}  # each key's input buffers (see staged)
        self.replayed = 0  # calls that replayed a graph
        self.off: str | None = None  # why the graphs were turned off, once they were

    @property
    def lengths(self) -> list[int]:
        """The shape keys recorded so far (a segment's or a padded batch's length)."""
        return sorted(self.replays)

    def staged(self, key: int, values: tuple[torch.Tensor, ...], device: torch.device) -> None:
        """``values`` copied into ``key``'s input buffers (on ``device``), which the key's first call makes: a graph
        reads its inputs from the addresses it was recorded with."""
        if key in self.inputs:
            for buffer, value in zip(self.inputs[key], values):
                buffer.copy_(value, non_blocking=True)
        else:
            self.inputs[key] = tuple(v.to(device, copy=True) for v in values)

    def run(self, key: int, body: Callable[[], None], what: str) -> None:
        """One call: ``key``'s graph replayed, or ``body`` run and recorded (``what``: the call, for the log)."""
        if key in self.replays:
            self.replays[key]()
            self.replayed += 1
            return
        self.recorder.warm(body)
        try:
            self.replays[key] = self.recorder.record(body)
        except Exception as exc:  # the warm-up already made this call; the next ones run eagerly
            self.off = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
            self.replays.clear()
            self.failed(what)

    def failed(self, what: str) -> None:
        """Told once, when recording ``what`` failed and the graphs turned off."""


class GraphedSteps(Graphs):
    """What every trainer's graphs share: :class:`Graphs` for training steps, with the gradient buffers (each
    parameter's ``.grad``, which the optimizer reads); a failed recording is said once through ``log``."""

    def __init__(self, params: list[torch.Tensor], clip: float, recorder: CudaRecorder | EagerRecorder, log):
        super().__init__(recorder)
        self.params, self.clip, self.log = params, clip, log
        self.grads = [torch.zeros_like(p) for p in params]

    def run(self, key: int, body: Callable[[], None], what: str) -> None:
        for p, g in zip(self.params, self.grads):
            p.grad = g  # an eager step in between may have replaced them
        super().run(key, body, what)

    def failed(self, what: str) -> None:
        self.log(f"CUDA graphs off for the rest of this run: recording {what} failed ({self.off}); training "
                 "eagerly (--no-cuda-graphs says so from the start)")  # fmt: skip

    def gradients(self, loss: torch.Tensor) -> None:
        """Inside a body: the gradients of ``loss`` into the buffers, clipped at ``clip`` (0: not)."""
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        for buffer, g in zip(self.grads, grads):
            buffer.copy_(g) if g is not None else buffer.zero_()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
