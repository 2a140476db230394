"""The kernel interface of the ON-LSTM layer (:class:`LayerKernel`) and the registry ``impl=`` chooses from:
``register_kernel``, ``resolve_impl``, ``kernel_status`` (docs/design.md §1.7 and §4.3, docs/layer.md).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Any, Protocol

import torch
from torch import Tensor

from ..errors import exception_line, first_line
from .functional import check_batch_sizes


class _Record:
    """The records below unpack like tuples, in field order (``x, w_ih, ..., inclusive = inputs``)."""

    def __iter__(self) -> Iterator[Any]:
        return (getattr(self, f.name) for f in fields(self))  # type: ignore[arg-type]


@dataclass(frozen=True)
class KernelInputs(_Record):
    """What a kernel runs on: one layer, one direction, a whole sequence in PyTorch's packed layout.

    Shapes (``N = sum(batch_sizes)`` rows, ``B = batch_sizes[0]``, hidden ``D``, ``G = 4D + 2D/chunk``):
    ``x (N, I)``, ``w_ih (G, I)``, ``w_hh (G, D)``, ``bias (G,)`` (``b_ih + b_hh``) or ``None``,
    ``h0, c0 (B, D)``, ``batch_sizes`` a CPU int64 tensor, non-increasing; the rows of step ``t``
    are contiguous. ``inclusive`` selects ``master_input='reverse'`` (inclusive suffix sum) over
    ``'paper'``. Gate row layout and the equations: :mod:`onlstm.nn.functional`.
    """

    x: Tensor
    w_ih: Tensor
    w_hh: Tensor
    bias: Tensor | None
    h0: Tensor
    c0: Tensor
    batch_sizes: Tensor
    chunk: int
    inclusive: bool


@dataclass(frozen=True)
class KernelOutputs(_Record):
    """``out (N, D)``, ``h_n, c_n (B, D)`` (each row's state after its own last step), ``dist (N, 2)`` (master-forget,
    master-input distance); ``saved``: the tensors ``backward`` needs (``out`` among them if it reads it)."""

    out: Tensor
    h_n: Tensor
    c_n: Tensor
    dist: Tensor
    saved: tuple[Tensor, ...]


@dataclass(frozen=True)
class OutputGrads(_Record):
    """The gradients arriving at the outputs, contiguous: ``dist`` is ``None`` when the distances
    were not used."""

    out: Tensor
    h_n: Tensor
    c_n: Tensor
    dist: Tensor | None


@dataclass(frozen=True)
class KernelGrads(_Record):
    """The gradients of the inputs (``bias``: of ``b_ih + b_hh``; dropped by the wrapper without bias)."""

    x: Tensor
    w_ih: Tensor
    w_hh: Tensor
    bias: Tensor
    h0: Tensor
    c0: Tensor


class LayerKernel(Protocol):
    """One ON-LSTM layer, one direction, over a whole sequence: forward and a hand-written backward."""

    def forward(self, inputs: KernelInputs) -> KernelOutputs: ...

    def backward(self, inputs: KernelInputs, saved: tuple[Tensor, ...], grads: OutputGrads) -> KernelGrads:
        """``saved`` is ``forward``'s ``KernelOutputs.saved`` for the same inputs."""
        ...


def sequence_lengths(bs: list[int]) -> Tensor:
    """The length (B,) of every sequence of a packed batch with step sizes ``bs`` (rows drop out from the end)."""
    return (torch.tensor(bs).unsqueeze(0) > torch.arange(bs[0]).unsqueeze(1)).sum(1)


def reversed_rows(bs: list[int]) -> Tensor:
    """The permutation (N,) of packed rows that reads every sequence backwards within its own length: the input
    and output order of a layer's reverse direction."""
    sizes, rows = torch.tensor(bs), torch.arange(bs[0])  # (T,), (B,)
    backwards = (sequence_lengths(bs) - 1 - torch.arange(len(bs)).unsqueeze(1)).clamp(min=0)  # (T, B): step read at t
    return (torch.tensor(step_offsets(bs))[backwards] + rows)[rows < sizes.unsqueeze(1)]


def last_rows(bs: list[int], device: torch.device | str = "cpu") -> Tensor:
    """The packed row (B,) of each sequence's last step."""
    return index_on(torch.tensor(step_offsets(bs))[sequence_lengths(bs) - 1] + torch.arange(bs[0]), device)


