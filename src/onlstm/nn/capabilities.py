"""What torch can run on this machine where the answer depends on the CPU's instruction set (AVX-512, AVX2 only,
bfloat16 instructions or not): each question is answered by running the primitive once on a tiny case, never by
reading the CPU's name or flags, and cached for the process. Tests and benchmarks ask here and say "not available
on this CPU" instead of failing where a primitive does not exist (docs/layer.md, "Every CPU")."""

from __future__ import annotations

import functools
import os

import torch

from ..errors import exception_line

#: What a caller prints where a primitive is missing; the reason follows it.
NOT_AVAILABLE = "not available on this CPU"


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity where the system keeps one (a container's CPU set, ``taskset``),
    else every CPU. What a share of threads is cut from (the GEMM timing's load test, ``--jobs``' runs)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@functools.cache
def lstm_autocast_error(device_type: str, dtype: torch.dtype, kind: str = "LSTM") -> str | None:
    """Why ``torch.nn.LSTM`` (or ``kind``: ``GRU``, ``RNN``) cannot run forward and backward under
    ``torch.autocast(device_type, dtype)`` here (oneDNN builds its bfloat16 LSTM only on CPUs with bfloat16 support:
    AVX-512 BF16, AMX or AVX-NE-CONVERT); ``None`` when it can. Asked once per process, on a 2-step, 1-unit layer."""
    device = torch.device(device_type)
    try:
        lstm = getattr(torch.nn, kind)(2, 1).to(device)
        x = torch.ones(2, 1, 2, device=device, requires_grad=True)
        with torch.autocast(device_type, dtype=dtype):
            out = lstm(x)[0]
        out.float().sum().backward()
    except RuntimeError as exc:
        return f"{NOT_AVAILABLE}: {exception_line(exc, 200)}"
    return None


@functools.cache
def bf16_products_error() -> str | None:
    """Why this CPU has no bfloat16 matrix products of its own (torch's oneDNN answers: AMX, AVX-512 BF16 or
    AVX-NE-CONVERT; elsewhere they are emulated, slower than float32); ``None`` when it has them."""
    native = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    if torch.backends.mkldnn.is_available() and native is not None and native():
        return None
    return f"{NOT_AVAILABLE}: torch's oneDNN has no bfloat16 products here"
