"""The layer measured by ``benchmarks/gpu_report.py`` (docs/layer.md, "The GPU report"): the Triton kernel
against the reference loop through :class:`onlstm.ONLSTM`, case by case (:func:`correctness`), and the
forward+backward speed of the kernel, the reference loop and ``torch.nn.LSTM`` of the same size (:func:`speed`,
timed as ``benchmarks/layer_speed.py``).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import onlstm
from onlstm.errors import exception_line
from onlstm.nn import capabilities, kernels, selfcheck
from onlstm.nn.triton_kernel import STEP_ENV

FP32_TOLERANCE, HALF_TOLERANCE = selfcheck.TOLERANCE["full"], selfcheck.TOLERANCE["reduced"]
OUTPUTS = ("output", "h_n", "c_n", "forget distance", "input distance")
DTYPES = {"fp32": None, "bf16": torch.bfloat16}  # autocast dtype (None: off)
NO_TF32 = "nn.LSTM no TF32"  # cuDNN rounds fp32 products to TF32 by default (Ampere on): the fp32-to-fp32 baseline
RATIOS = {"x nn.LSTM": "nn.LSTM", "x nn.LSTM no TF32": NO_TF32, "x reference": "reference"}
GOALS = (("x nn.LSTM", 0.5), ("x reference", 10.0))  # issue #10's goals for the kernel at the paper's layer
Shape = tuple[int, int, int, int, int]  # T, B, input, hidden, chunk


def label(shape: Shape) -> str:
    return "T={} B={} in={} H={} C={}".format(*shape)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Case:
    """One comparison: the layer's options, the input's form, and which tensors are compared."""

    name: str
    shape: Shape
    layer: dict[str, Any] = field(default_factory=dict)
    packed: bool = False
    hx: bool = False
    train: bool = False
    autocast: torch.dtype | None = None
    compare: str = "all"  # "outputs", "gradients" or "all"
    step: str = "split"  # the Triton kernel's step (ONLSTM_TRITON_STEP)
    tf32: bool = False  # TF32 allowed in float32 products (torch.backends.cuda.matmul, cudnn)


@contextlib.contextmanager
def conditions(step: str | None, tf32: bool) -> Iterator[None]:
    """The Triton kernel's step (None: as the environment says) and both TF32 flags, restored afterwards."""
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    try:
        with mock.patch.dict(os.environ, {STEP_ENV: step} if step else {}):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def cases(small: Shape, large: Shape, half: torch.dtype | None, smoke: bool) -> list[Case]:
    """What the report checks; ``large`` is the paper's layer on a GPU (a small stand-in under ``smoke``),
    ``half`` bf16 unless the GPU lacks it."""
    paper = "larger layer (the paper's on a GPU)" if smoke else "paper's layer"
    autocasts = {"bf16": torch.bfloat16} if half == torch.bfloat16 else {}
    fused = [  # issue #49's fused step: the product inside the step kernel
        Case("fused step: every gradient fp32", small, step="fused"),
        Case("fused step: packed, unsorted lengths", small, packed=True, hx=True, step="fused"),
        Case(
            "fused step: bidirectional, DropConnect",
            small,
            {"bidirectional": True, "dropconnect": 0.4},
            train=True,
            step="fused",
        ),
        Case(f"fused step: {paper}, fp32", large, step="fused"),
        Case(f"fused step: {paper}, TF32 products", large, step="fused", tf32=True),
        Case(
            f"fused step: {'bf16' if autocasts else 'fp16'} autocast, {paper}",
            large,
            autocast=half or torch.float16,
            step="fused",
        ),
    ]
    return [
        Case("forward fp32", small, compare="outputs"),
        Case("every gradient fp32", small, compare="gradients"),
        Case("initial state hx given", small, hx=True),
        Case("packed, unsorted lengths", small, packed=True, hx=True),
        Case("bidirectional", small, {"bidirectional": True}),
        Case("two layers (dropout between)", small, {"num_layers": 2, "dropout": 0.3}, train=True),
        Case("DropConnect", small, {"dropconnect": 0.4}, train=True),
        Case("master_input reverse", small, {"master_input": "reverse"}),
        Case(f"{paper}, fp32", large),
        *(
            Case(f"{name} autocast{at}", shape, autocast=dtype)
            for name, dtype in (autocasts | {"fp16": torch.float16}).items()
            for at, shape in (("", small), (f", {paper}", large))
        ),
        Case(f"{paper}, TF32 products", large, tf32=True),
        *fused,
    ]


