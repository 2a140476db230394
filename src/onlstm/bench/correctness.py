"""The correctness part of ``onlstm bench gpu``: the Triton kernel against the reference loop through
:class:`onlstm.ONLSTM`, case by case (those of tests/nn/test_triton.py, at the run's sizes): one forward and
backward of a random linear loss with each implementation and the same seed, and per tensor the largest
difference relative to the reference's largest magnitude (tolerances: :func:`_errors`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import onlstm

from ..errors import exception_line
from ..nn import kernels, selfcheck

FP32_TOLERANCE = selfcheck.TOLERANCE["full"]
HALF_TOLERANCE = selfcheck.TOLERANCE["reduced"]
OUTPUTS = ("output", "h_n", "c_n", "forget distance", "input distance")
Shape = tuple[int, int, int, int, int]  # T, B, input, hidden, chunk


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


def cases(small: Shape, large: Shape, half: torch.dtype | None, smoke: bool) -> list[Case]:
    """What the report checks; ``large`` is the paper's layer on a GPU (a small stand-in under ``smoke``),
    ``half`` bf16 unless the GPU lacks it."""
    paper = "larger layer (the paper's on a GPU)" if smoke else "paper's layer"
    out = [
        Case("forward fp32", small, compare="outputs"),
        Case("every gradient fp32", small, compare="gradients"),
        Case("initial state hx given", small, hx=True),
        Case("packed, unsorted lengths", small, packed=True, hx=True),
        Case("bidirectional", small, {"bidirectional": True}),
        Case("two layers (dropout between)", small, {"num_layers": 2, "dropout": 0.3}, train=True),
        Case("DropConnect", small, {"dropconnect": 0.4}, train=True),
        Case("master_input reverse", small, {"master_input": "reverse"}),
        Case(f"{paper}, fp32", large),
        Case("fp16 autocast", small, autocast=torch.float16),
        Case(f"fp16 autocast, {paper}", large, autocast=torch.float16),
    ]
    if half == torch.bfloat16:
        out[-2:-2] = [
            Case("bf16 autocast", small, autocast=half),
            Case(f"bf16 autocast, {paper}", large, autocast=half),
        ]
    return out


def run_case(case: Case, kernel: str, device: torch.device) -> dict[str, Any]:
    """The check's record: ``name, passed, error, worst, tolerance, detail`` (an exception fails it)."""
    record: dict[str, Any] = {"name": case.name, "detail": _detail(case)}
    try:
        errors, allowed = _errors(case, kernel, device)
    except Exception as exc:  # a crash is a failed check, with its reason in the report
        tol = FP32_TOLERANCE if case.autocast is None else HALF_TOLERANCE
        return record | {"passed": False, "error": None, "worst": exception_line(exc, 300), "tolerance": tol}
    worst = max(errors, key=lambda k: errors[k] / allowed[k])
    passed = all(math.isfinite(errors[k]) and errors[k] <= allowed[k] for k in errors)
    return record | {"passed": passed, "error": errors[worst], "worst": worst, "tolerance": allowed[worst]}


def _detail(case: Case) -> str:
    T, B, I, H, C = case.shape
    parts = [f"T={T} B={B} in={I} H={H} C={C}"]
    parts += [f"{k}={v}" for k, v in case.layer.items()]
    parts += [w for w, on in (("packed", case.packed), ("hx", case.hx), ("train mode", case.train)) if on]
    if case.autocast is not None:
        parts.append(f"autocast {str(case.autocast).replace('torch.', '')}")
    return ", ".join(parts)


