"""The built-in kernels, registered when :mod:`onlstm.nn` is imported (apart from the registry, which a
kernel module may then use without an import circle: docs/design.md §4.3). Loading one is lazy: the C++ kernel
compiles on first use, the Triton one imports Triton only when it can run."""

from __future__ import annotations

import torch

from .cpp_kernel import load_cpp_kernel
from .fused import FusedKernel
from .kernels import KernelSpec, register_kernel
from .triton_kernel import load_cuda_kernel

_CPU_FLOATS = (torch.float32, torch.float64)
# float32 also covers torch.autocast (bf16/fp16 products inside the kernel); float64 is for gradcheck
register_kernel(KernelSpec("triton", load_cuda_kernel, ("cuda",), _CPU_FLOATS, priority=30, label="Triton kernel"))
register_kernel(KernelSpec("cpp", load_cpp_kernel, ("cpu",), _CPU_FLOATS, priority=20, label="C++ kernel"))
register_kernel(KernelSpec("fused", FusedKernel, ("cpu",), _CPU_FLOATS, priority=10, label="fused kernel"))
