"""The C++ kernel as two PyTorch operators, ``onlstm::cpp_forward`` and ``onlstm::cpp_backward``, for
``torch.compile``: the compiler sees one opaque node per layer and direction, whose output shapes it knows (the
fake implementations below), instead of tracing the reference step loop. So a compiled model runs the same kernel
as the eager one, its compile time does not grow with the sequence length, and one graph serves every length
(docs/layer.md, "Compiling"). Eager calls do not come here: they use the kernel directly (``kernels.fused_layer``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .kernels import KernelInputs, OutputGrads, load_kernel


def _kernel() -> Any:
    kernel = load_kernel("cpp")
    assert kernel is not None, "the compiled layer chose the C++ kernel only where it loaded"
    return kernel


def _apart(*tensors: Tensor) -> list[Tensor]:
    """The tensors contiguous, as the fake implementations promise (the compiler checks the strides), and each
    one that shares memory with an earlier one copied: an operator's outputs may not share memory (the compiler
    may reuse a buffer it thinks is free), and the kernel's can (its final states are rows of its outputs when
    every sequence has one length; the weights' gradients are two parts of one buffer). Callers list the large
    ones first, so that the copies are the small ones."""
    seen: set[int] = set()
    result = []
    for t in tensors:
        where = t.untyped_storage().data_ptr()
        result.append(t.clone(memory_format=torch.contiguous_format) if where in seen else t.contiguous())
        seen.add(where)
    return result


@torch.library.custom_op("onlstm::cpp_forward", mutates_args=())
def cpp_forward(
    x: Tensor, w_ih: Tensor, w_hh: Tensor, bias: Tensor | None, h0: Tensor, c0: Tensor, batch_sizes: Tensor,
    chunk: int, inclusive: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """One layer and direction: ``out, h_n, c_n, dist`` (as ``KernelOutputs``), then what the backward reads:
    the activations ``act (N, G)``, the cells ``(N, D)`` and whether the products ran in bfloat16 (a bool)."""
    result = _kernel().forward(KernelInputs(x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive))
    _, act, cells, marker = result.saved
    out, act, cells, dist, h_n, c_n = _apart(result.out, act, cells, result.dist, result.h_n, result.c_n)
    return out, h_n, c_n, dist, act, cells, torch.tensor(marker.dtype == torch.bfloat16)


@cpp_forward.register_fake
def _(x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive):
    rows, hidden, gates = x.shape[0], w_hh.shape[1], w_hh.shape[0]
    new = x.new_empty
    return (
        new(rows, hidden),
        h0.new_empty(h0.shape),
        c0.new_empty(c0.shape),
        new(rows, 2),
        new(rows, gates),
        new(rows, hidden),
        x.new_empty((), dtype=torch.bool),
    )


@torch.library.custom_op("onlstm::cpp_backward", mutates_args=())
def cpp_backward(
    g_out: Tensor, g_hn: Tensor, g_cn: Tensor, g_dist: Tensor | None, x: Tensor, w_ih: Tensor, w_hh: Tensor,
    h0: Tensor, c0: Tensor, batch_sizes: Tensor, out: Tensor, act: Tensor, cells: Tensor, bf16: Tensor, chunk: int,
    inclusive: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """The gradients of ``x, w_ih, w_hh, bias, h0, c0`` (``bias``: of ``b_ih + b_hh``)."""
    inputs = KernelInputs(x, w_ih, w_hh, None, h0, c0, batch_sizes, chunk, inclusive)
    marker = x.new_empty(0, dtype=torch.bfloat16 if bool(bf16) else x.dtype)
    grads = OutputGrads(g_out.contiguous(), g_hn.contiguous(), g_cn.contiguous(), g_dist)
    g = _kernel().backward(inputs, (out, act, cells, marker), grads)
    d_x, d_w_hh, d_w_ih, d_bias, d_h0, d_c0 = _apart(g.x, g.w_hh, g.w_ih, g.bias, g.h0, g.c0)
    return d_x, d_w_ih, d_w_hh, d_bias, d_h0, d_c0


@cpp_backward.register_fake
def _(g_out, g_hn, g_cn, g_dist, x, w_ih, w_hh, h0, c0, batch_sizes, out, act, cells, bf16, chunk, inclusive):
    like = (x, w_ih, w_hh, w_hh.new_empty(w_hh.shape[0]), h0, c0)
    return tuple(torch.empty_like(t) for t in like)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
    x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive = inputs
    out, _, _, _, act, cells, bf16 = output
    ctx.save_for_backward(x, w_ih, w_hh, h0, c0, batch_sizes, out, act, cells, bf16)
    ctx.chunk, ctx.inclusive, ctx.has_bias = chunk, inclusive, bias is not None


def _backward(ctx: Any, g_out, g_hn, g_cn, g_dist, *_unused) -> tuple[Tensor | None, ...]:
    x, w_ih, w_hh, h0, c0, batch_sizes, out, act, cells, bf16 = ctx.saved_tensors
    g_out = torch.zeros_like(out) if g_out is None else g_out
    g_hn = torch.zeros_like(h0) if g_hn is None else g_hn
    g_cn = torch.zeros_like(c0) if g_cn is None else g_cn
    rest = (x, w_ih, w_hh, h0, c0, batch_sizes, out, act, cells, bf16, ctx.chunk, ctx.inclusive)
    gx, gw_ih, gw_hh, gb, gh0, gc0 = cpp_backward(g_out, g_hn, g_cn, g_dist, *rest)
    return gx, gw_ih, gw_hh, gb if ctx.has_bias else None, gh0, gc0, None, None, None


cpp_forward.register_autograd(_backward, setup_context=_setup_context)


def cpp_layer(
    x: Tensor, w_ih: Tensor, w_hh: Tensor, bias: Tensor | None, h0: Tensor, c0: Tensor, batch_sizes: Tensor,
    chunk: int, inclusive: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``kernels.fused_layer`` with the C++ kernel, as the operator: ``out, h_n, c_n, dist``."""
    out, h_n, c_n, dist, *_ = cpp_forward(x.contiguous(), w_ih, w_hh, bias, h0.contiguous(), c0.contiguous(),
                                          batch_sizes, chunk, inclusive)  # fmt: skip
    return out, h_n, c_n, dist
