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
STEP_ENV = "ONLSTM_TRITON_STEP"
STEP_ROUTES = ("split", "fused")
#: The fused step keeps a row's master logits (chunks, padded to a power of two) and a chunk's units in
#: registers; beyond these sizes the split step runs.
FUSED_MAX_CHUNKS, FUSED_MAX_CHUNK = 256, 128
_said: set[str] = set()  # bad values of STEP_ENV already reported


def _blocks(n: int, chunk: int) -> dict[str, int]:
    """A step kernel's tile constants and warps."""
    import triton

    b = {"NCH": n, "CHUNK": chunk, "BLOCK_N": triton.next_power_of_2(n), "BLOCK_C": triton.next_power_of_2(chunk)}
    return b | {"num_warps": 8 if b["BLOCK_N"] * b["BLOCK_C"] >= 2048 else 4}


def requested_step() -> str:
    """The step ``ONLSTM_TRITON_STEP`` asks for (read at every call): ``split`` (default) or ``fused``."""
    name = os.environ.get(STEP_ENV, "").strip().lower() or "split"
    if name not in STEP_ROUTES:
        if name not in _said:
            _said.add(name)
            print(f"onlstm: {STEP_ENV}={name!r} ignored; use {' or '.join(STEP_ROUTES)}", file=sys.stderr)
        return "split"
    return name


def fused_fits(n: int, chunk: int) -> bool:
    """Whether the fused step runs at ``n`` chunks of ``chunk`` units (else the split step does)."""
    return n <= FUSED_MAX_CHUNKS and chunk <= FUSED_MAX_CHUNK


_fp64_dot: dict[str, bool] = {}  # by device kind: the answer of fp64_dot


