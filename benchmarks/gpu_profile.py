"""Where the Triton path's time goes at one layer (issue #33), on a CUDA GPU:

    python benchmarks/gpu_profile.py --out DIR [--shape T B INPUT HIDDEN CHUNK] [--repeats N]

For one forward+backward (``out.sum().backward()``, fp32) of ``onlstm.ONLSTM(impl='triton')`` it measures the
wall time against the time the GPU was busy (the union of its kernels' intervals in ``torch.profiler``) and the
number of kernels launched: a wall time well above the busy time means the step loop waits on the CPU's
launches, not on the GPU. It then replays the same forward+backward as a CUDA graph
(``torch.cuda.make_graphed_callables``), checks the graph's output and gradients against the eager ones, and
times it; ``nn.LSTM`` of the same size (cuDNN, TF32 on and off) is timed beside. Writes DIR/profile.json and
prints a table. Exit status 0, or 2 (one line) without a CUDA device, or 4 (one line) when the disk refuses
profile.json (the one there before is kept whole).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import onlstm
from bench_cli import parser
from onlstm.errors import WriteError, exception_line
from onlstm.files import write_text

PAPER_LAYER = (70, 20, 400, 1150, 10)


class FirstOutput(nn.Module):
    """A recurrent layer's output alone: what a graphed callable returns."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)[0]


def step(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, params: list[torch.Tensor]) -> None:
    for p in [*params, x]:
        p.grad = None
    model(x).sum().backward()


