"""The built-in kernels, registered when :mod:`onlstm.nn` is imported (apart from the registry, which a
kernel module may then use without an import circle: docs/design.md §4.3)."""

from __future__ import annotations

import torch

from .fused import FusedKernel
from .kernels import KernelSpec, LayerKernel, register_kernel


def _load_cpp() -> LayerKernel:
    from .cpp_kernel import load_cpp_kernel  # compiles the extension on first use

    return load_cpp_kernel()


def _load_triton() -> LayerKernel:
    from .triton_kernel import load_cuda_kernel  # imports Triton only when it can run

    return load_cuda_kernel()


_CPU_FLOATS = (torch.float32, torch.float64)
# float32 also covers torch.autocast (bf16/fp16 products inside the kernel); float64 is for gradcheck
register_kernel(KernelSpec("triton", _load_triton, ("cuda",), _CPU_FLOATS, priority=30, label="Triton kernel"))
register_kernel(KernelSpec("cpp", _load_cpp, ("cpu",), _CPU_FLOATS, priority=20, label="C++ kernel"))
register_kernel(KernelSpec("fused", FusedKernel, ("cpu",), _CPU_FLOATS, priority=10, label="fused kernel"))