def _errors(case: Case, kernel: str, device: torch.device) -> tuple[dict[str, float], dict[str, float]]:
    """Per compared tensor: the kernel's error, and the error allowed.

    Under autocast the allowed error is the larger of :data:`HALF_TOLERANCE` and twice the reference loop's
    own error under the same autocast: rounding the products' inputs to 8 or 11 bits costs what it costs
    over many steps at a large layer, and the kernel must only not be worse than the reference loop there.
    """
    _, _, I, H, C = case.shape
    torch.manual_seed(0)
    model = onlstm.ONLSTM(I, H, chunk_size=C, impl="reference", **case.layer).to(device)
    model.train(case.train)
    x, hx = _inputs(case, model, device)
    got = _forward_backward(model, kernel, x, hx, case.autocast, device)
    want = _forward_backward(model, "reference", x, hx, None, device)
    names = list(OUTPUTS) + _grad_names(model, hx is not None)
    keep: Callable[[str], bool] = {
        "outputs": lambda n: n in OUTPUTS,
        "gradients": lambda n: n not in OUTPUTS,
    }.get(case.compare, lambda n: True)
    errors = {n: selfcheck.relative_error(a, b) for n, a, b in zip(names, got, want) if keep(n)}
    if case.autocast is None:
        return errors, dict.fromkeys(errors, FP32_TOLERANCE)
    own = _forward_backward(model, "reference", x, hx, case.autocast, device)
    own_errors = {n: selfcheck.relative_error(a, b) for n, a, b in zip(names, own, want)}
    return errors, {n: max(HALF_TOLERANCE, 2 * own_errors[n]) for n in errors}


def _inputs(case: Case, model, device):
    T, B, I, H, _ = case.shape
    g = torch.Generator().manual_seed(1)
    padded = torch.randn(T, B, I, generator=g).to(device)
    hx = None
    if case.hx:
        layers = model.num_layers * model.num_directions
        hx = tuple(torch.randn(layers, B, H, generator=g).to(device) for _ in range(2))
    if not case.packed:
        return padded, hx
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T  # the longest row sets T; the others leave the batch at their own lengths
    return pack_padded_sequence(padded, lengths[torch.randperm(B, generator=g)], enforce_sorted=False), hx


def _forward_backward(model, impl: str, x, hx, autocast: torch.dtype | None, device: torch.device) -> list:
    """Outputs and every gradient (input, hx, parameters) of a seeded random linear loss."""
    model.impl = impl
    data = (x.data if isinstance(x, PackedSequence) else x).detach().requires_grad_()
    x = x._replace(data=data) if isinstance(x, PackedSequence) else data
    hx = None if hx is None else tuple(t.detach().requires_grad_() for t in hx)
    with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
        used = model.resolved_impl(device)
        if used != impl:  # a kernel that is unavailable or failed its self-check: not what this case measures
            raise RuntimeError(
                f"impl={impl!r} runs {used!r} here: {kernels.kernel_error(impl) or 'see the self-check'}"
            )
        torch.manual_seed(2)  # the same DropConnect and dropout masks for both implementations
        out, (h, c), d = model(x, hx, return_distances=True)
    packed = isinstance(out, PackedSequence)
    outs = [out.data if packed else out, h, c] + [t.data if packed else t for t in (d.forget, d.input)]
    g = torch.Generator().manual_seed(3)
    loss = sum((torch.randn(t.shape, generator=g).to(device) * t.float()).sum() for t in outs)
    leaves = [data, *(hx or ())]
    grads = torch.autograd.grad(loss, leaves + list(model.parameters()))
    return [t.detach().float() for t in outs + list(grads)]


def _grad_names(model, has_hx: bool) -> list[str]:
    names = ["gradient of the input"] + (["gradient of h_0", "gradient of c_0"] if has_hx else [])
    return names + [f"gradient of {n}" for n, _ in model.named_parameters()]


def selfcheck_records(kernel: str, device: torch.device, hidden: int, chunk: int, half) -> list[dict[str, Any]]:
    """The kernel's own self-check (:mod:`onlstm.nn.selfcheck`) run now, float32 and under autocast."""
    out = []
    for products in (torch.float32, half):
        r = selfcheck.run_check(kernel, device, torch.float32, products, hidden, chunk, "paper")
        name = f"self-check, products {r.products}"
        fields = {"passed": r.passed, "error": r.error, "worst": r.worst, "tolerance": r.tolerance}
        out.append({"name": name, **fields, "detail": r.sizes})
    return out