def median_seconds(fn: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def busy(fn: Callable[[], None], repeats: int) -> dict[str, float]:
    """Per call of ``fn``: the GPU's busy seconds (kernel intervals merged) and the kernels launched."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if str(getattr(e, "device_type", "")).endswith("CUDA") and e.time_range.end > e.time_range.start
    )
    return {"gpu_busy_s": union_length(spans) / 1e6 / repeats, "kernels": len(spans) / repeats}


def union_length(spans: list[tuple[float, float]]) -> float:
    """The length covered by intervals sorted by start (kernels on several streams overlap)."""
    total, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def graph_check(layer: nn.Module, x: torch.Tensor, repeats: int) -> dict[str, Any]:
    """The forward+backward as a CUDA graph: each tensor's largest difference from eager (output and every
    gradient, over the eager tensor's largest magnitude), the forward alone captured by hand under no_grad, and
    the graph's median time."""
    params, names = list(layer.parameters()), [n for n, _ in layer.named_parameters()]
    model = FirstOutput(layer)
    step(model, x, params)
    eager = {"output": model(x).detach()} | {f"grad {n}": t.grad.detach().clone() for n, t in zip(names, params)}
    eager["grad x"] = x.grad.detach().clone()
    with torch.no_grad():
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            model(x)  # a warm-up on the side stream, as capture asks
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            static_out = model(x)
        graph.replay()
        torch.cuda.synchronize()
        forward_only = rel_error(static_out, eager["output"])
    graphed = torch.cuda.make_graphed_callables(FirstOutput(layer), (x,))

    def graphed_step() -> dict[str, torch.Tensor | None]:
        """One step through the graphs, its tensors copied at once (the graphs' buffers are reused)."""
        for t in [*params, x]:
            t.grad = None
        out = graphed(x)
        got = {"output": out.detach().clone()}
        out.sum().backward()
        grads = {f"grad {n}": t.grad for n, t in zip(names, params)} | {"grad x": x.grad}
        return got | {k: None if g is None else g.detach().clone() for k, g in grads.items()}

    steps = [graphed_step(), graphed_step()]  # the second replays graphs that already ran once
    errors = {k: max(rel_error(got[k], e) for got in steps) for k, e in eager.items()}
    worst = max(errors, key=lambda k: errors[k])
    return {
        "max_rel_error": errors[worst],
        "worst": worst,
        "errors": errors,
        "forward_only_rel_error": forward_only,
        "seconds": median_seconds(lambda: step(graphed, x, params), repeats),
    }


def rel_error(got: torch.Tensor | None, want: torch.Tensor) -> float:
    if got is None:
        return float("inf")  # no gradient at all
    return float((got.float() - want.float()).abs().max() / want.abs().max().clamp_min(1e-30))


def measure(shape: tuple[int, ...], repeats: int) -> dict[str, Any]:
    T, B, I, H, C = shape
    torch.manual_seed(0)
    x = torch.randn(T, B, I, device="cuda", requires_grad=True)
    layer = onlstm.ONLSTM(I, H, chunk_size=C, impl="triton").cuda()
    lstm = nn.LSTM(I, H).cuda()
    params = list(layer.parameters())
    eager = lambda: step(FirstOutput(layer), x, params)
    cudnn = lambda: step(FirstOutput(lstm), x, list(lstm.parameters()))
    eager(), cudnn()  # warm-up: compiles the kernels, runs the kernel's first-use self-check
    result: dict[str, Any] = {"shape": "T={} B={} in={} H={} C={}".format(*shape), "tokens": T * B}
    result["eager_s"] = median_seconds(eager, repeats)
    result |= busy(eager, 3)
    result["nn.LSTM_s"] = median_seconds(cudnn, repeats)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        result["nn.LSTM_no_tf32_s"] = median_seconds(cudnn, repeats)
    try:
        graph = graph_check(layer, x, repeats)
        result |= {f"graph_{k}" if k != "seconds" else "graph_s": v for k, v in graph.items()}
    except Exception as exc:  # capture can fail on a driver or torch version; the rest still stands
        result["graph_error"] = exception_line(exc, 300)
    return result


def table(r: dict[str, Any]) -> list[str]:
    tps = lambda s: f"{r['tokens'] / s:,.0f}"
    lines = [
        f"{r['shape']}, fp32, one forward+backward (median):",
        f"- triton eager: {r['eager_s'] * 1e3:.2f} ms ({tps(r['eager_s'])} tokens/s); GPU busy "
        f"{r['gpu_busy_s'] * 1e3:.2f} ms ({100 * r['gpu_busy_s'] / r['eager_s']:.0f}% of the wall time), "
        f"{r['kernels']:.0f} kernels",
        f"- nn.LSTM (cuDNN, TF32 default): {r['nn.LSTM_s'] * 1e3:.2f} ms ({tps(r['nn.LSTM_s'])} tokens/s)",
        f"- nn.LSTM (cuDNN, TF32 off): {r['nn.LSTM_no_tf32_s'] * 1e3:.2f} ms ({tps(r['nn.LSTM_no_tf32_s'])} tokens/s)",
    ]
    if "graph_s" in r:
        lines.append(
            f"- triton as a CUDA graph: {r['graph_s'] * 1e3:.2f} ms ({tps(r['graph_s'])} tokens/s), "
            f"max relative difference from eager {r['graph_max_rel_error']:.1e} ({r['graph_worst']}; the "
            f"forward alone captured under no_grad: {r['graph_forward_only_rel_error']:.1e})"
        )
        lines.append("  per tensor: " + ", ".join(f"{k} {v:.1e}" for k, v in r["graph_errors"].items()))
    else:
        lines.append(f"- triton as a CUDA graph: failed: {r['graph_error']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--out", type=Path, required=True, help="folder for profile.json")
    ap.add_argument("--shape", type=int, nargs=5, action="append", metavar=("T", "B", "I", "H", "C"))
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_profile.py: no CUDA device is visible; this script measures a GPU", file=sys.stderr)
        return 2
    results = []
    for shape in args.shape or [PAPER_LAYER]:
        results.append(measure(tuple(shape), args.repeats))
        print("\n".join(table(results[-1])), flush=True)
        try:  # after every shape, in one rename: a run cut short keeps what it measured
            write_text(args.out / "profile.json", json.dumps(results, indent=1))
        except WriteError as exc:
            print(f"gpu_profile.py: {exc}", file=sys.stderr)
            return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
