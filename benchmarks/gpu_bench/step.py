"""The step section of ``benchmarks/gpu_report.py`` (issue #49; docs/layer.md, "The GPU report"): one
forward+backward of a layer for every way the Triton path can run it (the split step, the fused step of
``ONLSTM_TRITON_STEP=fused``, each eager and replayed as a CUDA graph; at the paper's layer also the split step under
``torch.compile(mode="reduce-overhead")``, how a user's own model gets CUDA graphs) against cuDNN's ``nn.LSTM`` of the
same size in the same process, each with TF32 off and on, stated per row (``torch.backends.cuda.matmul.allow_tf32``
and ``torch.backends.cudnn.allow_tf32`` both set for the row).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import onlstm
from gpu_profile import FirstOutput, rel_error
from onlstm.errors import exception_line

from .layer import FP32_TOLERANCE, Shape, label, sync
from .layer import conditions as layer_conditions

NEEDS_CUDA = "needs CUDA"
BASELINE = "nn.LSTM"
#: issue #49's goals for the paper's layer, against cuDNN with the same TF32 setting: eager, and as a graph
GOALS = (("eager", 0.7), ("graph", 1.0))


@dataclass(frozen=True)
class Variant:
    """One row: the model (``nn.LSTM`` or the Triton kernel's ``split``/``fused`` step), TF32, eager or graph, or
    compiled (``torch.compile``, whose ``reduce-overhead`` mode replays CUDA graphs of its own)."""

    model: str
    tf32: bool
    graph: bool
    compiled: bool = False

    @property
    def run(self) -> str:
        return COMPILED if self.compiled else "CUDA graph" if self.graph else "eager"

    @property
    def name(self) -> str:
        return f"{self.model}, TF32 {'on' if self.tf32 else 'off'}, {self.run}"


COMPILED = 'torch.compile(mode="reduce-overhead")'
#: cuDNN eager (the baseline of every ratio), then the Triton path's two steps eager and as CUDA graphs, then the split
#: step compiled (at the paper's layer only: each compile takes seconds)
VARIANTS = (
    tuple(Variant(m, tf32, False) for m in (BASELINE, "split", "fused") for tf32 in (False, True))
    + tuple(Variant(m, tf32, True) for m in ("split", "fused") for tf32 in (False, True))
    + tuple(Variant("split", tf32, False, True) for tf32 in (False, True))
)


def conditions(variant: Variant) -> contextlib.AbstractContextManager[None]:
    """The variant's TF32 setting (both flags) and Triton step, restored afterwards."""
    return layer_conditions(None if variant.model == BASELINE else variant.model, variant.tf32)


def not_run(variant: Variant, device: torch.device) -> str | None:
    """Why a variant cannot run here (TF32 and CUDA graphs are CUDA's), or None."""
    if device.type != "cuda" and (variant.tf32 or variant.graph or variant.compiled):
        return f"{NEEDS_CUDA} ({'TF32' if variant.tf32 else 'CUDA graphs'})"
    return None


def row_of(shape: Shape, v: Variant) -> dict[str, Any]:
    """A row's name fields, before it is measured."""
    return {"shape": label(shape), "model": v.model, "tf32": v.tf32, "graph": v.graph, "run": v.run, "name": v.name}


def measure(
    shape: Shape,
    kernel: str,
    device: torch.device,
    repeats: int,
    compiled: bool = False,
    variants: tuple[Variant, ...] = VARIANTS,
) -> tuple[list[dict], list[dict]]:
    """The rows of one shape (fp32) for ``variants``, timed in alternating rounds after a warm-up, and the checks
    that every graph replays its eager step; the compiled rows only where ``compiled``."""
    T, B, I, H, C = shape
    torch.manual_seed(0)
    x = torch.randn(T, B, I, device=device, requires_grad=True)
    layers = {BASELINE: nn.LSTM(I, H).to(device), "onlstm": onlstm.ONLSTM(I, H, chunk_size=C, impl=kernel).to(device)}
    runs: dict[Variant, tuple[Callable, list[torch.Tensor]]] = {}
    rows, checks, errors = {}, [], {}
    for v in (v for v in variants if compiled or not v.compiled):
        rows[v] = row_of(shape, v)
        why = not_run(v, device)
        if why:
            rows[v]["not_run"] = why
            if v.graph or v.compiled:
                checks.append({"name": f"{v.name} replays the eager step", "passed": None, "worst": why})
            continue
        try:
            layer = layers[BASELINE if v.model == BASELINE else "onlstm"]
            runs[v] = _prepare(v, layer, x, checks), [*layer.parameters(), x]
        except Exception as exc:  # a failure is that row's, the others still run
            errors[v] = exception_line(exc, 300)
    times = {v: [] for v in runs}
    for _ in range(repeats):
        for v, (run, leaves) in runs.items():
            with conditions(v):
                times[v].append(_seconds(run, x, leaves, device))
    _figures(rows, times, errors, T * B)
    return list(rows.values()), checks


def _prepare(variant: Variant, layer: nn.Module, x: torch.Tensor, checks: list[dict]) -> Callable[[], Any]:
    """The variant's callable after its warm-up (eager: one step; graph: captured; compiled: compiled, its graphs
    recorded), then checked against the eager step under the same conditions."""
    model = FirstOutput(layer)
    with conditions(variant):
        eager = _grads(model, layer, x)  # also the warm-up: compiles the kernels, plans cuDNN
        if variant.compiled:
            graphed = torch.compile(FirstOutput(layer), mode="reduce-overhead", fullgraph=True)
        elif variant.graph:
            graphed = torch.cuda.make_graphed_callables(FirstOutput(layer), (x,))
        else:
            return model
        # compiled: the first call compiles, the second records the graphs; the later ones replay them
        replays = [_grads(graphed, layer, x) for _ in range(3 if variant.compiled else 2)][-2:]
    worst = max((rel_error(r.get(k), e) for r in replays for k, e in eager.items()), default=float("inf"))
    checks.append({"name": f"{variant.name} replays the eager step", "passed": worst <= FP32_TOLERANCE,
                   "error": worst, "tolerance": FP32_TOLERANCE,
                   "worst": f"largest difference {worst:.1e} of the eager tensor's largest value, output and "
                            f"every gradient, two replays (tolerance {FP32_TOLERANCE:g})"})  # fmt: skip
    return graphed


def _grads(model: Callable, layer: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The output and every gradient of one ``out.sum().backward()``, copied (a graph reuses its buffers)."""
    for t in [*layer.parameters(), x]:
        t.grad = None
    out = model(x)
    got = {"output": out.detach().clone()}
    out.sum().backward()
    named = {"x": x, **dict(layer.named_parameters())}
    return got | {f"grad {n}": t.grad.detach().clone() for n, t in named.items() if t.grad is not None}


def _seconds(run: Callable, x: torch.Tensor, leaves: list[torch.Tensor], device: torch.device) -> float:
    for t in leaves:
        t.grad = None
    sync(device)
    start = time.perf_counter()
    run(x).sum().backward()
    sync(device)
    return time.perf_counter() - start


def _figures(rows: dict[Variant, dict], times: dict[Variant, list[float]], errors: dict[Variant, str], tokens: int):
    """Median milliseconds, tokens/s and the ratios to eager cuDNN (same TF32, and TF32 on: PyTorch's default)."""
    med = {v: statistics.median(t) for v, t in times.items() if t}
    for v, row in rows.items():
        if v in errors:
            row["error"] = errors[v]
        if v not in med:
            continue
        same, default = Variant(BASELINE, v.tf32, False), Variant(BASELINE, True, False)
        row |= {"ms": 1e3 * med[v], "tokens_per_s": tokens / med[v]}
        row["x cuDNN same TF32"] = med[same] / med[v] if same in med else None
        row["x cuDNN TF32 on"] = med[default] / med[v] if default in med else None


def step_section(
    shapes: tuple[Shape, ...], kernel: str, device: torch.device, repeats: int, run: Callable[..., Any] | None = None
) -> dict[str, Any]:
    """The section: rows per shape, the graphs' checks, a check that every row that can run here ran, and the
    goals at the last shape (the paper's layer). ``run`` measures one shape's rows: :func:`measure` in this
    process by default; the report passes ``gpu_bench.isolate.measure`` on CUDA (each row in a process of its own)."""
    run = run or measure
    rows, checks = [], []
    for shape in shapes:
        got_rows, got_checks = run(shape, kernel, device, repeats, compiled=shape == shapes[-1])
        rows += got_rows
        checks += got_checks
    failed = [f"{r['shape']} {r['name']}: {r['error']}" for r in rows if "error" in r]
    checks.append({"name": "every step row that can run here measured", "passed": not failed,
                   "worst": "; ".join(failed) or None})  # fmt: skip
    return {"rows": rows, "checks": checks, "goals": goals(rows, label(shapes[-1]), device.type != "cuda")}


def goals(rows: list[dict[str, Any]], paper: str, smoke: bool) -> list[dict[str, Any]]:
    """Issue #49's goals at the paper's layer, per step and TF32: ``met``, ``not met``, ``not measured`` or ``n/a``."""
    out = []
    for (mode, target), model, tf32 in ((g, m, t) for g in GOALS for m in ("split", "fused") for t in (False, True)):
        want = (paper, model, tf32, Variant(model, tf32, mode == "graph").run)
        row = next((r for r in rows if (r["shape"], r["model"], r["tf32"], r["run"]) == want), {})
        value = row.get("x cuDNN same TF32")
        status = "not measured" if value is None else "met" if value >= target else "not met"
        status = "n/a (smoke: the interpreter is no speed)" if smoke else status
        name = f"{model} {mode} x cuDNN >= {target:g} (fp32, TF32 {'on' if tf32 else 'off'} both sides, paper layer)"
        out.append({"goal": name, "value": value, "status": status})
    return out
