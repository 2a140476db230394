"""The layer's kernels as two PyTorch operators, ``onlstm::layer_forward`` and ``onlstm::layer_backward``, for
``torch.compile``: the compiler sees one opaque node per layer and direction, whose output shapes it knows (the
fake implementations below), instead of tracing the reference step loop. So a compiled model runs the same kernel
as the eager one (the C++ kernel on the CPU, the Triton kernel on CUDA), its compile time does not grow with the
sequence length, and one graph serves every length (docs/layer.md, "Compiling"). Eager calls do not come here:
they use the kernel directly (``kernels.fused_layer``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .kernels import KernelInputs, load_kernel, output_grads
from .selfcheck import product_dtype
from .triton_kernel import INTERPRETER_NAME

#: The kernels the operators run: those whose ``saved`` is ``(out, act, cells, marker)``, the marker an empty
#: tensor of the products' dtype (a kernel registered by a user is traced as the step loop instead).
OPERATOR_KERNELS = frozenset({"cpp", "triton", INTERPRETER_NAME})
#: The dtypes a kernel's products may run in; the forward returns the index of the one it used, which the backward
#: reads on the CPU, where a kernel may choose float32 where bfloat16 is allowed (the C++ kernel times both). On CUDA
#: the Triton kernel takes what autocast asks, so the backward is told that and reads nothing: a read there would
#: wait for the GPU, which a CUDA graph's capture (torch.compile's "reduce-overhead") does not allow.
_PRODUCT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _kernel(name: str) -> Any:
    kernel = load_kernel(name)
    assert kernel is not None, "the compiled layer chose a kernel only where it loaded"
    return kernel


def _inputs(x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive) -> KernelInputs:
    """``batch_sizes`` ``None``: every sequence has ``N / B`` steps (a padded input), built here rather than in the
    graph, whose nodes then all stay on the input's device (a CPU tensor in a CUDA graph would stop its capture)."""
    if batch_sizes is None:
        batch_sizes = torch.full((x.shape[0] // h0.shape[0],), h0.shape[0], dtype=torch.int64)
    return KernelInputs(x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive)


def _products(x: Tensor, products: torch.dtype) -> torch.autocast:
    """The context in which a kernel reads ``products`` as the dtype its products may run in (it asks the autocast
    state): the dtype is read while tracing, where the caller's autocast is known (inside a compiled graph the
    autocast regions have become casts), and travels as an argument."""
    return torch.autocast(x.device.type, dtype=products, enabled=products != x.dtype)


def _apart(*tensors: Tensor) -> list[Tensor]:
    """The tensors contiguous, as the fake implementations promise (the compiler checks the strides), and each
    one that shares memory with an earlier one copied: an operator's outputs may not share memory (the compiler
    may reuse a buffer it thinks is free), and a kernel's can (the C++ kernel's final states are rows of its
    outputs when every sequence has one length; its weights' gradients are two parts of one buffer). Callers list
    the large ones first, so that the copies are the small ones."""
    seen: set[int] = set()
    result = []
    for t in tensors:
        where = t.untyped_storage().data_ptr()
        result.append(t.clone(memory_format=torch.contiguous_format) if where in seen else t.contiguous())
        seen.add(where)
    return result


@torch.library.custom_op("onlstm::layer_forward", mutates_args=())
def layer_forward(
    x: Tensor, w_ih: Tensor, w_hh: Tensor, bias: Tensor | None, h0: Tensor, c0: Tensor, batch_sizes: Tensor | None,
    chunk: int, inclusive: bool, kernel: str, products: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """One layer and direction run by ``kernel``: ``out, h_n, c_n, dist`` (as ``KernelOutputs``), then what the
    backward reads: the activations ``act (N, G)``, the cells ``(N, D)`` and the products' dtype (``mm``, an int8
    scalar on ``x``'s device indexing ``_PRODUCT_DTYPES``)."""
    with _products(x, products):
        result = _kernel(kernel).forward(_inputs(x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive))
    _, act, cells, marker = result.saved
    out, act, cells, dist, h_n, c_n = _apart(result.out, act, cells, result.dist, result.h_n, result.c_n)
    return out, h_n, c_n, dist, act, cells, x.new_full((), _PRODUCT_DTYPES.index(marker.dtype), dtype=torch.int8)


@layer_forward.register_fake
def _(x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive, kernel, products):
    rows, hidden, gates = x.shape[0], w_hh.shape[1], w_hh.shape[0]
    new = x.new_empty
    mm = x.new_empty((), dtype=torch.int8)
    return (
        new(rows, hidden),
        h0.new_empty(h0.shape),
        c0.new_empty(c0.shape),
        new(rows, 2),
        new(rows, gates),
        new(rows, hidden),
        mm,
    )


@torch.library.custom_op("onlstm::layer_backward", mutates_args=())
def layer_backward(
    g_out: Tensor | None, g_hn: Tensor | None, g_cn: Tensor | None, g_dist: Tensor | None, x: Tensor, w_ih: Tensor,
    w_hh: Tensor, h0: Tensor, c0: Tensor, batch_sizes: Tensor | None, out: Tensor, act: Tensor, cells: Tensor,
    mm: Tensor, chunk: int, inclusive: bool, kernel: str, products: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """The gradients of ``x, w_ih, w_hh, bias, h0, c0`` (``bias``: of ``b_ih + b_hh``); an output's gradient
    ``None``: it was not used."""
    inputs = _inputs(x, w_ih, w_hh, None, h0, c0, batch_sizes, chunk, inclusive)
    grads = output_grads(inputs, g_out, g_hn, g_cn, g_dist)
    marker = x.new_empty(0, dtype=_PRODUCT_DTYPES[int(mm)] if mm.device.type == "cpu" else products)
    g = _kernel(kernel).backward(inputs, (out, act, cells, marker), grads)
    d_x, d_w_hh, d_w_ih, d_bias, d_h0, d_c0 = _apart(g.x, g.w_hh, g.w_ih, g.bias, g.h0, g.c0)
    return d_x, d_w_ih, d_w_hh, d_bias, d_h0, d_c0


@layer_backward.register_fake
def _(g_out, g_hn, g_cn, g_dist, x, w_ih, w_hh, h0, c0, batch_sizes, out, act, cells, mm, *config):
    like = (x, w_ih, w_hh, w_hh.new_empty(w_hh.shape[0]), h0, c0)
    return tuple(torch.empty_like(t) for t in like)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
    x, w_ih, w_hh, bias, h0, c0, batch_sizes, *config = inputs
    out, _, _, _, act, cells, mm = output
    ctx.save_for_backward(x, w_ih, w_hh, h0, c0, batch_sizes, out, act, cells, mm)
    ctx.config, ctx.has_bias = config, bias is not None  # chunk, inclusive, kernel, products


def _backward(ctx: Any, g_out, g_hn, g_cn, g_dist, *_unused) -> tuple[Tensor | None, ...]:
    x, w_ih, w_hh, h0, c0, batch_sizes, out, act, cells, mm = ctx.saved_tensors
    rest = (x, w_ih, w_hh, h0, c0, batch_sizes, out, act, cells, mm, *ctx.config)
    gx, gw_ih, gw_hh, gb, gh0, gc0 = layer_backward(g_out, g_hn, g_cn, g_dist, *rest)
    return gx, gw_ih, gw_hh, gb if ctx.has_bias else None, gh0, gc0, None, None, None, None, None


layer_forward.register_autograd(_backward, setup_context=_setup_context)


def kernel_layer(
    x: Tensor, w_ih: Tensor, w_hh: Tensor, bias: Tensor | None, h0: Tensor, c0: Tensor, batch_sizes: Tensor | None,
    chunk: int, inclusive: bool, kernel: str,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``kernels.fused_layer`` with ``kernel``, as the operator: ``out, h_n, c_n, dist`` (``batch_sizes``: see
    ``_inputs``)."""
    products = product_dtype(x.device, x.dtype)
    out, h_n, c_n, dist, *_ = layer_forward(x.contiguous(), w_ih, w_hh, bias, h0.contiguous(), c0.contiguous(),
                                            batch_sizes, chunk, inclusive, kernel, products)  # fmt: skip
    return out, h_n, c_n, dist