def index_on(index: Tensor, device: torch.device | str) -> Tensor:
    """A row index built on the CPU, on ``device``. To CUDA it goes from pinned memory without waiting: a copy
    from pageable memory waits for the GPU's queued work, here once per layer and direction of every forward."""
    if torch.device(device).type == "cuda":
        pinned = index.pin_memory()
        if torch.cuda.is_current_stream_capturing():  # a CUDA graph's replays read this host memory again
            _CAPTURED_INDICES.append(pinned)
        return pinned.to(device, non_blocking=True)
    return index.to(device)


#: Host buffers of row indices copied inside a CUDA-graph capture, kept for the graphs' lifetime (a few ints each).
_CAPTURED_INDICES: list[Tensor] = []


def step_offsets(bs: list[int]) -> list[int]:
    """The first packed row of every step, then the number of rows."""
    return list(itertools.accumulate(bs, initial=0))


def previous_h(h0: Tensor, out: Tensor, bs: list[int]) -> Tensor:
    """For every packed row, the ``h`` its step read: ``h0`` at step 0, else its own row of the step before.

    One split rather than a slice per step: under autograd the backward of ``T`` slices would build ``T``
    zero-filled gradients of the whole ``out``, quadratic in the length; a split's backward is one concatenation.
    """
    return torch.cat([h0[: bs[0]]] + [s[:b] for s, b in zip(out.split(bs), bs[1:])])


