"""The Triton kernel checks itself against the reference loop before it is trusted: :func:`verified` (the
layer's dispatch), :func:`results`, :func:`info`. What, when and why: docs/layer.md, "The Triton path"."""

from __future__ import annotations

import copy
import os
import threading
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import exception_line

ENV = "ONLSTM_KERNEL_SELFCHECK"
#: The kernels checked before use: the CUDA kernel, and the same kernel under Triton's interpreter (how the
#: check itself is tested without a GPU).
CHECKED = ("triton", "triton_interpret")
#: Largest error allowed, relative to the largest magnitude of the reference tensor. Products in bf16/fp16
#: (autocast) or TF32 round their inputs to 8-11 bits, hence the wider tolerance (as tests/nn/test_triton.py).
TOLERANCE = {"full": 1e-4, "double": 1e-9, "reduced": 3e-2}
STEPS, ROWS, INPUT = 4, 3, 5  # the check's sizes: packed lengths 4, 3, 1 (a row leaves the batch early)

FailKey = tuple[str, str, torch.dtype, torch.dtype, str]


@dataclass(frozen=True)
class CheckResult:
    """One self-check: where, at which sizes, and how far the kernel was from the reference loop."""

    kernel: str
    device: str
    dtype: str
    products: str  # the dtype of the matrix products (autocast's, or the input's)
    sizes: str
    passed: bool
    error: float | None  # worst error relative to the reference tensor's largest magnitude (None: it raised)
    worst: str  # the tensor with that error, or the exception
    tolerance: float
    seconds: float

    def line(self) -> str:
        """One readable line, for ``onlstm info`` and the benchmark report."""
        what = f"{self.kernel} on {self.device} {self.dtype} (products {self.products}), {self.sizes}"
        if self.error is None:
            return f"{what}: FAILED, it raised {self.worst}"
        verdict = "passed" if self.passed else "FAILED"
        return f"{what}: {verdict}, max error {self.error:.2e} in {self.worst} (tolerance {self.tolerance:g})"


_results: dict[tuple, CheckResult] = {}
_failed: dict[FailKey, CheckResult] = {}
_lock = threading.Lock()
_running = threading.local()  # set while a check runs its own forward calls: they must not check again


_layer: dict[str, Any] = {}  # the layer class, registered by nn/modules.py (which imports this file)


def register_layer(cls) -> None:
    _layer["class"] = cls


def enabled() -> bool:
    """Whether kernels check themselves (``ONLSTM_KERNEL_SELFCHECK=0`` turns it off; read at every call)."""
    return os.environ.get(ENV, "1").strip() != "0"


def results() -> list[CheckResult]:
    """Every check this process ran, in order."""
    with _lock:
        return list(_results.values())


def reset() -> None:
    """Forget every check and fallback (for tests, and after replacing a kernel)."""
    with _lock:
        _results.clear()
        _failed.clear()


