"""The ON-LSTM layer: the equations and the readable reference step loop (functional), the
kernel interface and registry (kernels), the kernels (fused, cpp_kernel, triton_kernel), the cell and the
multi-layer module. The built-in kernels are registered here, on import, apart from the registry (which a
kernel module may then use without an import circle: docs/design.md §4.3). Loading one is lazy: the C++
kernel compiles on first use, the Triton one imports Triton only when it can run."""

import torch

from . import requires  # noqa: F401 (first: the version check, before imports that would fail on an old torch)
from .cpp_kernel import load_cpp_kernel
from .functional import cumax, master_forget, master_input
from .fused import FusedKernel
from .kernels import KernelSpec, LayerKernel, kernel_status, register_kernel, unregister_kernel
from .modules import ONLSTM, Distances, ONLSTMCell, dropconnect_weight
from .triton_kernel import load_cuda_kernel

_CPU_FLOATS = (torch.float32, torch.float64)
# float32 also covers torch.autocast (bf16/fp16 products inside the kernel); float64 is for gradcheck
register_kernel(KernelSpec("triton", load_cuda_kernel, ("cuda",), _CPU_FLOATS, priority=30, label="Triton kernel"))
register_kernel(KernelSpec("cpp", load_cpp_kernel, ("cpu",), _CPU_FLOATS, priority=20, label="C++ kernel"))
register_kernel(KernelSpec("fused", FusedKernel, ("cpu",), _CPU_FLOATS, priority=10, label="fused kernel"))

__all__ = [
    "ONLSTM",
    "Distances",
    "KernelSpec",
    "LayerKernel",
    "ONLSTMCell",
    "cumax",
    "dropconnect_weight",
    "kernel_status",
    "master_forget",
    "master_input",
    "register_kernel",
    "unregister_kernel",
]
