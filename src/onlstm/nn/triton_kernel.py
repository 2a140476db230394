"""The ``triton`` kernel (CUDA), a :class:`onlstm.nn.kernels.LayerKernel`, and its CPU-interpreter variant
(:func:`register_interpreter_kernel`); how it works: docs/layer.md, "The Triton path". Triton is imported only
when the kernel is loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

import torch
from torch import Tensor

from ..errors import exception_line
from .kernels import (
    KernelGrads,
    KernelInputs,
    KernelOutputs,
    KernelSpec,
    KernelUnavailable,
    OutputGrads,
    last_rows,
    previous_h,
    register_kernel,
    step_offsets,
)
from .selfcheck import product_dtype

INTERPRETER_NAME = "triton_interpret"


def _blocks(n: int, chunk: int) -> dict[str, int]:
    """A step kernel's tile constants and warps."""
    import triton

    b = {"NCH": n, "CHUNK": chunk, "BLOCK_N": triton.next_power_of_2(n), "BLOCK_C": triton.next_power_of_2(chunk)}
    return b | {"num_warps": 8 if b["BLOCK_N"] * b["BLOCK_C"] >= 2048 else 4}


class TritonKernel:
    """The Triton kernel; ``saved = (out, act, cells, mm)``, ``mm`` an empty tensor of the matmul dtype."""

    def __init__(self, steps: Any) -> None:
        self._steps = steps  # the module of @triton.jit kernels (compiled, or interpreted on the CPU)

    def forward(self, inputs: KernelInputs) -> KernelOutputs:
        mm = product_dtype(inputs.x.device, inputs.x.dtype)  # read before autocast is turned off below
        with torch.autocast(inputs.x.device.type, enabled=False):  # the precision of every product is chosen here
            return self._forward(mm, *inputs)

    def _forward(self, mm, x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive) -> KernelOutputs:
        bs, N, (G, D), low = batch_sizes.tolist(), x.shape[0], w_hh.shape, mm != x.dtype
        xp = _input_projection(x, w_ih, bias, mm)  # (N, G) in x's dtype
        act, cells, out, dist = x.new_empty(N, G), x.new_empty(N, D), x.new_empty(N, D), x.new_empty(N, 2)
        h_mm = x.new_empty(N, D, dtype=mm) if low else out  # h_t as the next product reads it
        hu, w_hh_t, h0_mm = x.new_empty(bs[0], G, dtype=mm), w_hh.to(mm).t(), h0.to(mm)
        blocks, launch, off, prev = _blocks(D // chunk, chunk), self._steps.forward_step, 0, 0
        for t, b in enumerate(bs):
            h_prev = h0_mm[:b] if t == 0 else h_mm[prev : prev + b]
            torch.mm(h_prev, w_hh_t, out=hu[:b])
            c_prev, c_row0 = (c0, 0) if t == 0 else (cells, prev)
            launch[(b,)](
                xp, hu, c_prev, act, cells, out, h_mm, dist, off, c_row0, INCLUSIVE=inclusive, HAS_HMM=low, **blocks
            )
            prev, off = off, off + b
        last = last_rows(bs, out.device)  # h_n, c_n: each row's state after its own last step
        return KernelOutputs(out, out[last], cells[last], dist, saved=(out, act, cells, x.new_empty(0, dtype=mm)))

    def backward(self, inputs: KernelInputs, saved: tuple[Tensor, ...], grads: OutputGrads) -> KernelGrads:
        x, w_ih, w_hh, _, h0, c0, batch_sizes, chunk, inclusive = inputs
        out, act, cells, marker = saved
        bs, mm = batch_sizes.tolist(), marker.dtype
        with torch.autocast(x.device.type, enabled=False):
            dG, dG_mm, dh, dc = self._step_grads(w_hh, c0, act, cells, bs, mm, chunk, inclusive, *grads)
            return KernelGrads(*_weight_grads(dG, dG_mm, x, w_ih, w_hh, h0, out, bs, mm), dh, dc)

    def _step_grads(self, w_hh, c0, act, cells, bs, mm, chunk, inclusive, grad_out, grad_hn, grad_cn, grad_dist):
        """The reversed step loop: ``dG (N, G)`` (and its matmul-dtype copy), ``dh0``, ``dc0``."""
        N, (G, D) = act.shape[0], w_hh.shape
        low, offs, dG, w_hh_mm = mm != act.dtype, step_offsets(bs), act.new_empty(N, G), w_hh.to(mm)
        dG_mm = act.new_empty(N, G, dtype=mm) if low else dG
        dh, dcs = grad_hn.clone(), [grad_cn.clone(), grad_cn.clone()]  # dcs: a step reads one and writes the other
        blocks, launch = _blocks(D // chunk, chunk), self._steps.backward_step
        gd = grad_dist if grad_dist is not None else dG  # a placeholder pointer when there is no gradient
        for t in range(len(bs) - 1, -1, -1):
            b, rows = bs[t], slice(offs[t], offs[t] + bs[t])
            c_prev, c_row0 = (c0, 0) if t == 0 else (cells, offs[t - 1])
            launch[(b,)](
                act, c_prev, cells, grad_out, dh, dcs[t % 2], dcs[(t + 1) % 2], gd, dG, dG_mm, offs[t], c_row0,
                INCLUSIVE=inclusive, HAS_GDIST=grad_dist is not None, HAS_MM=low, **blocks
            )  # fmt: skip
            if low:
                dh[:b] = torch.mm(dG_mm[rows], w_hh_mm)
            else:
                torch.mm(dG[rows], w_hh_mm, out=dh[:b])
        return dG, dG_mm, dh, dcs[1]


def _input_projection(x: Tensor, w_ih: Tensor, bias: Tensor | None, mm: torch.dtype) -> Tensor:
    """``x @ w_ih^T + bias`` for every step at once, in ``x``'s dtype (the product in ``mm``)."""
    if mm == x.dtype:
        return torch.addmm(bias, x, w_ih.t()) if bias is not None else x @ w_ih.t()
    xp = (x.to(mm) @ w_ih.to(mm).t()).to(x.dtype)
    return xp + bias if bias is not None else xp


def _weight_grads(dG, dG_mm, x, w_ih, w_hh, h0, out, bs, mm) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``dx, dw_ih, dw_hh, dbias`` as one product each over the whole sequence (``dG_mm`` in ``mm``)."""
    h_prev = previous_h(h0, out, bs)
    dGt = dG_mm.t()
    dx = (dG_mm @ w_ih.to(mm)).to(x.dtype)
    dw_ih = (dGt @ x.to(mm)).to(w_ih.dtype)
    dw_hh = (dGt @ h_prev.to(mm)).to(w_hh.dtype)
    return dx, dw_ih, dw_hh, dG.sum(0)


def interpreter_requested() -> bool:
    """Whether ``TRITON_INTERPRET=1`` is set (Triton then runs every kernel in its CPU interpreter)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_installed() -> bool:
    return "triton" in sys.modules or importlib.util.find_spec("triton") is not None


def _steps_module() -> Any:
    from . import _triton_steps  # imports triton: only once a kernel is built

    return _triton_steps


def load_cuda_kernel() -> TritonKernel:
    """The registry's ``load`` for ``impl='triton'``: raises :class:`KernelUnavailable` saying why not."""
    reasons = []
    if not triton_installed():
        reasons.append("Triton is not installed (pip install triton)")
    if not torch.cuda.is_available():
        reasons.append("no CUDA device is visible (it is a GPU kernel; on the CPU the C++ kernel runs)")
    if interpreter_requested():
        reasons.append("TRITON_INTERPRET=1 puts Triton in its CPU interpreter (unset it to use the GPU)")
    if reasons:
        raise KernelUnavailable("unavailable because " + " and ".join(reasons))
    kernel = TritonKernel(_steps_module())
    try:
        _smoke_test(kernel, torch.device("cuda"))
    except Exception as exc:  # a broken Triton/driver: the registry falls back with one warning
        why = exception_line(exc, 160)
        raise KernelUnavailable(f"unavailable because the kernel failed to compile or run: {why}") from exc
    return kernel


def load_interpreter_kernel() -> TritonKernel:
    """``load`` of :data:`INTERPRETER_NAME`: the kernel on CPU tensors, run by Triton's interpreter."""
    if not triton_installed():
        raise KernelUnavailable("unavailable because Triton is not installed (pip install triton)")
    steps = _steps_module()
    if not _interpreted(steps):
        raise KernelUnavailable(
            "unavailable because Triton is not in interpreter mode: set TRITON_INTERPRET=1 in the environment "
            "before triton is first imported (e.g. TRITON_INTERPRET=1 python ...)"
        )
    return TritonKernel(steps)


def _interpreted(steps: Any) -> bool:
    """Both our kernels and Triton's own library functions (``tl.sum``) were built for the interpreter."""
    import triton.language as tl

    return all(type(f).__name__ == "InterpretedFunction" for f in (steps.forward_step, steps.backward_step, tl.sum))


def register_interpreter_kernel(priority: int = -10) -> str:
    """Register the Triton kernel for CPU tensors under Triton's interpreter (``TRITON_INTERPRET=1`` set before
    Triton is first imported; docs/layer.md), below every CPU kernel by default; returns the ``impl`` name."""
    label = "Triton kernel (CPU interpreter)"
    spec = KernelSpec(
        INTERPRETER_NAME, load_interpreter_kernel, ("cpu",), (torch.float32, torch.float64), priority, label
    )
    register_kernel(spec, replace=True)
    return INTERPRETER_NAME


def _smoke_test(kernel: TritonKernel, device: torch.device) -> None:
    """Compile and run both kernels once at a tiny shape, so a broken install is found at load time."""
    from .kernels import fused_layer

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, generator=g).to(device).requires_grad_()
    w_ih, w_hh = torch.randn(18, 4, generator=g).to(device), torch.randn(18, 4, generator=g).to(device)
    h0 = c0 = torch.zeros(1, 4, device=device)
    out = fused_layer(x, w_ih, w_hh, None, h0, c0, torch.tensor([1, 1, 1]), 2, False, kernel)[0]
    out.sum().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