def correctness(kernel: str, device: torch.device, small: Shape, large: Shape, half) -> list[dict[str, Any]]:
    """The records (``name, detail, passed, error, worst, tolerance``) of every case, an exception failing it,
    then of the kernel's own self-check (:mod:`onlstm.nn.selfcheck`) run now, in float32 and under autocast."""
    records = []
    for case in cases(small, large, half, device.type != "cuda"):
        try:
            errors, allowed = _errors(case, kernel, device)
            worst = max(errors, key=lambda k: errors[k] / allowed[k])
            passed = all(math.isfinite(errors[k]) and errors[k] <= allowed[k] for k in errors)
            result = {"passed": passed, "error": errors[worst], "worst": worst, "tolerance": allowed[worst]}
        except Exception as exc:  # a crash is a failed check, with its reason in the report
            tol = FP32_TOLERANCE if case.autocast is None and not case.tf32 else HALF_TOLERANCE
            result = {"passed": False, "error": None, "worst": exception_line(exc, 300), "tolerance": tol}
        records.append({"name": case.name, "detail": _detail(case), **result})
    for step, products in (("split", torch.float32), ("split", half or torch.float16), ("fused", torch.float32)):
        with conditions(step, False):
            r = selfcheck.run_check(kernel, device, torch.float32, products, large[3], large[4], "paper")
        result = {"passed": r.passed, "error": r.error, "worst": r.worst, "tolerance": r.tolerance}
        name = f"self-check, products {r.products}" + (", fused step" if step == "fused" else "")
        records.append({"name": name, **result, "detail": r.sizes})
    return records


def _detail(case: Case) -> str:
    flags = (("packed", case.packed), ("hx", case.hx), ("train mode", case.train), ("TF32 products", case.tf32))
    flags += (("fused step", case.step == "fused"),)
    parts = [label(case.shape), *(f"{k}={v}" for k, v in case.layer.items()), *(w for w, on in flags if on)]
    if case.autocast is not None:
        parts.append(f"autocast {str(case.autocast).replace('torch.', '')}")
    return ", ".join(parts)


def _errors(case: Case, kernel: str, device: torch.device) -> tuple[dict[str, float], dict[str, float]]:
    """Per compared tensor: the kernel's error, and the error allowed (under autocast: the larger of
    :data:`HALF_TOLERANCE` and twice the reference loop's own error there; docs/layer.md, "The GPU report")."""
    T, B, I, H, C = case.shape
    torch.manual_seed(0)
    model = onlstm.ONLSTM(I, H, chunk_size=C, impl="reference", **case.layer).to(device)
    model.train(case.train)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(T, B, I, generator=g).to(device)
    layers = model.num_layers * model.num_directions
    hx = tuple(torch.randn(layers, B, H, generator=g).to(device) for _ in range(2)) if case.hx else None
    if case.packed:
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        lengths[0] = T  # the longest row sets T; the others leave the batch at their own lengths
        x = pack_padded_sequence(x, lengths[torch.randperm(B, generator=g)], enforce_sorted=False)
    with conditions(case.step, case.tf32):
        got = _forward_backward(model, kernel, x, hx, case.autocast, device)
    with conditions(None, False):
        want = _forward_backward(model, "reference", x, hx, None, device)
    keep = [n for n in want if case.compare == "all" or (n in OUTPUTS) == (case.compare == "outputs")]
    errors = {n: selfcheck.relative_error(got[n], want[n]) for n in keep}
    if case.autocast is None and not case.tf32:
        return errors, dict.fromkeys(errors, FP32_TOLERANCE)
    with conditions(None, case.tf32):
        own = _forward_backward(model, "reference", x, hx, case.autocast, device)
    return errors, {n: max(HALF_TOLERANCE, 2 * selfcheck.relative_error(own[n], want[n])) for n in errors}


def _forward_backward(model, impl: str, x, hx, autocast: torch.dtype | None, device: torch.device) -> dict:
    """Outputs and every gradient (input, hx, parameters) of a seeded random linear loss, by name."""
    model.impl = impl
    packed = isinstance(x, PackedSequence)
    data = (x.data if packed else x).detach().requires_grad_()
    x = x._replace(data=data) if packed else data
    hx = None if hx is None else tuple(t.detach().requires_grad_() for t in hx)
    with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
        used = model.resolved_impl(device)
        if used != impl:  # a kernel that is unavailable or failed its self-check: not what this case measures
            raise RuntimeError(
                f"impl={impl!r} runs {used!r} here: {kernels.kernel_error(impl) or 'see the self-check'}"
            )
        torch.manual_seed(2)  # the same DropConnect and dropout masks for both implementations
        out, (h, c), d = model(x, hx, return_distances=True)
    outs = [out.data if packed else out, h, c] + [t.data if packed else t for t in (d.forget, d.input)]
    g = torch.Generator().manual_seed(3)
    loss = sum((torch.randn(t.shape, generator=g).to(device) * t.float()).sum() for t in outs)
    leaves = {"the input": data} | ({"h_0": hx[0], "c_0": hx[1]} if hx else {}) | dict(model.named_parameters())
    grads = torch.autograd.grad(loss, list(leaves.values()))
    named = dict(zip(OUTPUTS, outs)) | {f"gradient of {n}": t for n, t in zip(leaves, grads)}
    return {n: t.detach().float() for n, t in named.items()}