def fp64_dot(device: torch.device) -> bool:
    """Whether this Triton multiplies float64 tiles (``tl.dot``), which the fused step needs in float64: asked
    once per device kind by one 16x16 product (Triton 3.3 and 3.4, torch 2.7's and 2.8's, refuse it while
    compiling, and so do their interpreters). Without it the fused step runs split in float64."""
    if device.type not in _fp64_dot:
        a = torch.randn(16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(device)
        out = torch.empty_like(a)
        try:
            _fused_module().probe_fp64_dot[(1,)](a, out)
            _fp64_dot[device.type] = bool(torch.allclose(out, a @ a))
        except Exception:  # a refusal is any of Triton's compile or interpreter errors
            _fp64_dot[device.type] = False
    return _fp64_dot[device.type]


class TritonKernel:
    """The Triton kernel; ``saved = (out, act, cells, mm)``, ``mm`` an empty tensor of the matmul dtype.

    Each time step runs either *split* (a torch product ``h @ w_hh^T``, then one Triton kernel for the
    element-wise step) or *fused* (one Triton kernel that computes the product too): ``step`` forces one, else
    ``ONLSTM_TRITON_STEP`` chooses at every call (docs/layer.md, "The Triton path")."""

    def __init__(self, steps: Any, step: str | None = None) -> None:
        if step not in (None, *STEP_ROUTES):
            raise ValueError(f"step must be one of {STEP_ROUTES} or None, got {step!r}")
        self._steps = steps  # the module of @triton.jit kernels (compiled, or interpreted on the CPU)
        self._step = step

    def route(self, hidden: int, chunk: int, like: Tensor | None = None) -> str:
        """``'fused'`` or ``'split'``: the step a call of a layer of this size, on tensors ``like`` this one
        (dtype, device), runs now."""
        wanted = self._step or requested_step()
        takes = like is None or like.dtype != torch.float64 or fp64_dot(like.device)
        return "fused" if wanted == "fused" and fused_fits(hidden // chunk, chunk) and takes else "split"

    def describe(self) -> str:
        """For ``onlstm info``: which step runs."""
        step = self._step or requested_step()
        if step == "split":
            return f"split step: per step a torch product and one Triton kernel ({STEP_ENV}=fused: one launch)"
        return (
            f"fused step: one Triton launch per step each way, up to {FUSED_MAX_CHUNKS} chunks of up to "
            f"{FUSED_MAX_CHUNK} units (else split, and in float64 where this Triton has no float64 product); "
            "slower than the split step on an H200"
        )

    def forward(self, inputs: KernelInputs) -> KernelOutputs:
        mm = product_dtype(inputs.x.device, inputs.x.dtype)  # read before autocast is turned off below
        with torch.autocast(inputs.x.device.type, enabled=False):  # the precision of every product is chosen here
            return self._forward(mm, *inputs)

    def _forward(self, mm, x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive) -> KernelOutputs:
        bs, N, (G, D), low = batch_sizes.tolist(), x.shape[0], w_hh.shape, mm != x.dtype
        xp = _input_projection(x, w_ih, bias, mm)  # (N, G) in x's dtype
        act, cells, out, dist = x.new_empty(N, G), x.new_empty(N, D), x.new_empty(N, D), x.new_empty(N, 2)
        h_mm = x.new_empty(N, D, dtype=mm) if low else out  # h_t as the next product reads it
        buffers = (xp, act, cells, out, h_mm, dist)
        steps = self._fused_steps if self.route(D, chunk, x) == "fused" else self._split_steps
        steps(buffers, w_hh.to(mm), h0.to(mm), c0, bs, chunk, {"INCLUSIVE": inclusive, "HAS_HMM": low})
        last = last_rows(bs, out.device)  # h_n, c_n: each row's state after its own last step
        return KernelOutputs(out, out[last], cells[last], dist, saved=(out, act, cells, x.new_empty(0, dtype=mm)))

    def _split_steps(self, buffers, w_mm, h0_mm, c0, bs, chunk, flags) -> None:
        """The forward loop of the split step: per step a torch product, then the element-wise kernel."""
        xp, act, cells, out, h_mm, dist = buffers
        hu, w_hh_t, D = xp.new_empty(bs[0], xp.shape[1], dtype=w_mm.dtype), w_mm.t(), cells.shape[1]
        blocks, launch, off, prev = _blocks(D // chunk, chunk), self._steps.forward_step, 0, 0
        for t, b in enumerate(bs):
            h_prev = h0_mm[:b] if t == 0 else h_mm[prev : prev + b]
            torch.mm(h_prev, w_hh_t, out=hu[:b])
            c_prev, c_row0 = (c0, 0) if t == 0 else (cells, prev)
            launch[(b,)](xp, hu, c_prev, act, cells, out, h_mm, dist, off, c_row0, **flags, **blocks)
            prev, off = off, off + b

    def _fused_steps(self, buffers, w_mm, h0_mm, c0, bs, chunk, flags) -> None:
        """The forward loop of the fused step: one launch per step, the product inside it."""
        xp, act, cells, out, h_mm, dist = buffers
        blocks = _fused_blocks(cells.shape[1] // chunk, chunk, act.dtype, w_mm.dtype, act.is_cuda)
        w_mm, launch, off, prev = w_mm.contiguous(), _fused_module().forward_step, 0, 0
        for t, b in enumerate(bs):
            h_prev, c_prev, prev0 = (h0_mm, c0, 0) if t == 0 else (h_mm, cells, prev)
            launch[_grid(b, blocks)](xp, h_prev, w_mm, c_prev, act, cells, out, h_mm, dist, off, prev0, b,
                                     **flags, **blocks)  # fmt: skip
            prev, off = off, off + b

    def backward(self, inputs: KernelInputs, saved: tuple[Tensor, ...], grads: OutputGrads) -> KernelGrads:
        x, w_ih, w_hh, _, h0, c0, batch_sizes, chunk, inclusive = inputs
        out, act, cells, marker = saved
        bs, mm = batch_sizes.tolist(), marker.dtype
        step_grads = self._fused_grads if self.route(w_hh.shape[1], chunk, w_hh) == "fused" else self._step_grads
        with torch.autocast(x.device.type, enabled=False):
            dG, dG_mm, dh, dc = step_grads(w_hh, c0, act, cells, bs, mm, chunk, inclusive, *grads)
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

    def _fused_grads(self, w_hh, c0, act, cells, bs, mm, chunk, inclusive, grad_out, grad_hn, grad_cn, grad_dist):
        """The reversed loop of the fused step: one launch per step (it completes the step after it: module
        ``_triton_fused``), one for the first step's master gates, one product for ``dh0``."""
        N, (G, D), offs, T = act.shape[0], w_hh.shape, step_offsets(bs), len(bs)
        w_mm, dG, dm, dc = (
            w_hh.to(mm).contiguous(),
            act.new_empty(N, G),
            act.new_empty(N, 2 * (D // chunk)),
            grad_cn.clone(),
        )
        dG_mm = act.new_empty(N, G, dtype=mm) if mm != act.dtype else dG
        flags = {"INCLUSIVE": inclusive, "HAS_GDIST": grad_dist is not None, "HAS_MM": mm != act.dtype}
        gd, blocks, fused = (
            grad_dist if grad_dist is not None else dG,
            _fused_blocks(D // chunk, chunk, act.dtype, mm, act.is_cuda),
            _fused_module(),
        )
        for t in range(T - 1, -1, -1):
            c_prev, prev0 = (c0, 0) if t == 0 else (cells, offs[t - 1])
            fused.backward_step[_grid(bs[t], blocks)](
                act, c_prev, cells, grad_out, grad_hn, dc, gd, dG, dG_mm, dm, w_mm, offs[t], offs[t + 1], prev0,
                bs[t], bs[t + 1] if t + 1 < T else 0, **flags, **blocks
            )  # fmt: skip
        masters = {k: blocks[k] for k in ("NCH", "CHUNK", "BLOCK_B", "BLOCK_N")}
        fused.backward_masters[_grid(bs[0], blocks)[:1]](act, dm, gd, dG, dG_mm, 0, bs[0], **flags, **masters)
        return dG, dG_mm, torch.mm(dG_mm[: bs[0]], w_mm).to(act.dtype), dc


def _fused_blocks(n: int, chunk: int, dtype: torch.dtype, mm: torch.dtype, cuda: bool) -> dict[str, Any]:
    """The fused step's tile constants, not tuned (on an H200 the step ran at 0.17-0.50x cuDNN, slower than the
    split step): 16 rows and about 64 unit columns a program, the products over blocks of 32; every ``tl.dot``
    block at least 16, the GPU's smallest."""
    import triton

    width = triton.next_power_of_2(chunk)
    tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
    tf32 = tf32 and mm == torch.float32 and cuda
    return {
        "NCH": n, "CHUNK": chunk, "BLOCK_B": 16, "BLOCK_N": max(16, triton.next_power_of_2(n)),
        "BLOCK_CH": max(1, 64 // width), "BLOCK_C": width, "BLOCK_K": 32,
        "PRECISION": "tf32" if tf32 else "ieee",  # as torch's own float32 products (torch.backends.cuda.matmul)
        "UPCAST": interpreter_requested(), "IS64": dtype == torch.float64,
        "num_warps": 4, "num_stages": 2,  # two stages of the products' tiles: fp64 within 227 KiB of shared memory
    }  # fmt: skip


def _grid(rows: int, blocks: dict[str, Any]) -> tuple[int, int]:
    """Programs of a fused step: blocks of rows, blocks of chunks."""
    return -(-rows // blocks["BLOCK_B"]), -(-blocks["NCH"] // blocks["BLOCK_CH"])


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


def _fused_module() -> Any:
    from . import _triton_fused  # the fused step's kernels: only once one runs

    return _triton_fused


def patch_interpreter_once() -> bool:
    """Under ``TRITON_INTERPRET=1``: Triton's interpreter patches ``triton.language`` at every launch (and undoes
    it after), but also again at every call of a ``@triton.jit`` helper inside the launch, walking the whole
    module each time (about 4 ms; our step kernels make thousands of such calls, a third to half of their time in
    the interpreter). The second patch is a no-op in effect (the launch's is in place and is what gets undone), so
    a helper's call whose ``triton.language`` is already patched skips it. Only where the interpreter has the
    patch-and-undo scope this relies on (``_patch_lang`` and ``_LangPatchScope``: read in the source of
    Triton 3.6, 3.8 and 3.9, tested with 3.9); elsewhere nothing changes. True where the shortcut is in place."""
    if not interpreter_requested():
        return False
    from triton.runtime import interpreter as ti

    patch, scope = getattr(ti, "_patch_lang", None), getattr(ti, "_LangPatchScope", None)
    if patch is None or scope is None:
        return False
    if hasattr(patch, "original"):  # in place already
        return True
    import triton.language as tl

    def patch_unless_patched(fn: Any) -> Any:
        langs = [m for m in fn.__globals__.values() if m is tl or m is tl.core]
        if langs and not any(tl.core.is_builtin(m.load) for m in langs):  # a launch patched them (is_builtin: not)
            return scope()  # nothing to undo
        return patch(fn)

    patch_unless_patched.original = patch  # type: ignore[attr-defined]
    ti._patch_lang = patch_unless_patched
    return True


def load_cuda_kernel() -> TritonKernel:
    """The registry's ``load`` for ``impl='triton'``: raises :class:`KernelUnavailable` saying why not."""
    reasons = []
    if not triton_installed():
        reasons.append("Triton is not installed (pip install triton)")
    if not torch.cuda.is_available():
        reasons.append(
            "no CUDA device is visible (it is a GPU kernel; on the CPU the C++ kernel runs, or `fused` without it)"
        )
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
    patch_interpreter_once()  # once, at the load: not in _fused_module, which every fused-step call runs
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
    gates = 4 * 4 + 2 * (4 // 2)  # hidden 4 in chunks of 2: four gates per unit, two master gates per chunk
    w_ih, w_hh = (torch.randn(gates, 4, generator=g).to(device) for _ in range(2))
    h0 = c0 = torch.zeros(1, 4, device=device)
    out = fused_layer(x, w_ih, w_hh, None, h0, c0, torch.tensor([1, 1, 1]), 2, False, kernel)[0]
    out.sum().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
