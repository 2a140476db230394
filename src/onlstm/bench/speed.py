"""The speed part of ``onlstm bench gpu``: forward+backward tokens/s of the Triton kernel, the reference loop and
``torch.nn.LSTM`` of the same size (cuDNN on a GPU), fp32 and bf16 (autocast), measured in one run.

As ``benchmarks/layer_speed.py``: per shape and dtype the three models are timed round by round in
alternation (a drift in the machine's speed hits all alike) after one untimed warm-up round (compilation,
cuDNN's plan); every timing ends with a device synchronisation; the median of the rounds is reported, with
the ratios to ``nn.LSTM`` and to the reference loop. Under ``--smoke`` the kernel runs in Triton's CPU
interpreter: the rows check that the code runs, they are no speed.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

import onlstm

from ..errors import exception_line

DTYPES = {"fp32": None, "bf16": torch.bfloat16}  # autocast dtype (None: off)
GOALS = (("x nn.LSTM", 0.5), ("x reference", 10.0))  # issue #10's goals for the kernel at the paper's layer
Shape = tuple[int, int, int, int, int]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(module, x, device: torch.device, autocast):
    def run() -> None:
        for p in module.parameters():
            p.grad = None
        x.grad = None
        with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            out = module(x)[0]
        out.float().sum().backward()

    return run


def measure(shape: Shape, dtype: str, kernel: str, device: torch.device, repeats: int) -> list[dict[str, Any]]:
    """One row per model (``nn.LSTM``, ``triton``, ``reference``); a model that fails has its error instead."""
    T, B, I, H, C = shape
    torch.manual_seed(0)
    x = torch.randn(T, B, I, device=device, requires_grad=True)
    models = {
        "nn.LSTM": torch.nn.LSTM(I, H).to(device),
        "triton": onlstm.ONLSTM(I, H, chunk_size=C, impl=kernel).to(device),
        "reference": onlstm.ONLSTM(I, H, chunk_size=C, impl="reference").to(device),
    }
    base = {"shape": f"T={T} B={B} in={I} H={H} C={C}", "dtype": dtype}
    runs, errors = {}, {}
    for name, module in models.items():  # the warm-up round; a failure leaves that row out
        fn = _step(module, x, device, DTYPES[dtype])
        try:
            fn()
            sync(device)
            runs[name] = fn
        except Exception as exc:
            errors[name] = exception_line(exc, 300)
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    rows = []
    for name in models:
        if name in errors:
            rows.append(base | {"impl": name, "error": errors[name]})
            continue
        row = base | {"impl": name, "tokens_per_s": T * B / med[name]}
        for key, other in (("x nn.LSTM", "nn.LSTM"), ("x reference", "reference")):
            row[key] = med[other] / med[name] if other in med else None
        rows.append(row)
    return rows


def goals(rows: list[dict[str, Any]], paper: Shape, smoke: bool) -> list[dict[str, Any]]:
    """The kernel's goals at the paper's layer, per dtype: ``met``, ``not met``, or ``n/a`` (smoke, no row)."""
    T, B, I, H, C = paper
    label = f"T={T} B={B} in={I} H={H} C={C}"
    out = []
    for dtype in DTYPES:
        row = next((r for r in rows if r["shape"] == label and r["dtype"] == dtype and r["impl"] == "triton"), None)
        for key, target in GOALS:
            value = None if row is None else row.get(key)
            if smoke:
                status = "n/a (smoke: the interpreter is no speed)"
            elif value is None:
                status = "not measured"
            else:
                status = "met" if value >= target else "not met"
            out.append({"goal": f"triton {key} >= {target:g} ({dtype}, paper layer)", "value": value, "status": status})
    return out


def run(shapes: tuple[Shape, ...], kernel: str, device: torch.device, repeats: int, dtypes) -> list[dict[str, Any]]:
    return [row for shape in shapes for dtype in dtypes for row in measure(shape, dtype, kernel, device, repeats)]
