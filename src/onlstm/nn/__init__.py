"""The ON-LSTM layer: the equations (functional), the readable reference step loop (reference), the
kernel interface and registry (kernels), the kernels (fused, cpp_kernel, triton_kernel; registered in
builtin_kernels), the cell and the multi-layer module."""

from . import builtin_kernels  # noqa: F401  (registers triton, cpp and fused)
from .functional import cumax, master_forget, master_input
from .kernels import KernelSpec, LayerKernel, kernel_status, register_kernel, unregister_kernel
from .modules import ONLSTM, Distances, ONLSTMCell, dropconnect_weight

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