class _KernelFunction(torch.autograd.Function):
    """Autograd wrapper around a kernel's whole-sequence forward and hand-written backward."""

    @staticmethod
    def forward(ctx: Any, kernel: LayerKernel, chunk: int, inclusive: bool, *tensors: Any) -> tuple[Tensor, ...]:
        # the tensors one by one (autograd tracks arguments, not a record's fields): KernelInputs' order
        x, w_ih, w_hh, bias, h0, c0, batch_sizes = tensors
        result = kernel.forward(KernelInputs(x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive))
        ctx.save_for_backward(*tensors, *result.saved)
        ctx.config = (kernel, chunk, inclusive)
        # a kernel's outputs may be slices of its buffers; returned as views, autograd would refuse any in-place
        # change of them (several outputs of one node that are views), which nn.LSTM's outputs allow
        outs = (result.out, result.h_n, result.c_n, result.dist)
        return tuple(t.detach() if t._is_view() else t for t in outs)

    @staticmethod
    def backward(
        ctx: Any, g_out: Tensor | None, g_hn: Tensor | None, g_cn: Tensor | None, g_dist: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        if torch.is_grad_enabled():  # create_graph=True: these gradients will be differentiated again
            return _differentiable_backward(ctx, (g_out, g_hn, g_cn, g_dist))
        x, w_ih, w_hh, bias, h0, c0, batch_sizes, *saved = ctx.saved_tensors
        kernel, chunk, inclusive = ctx.config
        inputs = KernelInputs(x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive)
        g = kernel.backward(inputs, tuple(saved), output_grads(inputs, g_out, g_hn, g_cn, g_dist))
        return None, None, None, g.x, g.w_ih, g.w_hh, (g.bias if bias is not None else None), g.h0, g.c0, None


def output_grads(
    inputs: KernelInputs, g_out: Tensor | None, g_hn: Tensor | None, g_cn: Tensor | None, g_dist: Tensor | None
) -> OutputGrads:
    """The gradients arriving at a layer's outputs as a kernel's backward takes them: contiguous (a gradient may be a
    slice of the caller's), zeros for an output autograd gave none (``None``: not used), except the distances'."""
    x, w_hh, h0, c0 = inputs.x, inputs.w_hh, inputs.h0, inputs.c0
    return OutputGrads(
        out=x.new_zeros(x.shape[0], w_hh.shape[1]) if g_out is None else g_out.contiguous(),
        h_n=torch.zeros_like(h0) if g_hn is None else g_hn.contiguous(),
        c_n=torch.zeros_like(c0) if g_cn is None else g_cn.contiguous(),
        dist=None if g_dist is None else g_dist.contiguous(),
    )


def _differentiable_backward(ctx: Any, grads: tuple[Tensor | None, ...]) -> tuple[Tensor | None, ...]:
    """The backward as a graph (a Hessian, a gradient penalty): the kernel's hand-written backward has no graph
    of its own, so the layer is run again by the reference loop, the same maths as PyTorch operations, and
    differentiated by autograd with ``create_graph`` (a second pass over the sequence, only when asked)."""
    from .functional import reference_layer

    x, w_ih, w_hh, bias, h0, c0, batch_sizes = ctx.saved_tensors[:7]
    _, chunk, inclusive = ctx.config
    inputs = (x, w_ih, w_hh, bias, h0, c0)
    wanted = [i for i, t in enumerate(inputs) if ctx.needs_input_grad[3 + i] and t is not None]
    with torch.enable_grad():
        mode = "reverse" if inclusive else "paper"
        outs = reference_layer(x, w_ih, w_hh, bias, None, h0, c0, batch_sizes.tolist(), chunk, mode)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
        found = torch.autograd.grad(
            [o for o, _ in pairs], [inputs[i] for i in wanted], [g for _, g in pairs],
            create_graph=True, allow_unused=True,
        )  # fmt: skip
    result: list[Tensor | None] = [None] * 10
    for i, g in zip(wanted, found):
        result[3 + i] = torch.zeros_like(inputs[i]) if g is None else g
    return tuple(result)


def fused_layer(
    x: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    bias: Tensor | None,
    h0: Tensor,
    c0: Tensor,
    batch_sizes: Tensor,
    chunk: int,
    inclusive: bool,
    kernel: LayerKernel,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Run ``kernel`` over one layer/direction of a packed sequence; returns ``out, h_n, c_n, dist``."""
    check_batch_sizes(batch_sizes, x.shape[0])
    check_layer_shapes(x, w_ih, w_hh, bias, h0, c0, chunk, int(batch_sizes[0]))
    x, h0, c0 = x.contiguous(), h0.contiguous(), c0.contiguous()
    return _KernelFunction.apply(kernel, chunk, inclusive, x, w_ih, w_hh, bias, h0, c0, batch_sizes)


def check_layer_shapes(
    x: Tensor, w_ih: Tensor, w_hh: Tensor, bias: Tensor | None, h0: Tensor, c0: Tensor, chunk: int, rows: int
) -> None:
    """A layer's tensors agree with one another and the initial state has a row for each of the first step's
    ``rows`` sequences: the kernels index them by these sizes without looking, so a mismatch would read or write
    past a buffer (a kernel plugged in by hand, or ``fused_layer`` called directly; ``ONLSTM`` always agrees)."""
    if h0.shape[0] != rows or c0.shape[0] != rows:
        raise ValueError(f"ONLSTM: the initial state has {h0.shape[0]} rows but the first step {rows} sequences")
    hidden = h0.shape[-1]
    if x.dim() != 2 or h0.dim() != 2 or chunk < 1 or hidden % chunk:
        raise ValueError(
            f"ONLSTM: x must be (steps x rows, input) and h0 (rows, hidden) with hidden a multiple of chunk={chunk};"
            f" got x {tuple(x.shape)}, h0 {tuple(h0.shape)}"
        )
    gates = 4 * hidden + 2 * (hidden // chunk)  # four gates per unit and two master gates per chunk
    want = {"w_ih": (w_ih, (gates, x.shape[1])), "w_hh": (w_hh, (gates, hidden)), "bias": (bias, (gates,))}
    want["c0"] = (c0, tuple(h0.shape))
    for name, (t, shape) in want.items():
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(
                f"ONLSTM: {name} must have shape {shape} for input {x.shape[1]} and hidden {hidden} in chunks of"
                f" {chunk}, got {tuple(t.shape)}"
            )


RESERVED = ("auto", "reference")


class KernelUnavailable(RuntimeError):
    """Raised by a kernel's ``load`` when it cannot run on this machine; the message is the reason."""


@dataclass(frozen=True)
class KernelSpec:
    """A registered kernel: ``load`` returns it or raises (it is then unavailable, the message the reason; called
    once, on first use); ``devices`` are device types (``'cpu'``, ``'cuda'``); ``priority`` orders the
    candidates of ``impl='auto'`` (higher first); ``label`` names it in messages."""

    name: str
    load: Callable[[], LayerKernel]
    devices: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]
    priority: int = 0
    label: str = ""

    def supports(self, device: torch.device, dtype: torch.dtype) -> bool:
        return device.type in self.devices and dtype in self.dtypes

    @property
    def title(self) -> str:
        return self.label or f"{self.name!r} kernel"


_specs: dict[str, KernelSpec] = {}
_loaded: dict[str, LayerKernel] = {}
_errors: dict[str, str] = {}
_warned: set[str] = set()


def register_kernel(spec: KernelSpec, *, replace: bool = False) -> None:
    """Make ``spec.name`` a valid ``impl`` (and a candidate of ``'auto'``)."""
    if spec.name in RESERVED or not spec.name.isidentifier():
        raise ValueError(f"cannot register a kernel named {spec.name!r}: choose an identifier other than {RESERVED}")
    if spec.name in _specs and not replace:
        raise ValueError(f"a kernel named {spec.name!r} is already registered; pass replace=True to replace it")
    _forget(spec.name)
    _specs[spec.name] = spec


def unregister_kernel(name: str) -> None:
    """Remove a registered kernel (and what is remembered about loading it)."""
    _specs.pop(name, None)
    _forget(name)


def _forget(name: str) -> None:
    _loaded.pop(name, None)
    _errors.pop(name, None)
    _warned.discard(name)


def kernel_names() -> tuple[str, ...]:
    """Registered kernels, highest priority first."""
    return tuple(s.name for s in sorted(_specs.values(), key=lambda s: -s.priority))


def impl_choices() -> tuple[str, ...]:
    """Every value ``ONLSTM(impl=...)`` accepts."""
    return RESERVED + kernel_names()


def canonical_impl(impl: str) -> str:
    """``impl``, checked to be one of :func:`impl_choices`."""
    if not isinstance(impl, str) or impl not in impl_choices():
        raise ValueError(f"impl must be one of {impl_choices()}, got {impl!r}")
    return impl


def load_kernel(name: str) -> LayerKernel | None:
    """The kernel registered as ``name``, loaded on first use; ``None`` if it cannot be loaded."""
    if name not in _loaded and name not in _errors:
        spec = _specs[name]  # an unregistered name is a KeyError, not a kernel that failed to load
        try:
            _loaded[name] = spec.load()
        except Exception as exc:
            _errors[name] = first_line(exc) if isinstance(exc, KernelUnavailable) else exception_line(exc)
    return _loaded.get(name)


def kernel_status() -> dict[str, dict[str, Any]]:
    """For each registered kernel: ``{"available": bool, "reason": str | None}`` (loads each kernel), and
    ``"detail"``, the kernel's ``describe()`` (e.g. the C++ kernel's matrix-product backend), where it has one."""
    status: dict[str, dict[str, Any]] = {}
    for name in kernel_names():
        kernel = load_kernel(name)
        status[name] = {"available": kernel is not None, "reason": _errors.get(name)}
        describe = getattr(kernel, "describe", None)
        if callable(describe):
            status[name]["detail"] = describe()
    return status


def kernel_error(name: str) -> str | None:
    """Why the kernel ``name`` could not be loaded (``None`` when it could, or was not tried)."""
    return _errors.get(name)


def resolve_impl(impl: str, device: torch.device, dtype: torch.dtype) -> str:
    """The name of what runs a forward call of ``impl`` on ``device``/``dtype``: a kernel or ``'reference'``."""
    if impl == "reference":
        return "reference"
    if impl != "auto":
        spec = _specs.get(impl)
        if spec is None:
            raise ValueError(f"impl={impl!r} is no longer a registered kernel; use one of {impl_choices()}")
        if not spec.supports(device, dtype):
            return "reference"
        if load_kernel(impl) is None:
            raise RuntimeError(f"impl={impl!r} but the {spec.title} is unavailable: {_errors[impl]}")
        return impl
    failed, chosen = [], "reference"
    for name in kernel_names():
        if _specs[name].supports(device, dtype):
            if load_kernel(name) is not None:
                chosen = name
                break
            failed.append(name)
    for name in failed:
        if name not in _warned:
            _warned.add(name)
            warnings.warn(
                f"onlstm: {_specs[name].title} unavailable ({_errors[name]}); impl='auto' uses {chosen!r} instead",
                RuntimeWarning,
                stacklevel=3,
            )
    return chosen