def speed(shapes: tuple[Shape, ...], kernel: str, device: torch.device, repeats: int, half) -> dict[str, Any]:
    """The speed section: the rows of every shape and dtype (bf16 only where ``half`` is), the goals at the
    last shape (the paper's layer), and a check that every row was measured."""
    dtypes = [d for d in DTYPES if d != "bf16" or half is not None]
    rows = [row for shape in shapes for dtype in dtypes for row in measure(shape, dtype, kernel, device, repeats)]
    failed = [f"{r['shape']} {r['dtype']} {r['impl']}: {r['error']}" for r in rows if "error" in r]
    check = {"name": "every speed row measured", "passed": not failed, "worst": "; ".join(failed) or None}
    return {"rows": rows, "goals": goals(rows, shapes[-1], device.type != "cuda"), "checks": [check]}


def measure(shape: Shape, dtype: str, kernel: str, device: torch.device, repeats: int) -> list[dict[str, Any]]:
    """One row per model (``nn.LSTM``, ``triton``, ``reference``; on a GPU in fp32 also ``nn.LSTM`` with cuDNN's
    TF32 off), timed in alternating rounds (a drift in the machine's speed hits all alike) after an untimed
    warm-up; a model that fails has its error instead."""
    T, B, I, H, C = shape
    torch.manual_seed(0)
    x = torch.randn(T, B, I, device=device, requires_grad=True)
    models = {
        "nn.LSTM": torch.nn.LSTM(I, H).to(device),
        "triton": onlstm.ONLSTM(I, H, chunk_size=C, impl=kernel).to(device),
        "reference": onlstm.ONLSTM(I, H, chunk_size=C, impl="reference").to(device),
    }
    autocast = DTYPES[dtype]
    if device.type == "cuda" and autocast is None:
        models[NO_TF32] = models["nn.LSTM"]

    def seconds(name: str) -> float:
        module = models[name]
        for p in [*module.parameters(), x]:
            p.grad = None
        sync(device)
        no_tf32 = torch.backends.cudnn.flags(enabled=True, allow_tf32=False) if name == NO_TF32 else None
        start = time.perf_counter()
        with no_tf32 or contextlib.nullcontext():
            with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
                out = module(x)[0]
            out.float().sum().backward()
        sync(device)
        return time.perf_counter() - start

    errors: dict[str, str] = {}
    # nn.LSTM under CPU autocast exists only where oneDNN has bfloat16 instructions: asked, not failed
    missing = capabilities.lstm_autocast_error(device.type, autocast) if autocast and device.type == "cpu" else None
    for name in models:  # the warm-up round; a failure leaves that row out
        if missing and name == "nn.LSTM":
            errors[name] = missing
            continue
        try:
            seconds(name)
        except Exception as exc:
            errors[name] = exception_line(exc, 300)
    times: dict[str, list[float]] = {k: [] for k in models if k not in errors}
    for _ in range(repeats):
        for name in times:
            times[name].append(seconds(name))
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = lambda n: {k: med[other] / med[n] if other in med else None for k, other in RATIOS.items()}
    missing_or_error = lambda n: {"not_available" if errors[n] == missing else "error": errors[n]}
    figures = lambda n: missing_or_error(n) if n in errors else {"tokens_per_s": T * B / med[n]} | ratios(n)
    return [{"shape": label(shape), "dtype": dtype, "impl": n} | figures(n) for n in models]


def goals(rows: list[dict[str, Any]], paper: Shape, smoke: bool) -> list[dict[str, Any]]:
    """The kernel's goals at the paper's layer, per dtype: ``met``, ``not met``, or ``n/a`` (smoke, no row)."""
    out = []
    for dtype in DTYPES:
        row = next((r for r in rows if (r["shape"], r["dtype"], r["impl"]) == (label(paper), dtype, "triton")), {})
        for key, target in GOALS:
            value = row.get(key)
            status = "not measured" if value is None else "met" if value >= target else "not met"
            status = "n/a (smoke: the interpreter is no speed)" if smoke else status
            out.append({"goal": f"triton {key} >= {target:g} ({dtype}, paper layer)", "value": value, "status": status})
    return out