def product_dtype(device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """The dtype of the kernel's matrix products for a ``dtype`` input on ``device`` under the current autocast."""
    if dtype != torch.float32:
        return dtype
    try:  # torch >= 2.4: per device type
        if torch.is_autocast_enabled(device.type):
            return torch.get_autocast_dtype(device.type)
    except TypeError:  # torch 2.3: the CUDA autocast state only
        if device.type == "cuda" and torch.is_autocast_enabled():
            return torch.get_autocast_gpu_dtype()
    return dtype


def verified(impl: str, device: torch.device, dtype: torch.dtype, hidden: int, chunk: int, mode: str) -> str:
    """``impl``, or ``'reference'`` when ``impl`` is a self-checked kernel that failed its check here; the check
    runs on the first call for a configuration (kernel, device, dtypes, hidden and chunk size, mode, and the
    kernel's step: split or fused, each checked on its own)."""
    if impl not in CHECKED or getattr(_running, "active", False) or not enabled():
        return impl
    device = torch.device(device)
    products = product_dtype(device, dtype)
    fail_key: FailKey = (impl, str(device), dtype, products, step_of(impl, hidden, chunk))
    key = (*fail_key, hidden, chunk, mode)
    with _lock:
        if fail_key in _failed:
            return "reference"
        if key in _results:
            return impl
    result = run_check(impl, device, dtype, products, hidden, chunk, mode)
    with _lock:
        _results[key] = result
        if first_failure := not result.passed and fail_key not in _failed:
            _failed[fail_key] = result
    if first_failure:
        warnings.warn(_failure_message(result), RuntimeWarning, stacklevel=3)
    return "reference" if fail_key in _failed else impl


def step_of(impl: str, hidden: int, chunk: int) -> str:
    """The step the kernel ``impl`` runs now at this layer size (``split`` or ``fused``; ``''`` for a kernel
    without steps)."""
    from . import kernels

    route = getattr(kernels.load_kernel(impl), "route", None)
    return route(hidden, chunk) if callable(route) else ""


def _failure_message(r: CheckResult) -> str:
    error = (
        f"raised {r.worst}" if r.error is None else f"differs by {r.error:.3g} in {r.worst} (tolerance {r.tolerance:g})"
    )
    return (
        f"onlstm: the kernel impl={r.kernel!r} failed its self-check against the reference loop on {r.device} "
        f"{r.dtype} (products {r.products}) at {r.sizes}: it {error}, relative to the largest reference value; "
        f"this process runs the reference loop there instead (slower, correct). Please report it with the "
        f"output of `onlstm info` (from a checkout: `python benchmarks/gpu_report.py --out DIR`); "
        f"{ENV}=0 skips the check."
    )


def tolerance(device: torch.device, dtype: torch.dtype, products: torch.dtype) -> float:
    """The allowed error of a check (relative to the largest magnitude of each reference tensor)."""
    if dtype == torch.float64:
        return TOLERANCE["double"]
    tf32 = device.type == "cuda" and (
        torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
    )
    return TOLERANCE["reduced"] if products != dtype or tf32 else TOLERANCE["full"]


def run_check(
    impl: str, device: torch.device, dtype: torch.dtype, products: torch.dtype, hidden: int, chunk: int, mode: str
) -> CheckResult:
    """Run one check now (whatever was checked before) and return its result; records nothing."""
    sizes = f"T={STEPS} B={ROWS} input={INPUT} hidden={hidden} chunk={chunk} master_input={mode}"
    if step_of(impl, hidden, chunk) == "fused":  # the opt-in step (ONLSTM_TRITON_STEP=fused) is named
        sizes += ", fused step"
    tol = tolerance(device, dtype, products)
    start = time.perf_counter()
    _running.active = True
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            errors = _errors(impl, device, dtype, products, hidden, chunk, mode)
        worst = max(errors, key=lambda k: errors[k])
        error: float | None = errors[worst]
        passed = bool(errors[worst] <= tol)
    except Exception as exc:  # a kernel that fails to compile or run on this machine is a failed check
        error, worst, passed = None, exception_line(exc), False
    finally:
        _running.active = False
    seconds = time.perf_counter() - start
    names = (str(device), str(dtype).replace("torch.", ""), str(products).replace("torch.", ""))
    return CheckResult(impl, *names, sizes, passed, error, worst, tol, round(seconds, 4))


def _errors(impl, device, dtype, products, hidden, chunk, mode) -> dict[str, float]:
    """Per compared tensor: the kernel's largest error relative to the float64 reference's largest value."""
    from torch.nn.utils.rnn import pack_padded_sequence

    ONLSTM = _layer["class"]
    gen = torch.Generator().manual_seed(0)
    # inference tensors cannot take part in autograd: the check may run inside a caller's inference_mode
    with torch.inference_mode(False), torch.enable_grad():
        model = ONLSTM(INPUT, hidden, chunk_size=chunk, master_input=mode, impl=impl)
        with torch.no_grad():
            for p in model.parameters():  # own draws: the global generator is the caller's
                p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * hidden**-0.5)
        padded = torch.randn(STEPS, ROWS, INPUT, generator=gen)
        hx = [torch.randn(1, ROWS, hidden, generator=gen) for _ in range(2)]
        packed = pack_padded_sequence(padded, torch.tensor([STEPS, ROWS, 1]), enforce_sorted=False)
        reference = copy.deepcopy(model).double().to(device)
        reference.impl = "reference"
        got = _forward_backward(model.to(device, dtype), packed, hx, device, dtype, products)
        want = _forward_backward(reference, packed, hx, device, torch.float64, torch.float64)
    return {name: relative_error(a.detach().double(), b.detach()) for name, a, b in zip(_names(model), got, want)}


def relative_error(got: Tensor, want: Tensor) -> float:
    """Largest ``|got - want|`` over the largest ``|want|`` (inf when ``got`` is not finite)."""
    if not bool(got.isfinite().all()):
        return float("inf")
    return float((got - want).abs().max()) / float(want.abs().max().clamp_min(1e-12))


def _names(model) -> list[str]:
    first = ["output", "h_n", "c_n", "forget distance", "input distance"]
    grads = ["gradient of the input", "gradient of h_0", "gradient of c_0"]
    return first + grads + [f"gradient of {name}" for name, _ in model.named_parameters()]


def _forward_backward(model, packed, hx, device, dtype, products) -> list[Tensor]:
    """Outputs and every gradient of a random linear loss (the same loss weights for every call)."""
    x = packed.data.to(device, dtype).requires_grad_()
    order = {k: getattr(packed, k).to(device) for k in ("sorted_indices", "unsorted_indices")}
    packed = packed._replace(data=x, **order)
    h0, c0 = (t.to(device, dtype).requires_grad_() for t in hx)
    with torch.autocast(device.type, dtype=products, enabled=products != dtype):
        out, (h, c), d = model(packed, (h0, c0), return_distances=True)
    outs = [out.data, h, c, d.forget.data, d.input.data]
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(t.shape, generator=gen, dtype=torch.float64).to(device) for t in outs]
    loss = sum((w * t.double()).sum() for w, t in zip(weights, outs))
    return outs + list(torch.autograd.grad(loss, [x, h0, c0, *model.parameters()]))


def info() -> list[dict[str, Any]] | str:
    """What ``onlstm info`` shows: the checks of this process, or why there are none. When the CUDA kernel is
    available it is checked first, as a first forward call would, at the paper's layer: float32, and float32
    under autocast (bf16 where the device supports it, else fp16), so that the output says whether it can be
    trusted here."""
    if not enabled():
        return f"off ({ENV}=0)"
    from . import kernels

    if torch.cuda.is_available() and kernels.load_kernel("triton") is not None:
        cuda, half = torch.device("cuda"), torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        verified("triton", cuda, torch.float32, 1150, 10, "paper")
        with torch.autocast("cuda", dtype=half):
            verified("triton", cuda, torch.float32, 1150, 10, "paper")
    done = results()
    if not done:
        return "not run: the Triton kernel is unavailable here (it checks itself on first use on a GPU)"
    return [asdict(r) | {"summary": r.line()} for r in done]
