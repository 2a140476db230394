"""The ``cpp`` kernel: the compiled C++ layer (``csrc/onlstm_cpu.cpp``, built by :mod:`onlstm.nn._ext`)
behind the :class:`onlstm.nn.kernels.LayerKernel` interface."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ._ext import extension_error, load_extension
from .kernels import KernelGrads, KernelInputs, KernelOutputs, KernelUnavailable, OutputGrads


class CppKernel:
    """The compiled module's ``forward``/``backward``; ``saved = (out, act, cells)``."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def forward(self, inputs: KernelInputs) -> KernelOutputs:
        out, h_n, c_n, dist, act, cells = self._module.forward(*inputs)
        return KernelOutputs(out, h_n, c_n, dist, saved=(out, act, cells))

    def backward(self, inputs: KernelInputs, saved: tuple[Tensor, ...], grads: OutputGrads) -> KernelGrads:
        i, (out, act, cells) = inputs, saved
        rest = (i.x, i.w_ih, i.w_hh, i.h0, i.c0, i.batch_sizes, act, cells, out, i.chunk, i.inclusive)
        return KernelGrads(*self._module.backward(*grads, *rest))


def load_cpp_kernel() -> CppKernel:
    """The registry's ``load`` for ``impl='cpp'`` (builds the extension on first use): raises
    :class:`KernelUnavailable` saying why it cannot."""
    module = load_extension()
    if module is None:
        raise KernelUnavailable(extension_error() or "the C++ kernel could not be loaded")
    return CppKernel(module)
