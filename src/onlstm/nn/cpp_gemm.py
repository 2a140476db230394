"""Which library computes the C++ kernel's float32 matrix products: chosen by timing, never by the CPU's name.

The kernel has up to three backends (``csrc/onlstm_cpu.cpp``, "Matrix products"): oneDNN's matmul (runs only where
oneDNN accepts float32 matmul: AVX-512 or AVX-NE-CONVERT), oneDNN's linear on weights packed once per call
(``linear``), and ATen's GEMM (``mkl``, always). Which is fastest depends on the CPU and its load, not on its
instruction set's name: on an AVX2-only AMD EPYC the packed linear beat MKL, on an AVX-512 one the matmul did
(docs/layer.md, "Every CPU"). So at the first float32 call the kernel times every backend that runs here on that
layer's own product shapes (each product timed alone, weighted by how often a call of that layer runs it: 0.4 s
for the paper's PTB layer, 1.4 s for its largest, on one thread of an AMD EPYC), keeps the
fastest for the forward products and, apart, for the backward ones (on an AVX2-only AMD EPYC the packed linear ran
the forward step products faster than MKL and the backward ones slower: docs/layer.md), and records the choice in
``gemm_choice.json`` beside the compiled library, keyed by the CPU, torch, the thread count and the layer's sizes:
later processes read it instead of timing again (delete the file to measure again). ``ONLSTM_CPU_GEMM=mkl|onednn|
linear`` forces one backend for both directions, ``ONLSTM_CPU_GEMM=linear/mkl`` one for each (forward/backward),
and skips the timing (tests force each one)."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..files import write_json

ENV = "ONLSTM_CPU_GEMM"
BACKENDS = ("onednn", "linear", "mkl")  # also the order of preference between equal timings
CACHE_NAME = "gemm_choice.json"
LABELS = {
    "onednn": "oneDNN matmul",
    "linear": "oneDNN linear on packed weights",
    "mkl": "MKL (ATen's GEMM)",
}
MAX_TIMED_STEPS, ROUNDS = 70, 2


@dataclass
class Choice:
    """The backends in use, of the forward products (``backend``) and of the backward ones (``backward``), and how
    they were chosen: ``forced`` (the environment), ``only`` (the one that runs), ``measured`` (timed now) or
    ``cached`` (timed by an earlier process); ``seconds``: each backend's (forward, backward) timings."""

    backend: str
    how: str
    seconds: dict[str, tuple[float, float]] = field(default_factory=dict)
    backward: str = ""

    def __post_init__(self) -> None:
        self.backward = self.backward or self.backend

    def describe(self) -> str:
        label = LABELS.get(self.backend, self.backend)
        if self.backward != self.backend:
            label = f"{label} forward, {LABELS.get(self.backward, self.backward)} backward"
        if self.how == "forced":
            return f"{label} ({ENV}={self.backend}/{self.backward})"
        if not self.seconds:
            return f"{label} (the only backend that runs here)"
        times = ", ".join(f"{b} {1e3 * f:.1f}/{1e3 * w:.1f} ms" for b, (f, w) in sorted(self.seconds.items()))
        return (
            f"{label} (the fastest of {len(self.seconds)} timed on this layer's products, forward/backward: {times}; "
            f"{self.how})"
        )


def cpu_name() -> str:
    """The CPU's model name as the kernel reports it (``/proc/cpuinfo``), for the cache's key only."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cache_key(sizes: tuple[int, ...]) -> str:
    """The conditions a timing holds for: CPU, torch, threads, the layer's (input, hidden, chunk, batch)."""
    return f"{cpu_name()} | torch {torch.__version__} | {torch.get_num_threads()} threads | sizes {sizes}"


def forced(module: Any) -> Choice | None:
    """The backends ``ONLSTM_CPU_GEMM`` names (``linear``: both directions; ``linear/mkl``: forward/backward), set;
    None when it is unset (a bad value is said once, ignored)."""
    value = os.environ.get(ENV, "").strip().lower()
    if not value:
        return None
    names = value.split("/") if value.count("/") == 1 else [value, value]
    if not all(name in BACKENDS for name in names):
        print(f"onlstm: {ENV}={value!r} ignored; use one of {', '.join(BACKENDS)}, or two as forward/backward",
              file=sys.stderr)  # fmt: skip
        return None
    if not all(module.gemm_backends().count(name) for name in names):
        print(f"onlstm: {ENV}={value} does not run here ({module.gemm_why_not_onednn()}); timing the others",
              file=sys.stderr)  # fmt: skip
        return None
    _set(module, *names)
    return Choice(names[0], "forced", backward=names[1])


def _set(module: Any, forward: str, backward: str) -> None:
    module.set_gemm_backend(forward, "forward")
    module.set_gemm_backend(backward, "backward")


def choose(module: Any, inputs: Any, cache_dir: Path | None, timer: Callable[[], float] = time.perf_counter) -> Choice:
    """Set the fastest backend for layers like ``inputs``' (a :class:`~onlstm.nn.kernels.KernelInputs`), from
    the cache in ``cache_dir`` when it has these conditions, else by timing every backend that runs here."""
    candidates = [b for b in module.gemm_backends() if b in BACKENDS]
    if len(candidates) == 1:
        _set(module, candidates[0], candidates[0])
        return Choice(candidates[0], "only")
    # the call's own sizes (steps capped): packing a weight costs once per call and saves at every step, so the
    # steps weigh the products (timing whole passes of 8 steps chose MKL where 70 ran 1.14x faster packed)
    steps = min(len(inputs.batch_sizes), MAX_TIMED_STEPS)
    sizes = (inputs.x.shape[1], inputs.w_hh.shape[1], int(inputs.chunk), int(inputs.batch_sizes[0]), steps)
    key, path = cache_key(sizes), None if cache_dir is None else cache_dir / CACHE_NAME
    if (choice := _cached(_read(path).get(key), candidates)) is not None:
        _set(module, choice.backend, choice.backward)
        return choice
    seconds = time_backends(module, candidates, sizes, timer)
    best = [min(candidates, key=lambda b: (seconds[b][d], BACKENDS.index(b))) for d in (0, 1)]
    _set(module, *best)
    if path is not None:
        _write(path, key, {"backend": best[0], "backward": best[1], "seconds": seconds})
    return Choice(best[0], "measured", seconds, best[1])


def _cached(record: Any, candidates: list[str]) -> Choice | None:
    """The choice a cache record holds, None when it is not one of this version's (before the backward products
    were timed apart a record had one backend) or names a backend that does not run here."""
    try:
        forward, backward = record["backend"], record["backward"]
        seconds = {b: (float(f), float(w)) for b, (f, w) in record["seconds"].items()}
    except (TypeError, KeyError, ValueError, AttributeError):
        return None
    return Choice(forward, "cached", seconds, backward) if {forward, backward} <= set(candidates) else None


def time_backends(module: Any, backends: list[str], sizes: tuple[int, ...], timer) -> dict[str, tuple[float, float]]:
    """Each backend's (forward, backward) time for the products of one layer call of ``sizes`` (input, hidden,
    chunk, batch, steps), from timings of its product shapes: per step, ``h @ w_hh^T`` (forward) and ``dG @ w_hh``
    (backward), on packed weights for the oneDNN routes (their packing is paid once per call, and counted once);
    per block of up to 256 rows (the rate of the kernel's 1,024-row blocks), the input projection (forward) and
    ``d_x`` (backward); the weight gradient is MKL's on every route: left out. Each product is timed alone, the
    best of :data:`ROUNDS` rounds after one untimed call (oneDNN builds its primitives then), the backends
    interleaved. Random values from a generator of its own: torch's would shift every later random number."""
    n_in, hidden, chunk, batch, steps = sizes
    case = _product_case(n_in, hidden, chunk, batch, steps)
    rows = batch * steps
    blocks = rows / case["x"].shape[0]
    best: dict[str, dict[str, float]] = {b: {} for b in backends}
    for rnd in range(ROUNDS + 1):
        for b in backends:
            for name, (product, times) in _products(module, b, case).items():
                start = timer()
                for _ in range(times):
                    product()
                if rnd:
                    t = (timer() - start) / times
                    best[b][name] = min(best[b].get(name, float("inf")), t)
    weights = {"step": 2 * steps, "block": 2 * blocks, "pack": 1}
    direction = {"fwd": 0, "in": 0, "bwd": 1, "dx": 1}
    out = {}
    for b in backends:
        total = [0.0, 0.0]
        for name, t in best[b].items():
            kind, which = name.split()
            total[direction[which]] += weights[kind] * t
        out[b] = (total[0], total[1])
    return out


def _product_case(n_in: int, hidden: int, chunk: int, batch: int, steps: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=gen) * 0.1
    gates = 4 * hidden + 2 * (hidden // chunk)
    rows = min(batch * steps, 256)  # a block of the sequence-wide products: their rate, not all their rows
    w_ih, w_hh = rnd(gates, n_in), rnd(gates, hidden)
    return {"h": rnd(batch, hidden), "dg": rnd(batch, gates), "x": rnd(rows, n_in), "dG": rnd(rows, gates),
            "w_ih": w_ih, "w_hh": w_hh, "w_hh_t": w_hh.t().contiguous(), "w_ih_t": w_ih.t().contiguous()}  # fmt: skip


def _products(module: Any, backend: str, c: dict) -> dict[str, tuple[Callable[[], Any], int]]:
    """The products of a layer call on ``backend``, as callables with how many times to run each in a timing."""
    if backend == "mkl":
        mm = torch.mm
        return {"step fwd": (lambda: mm(c["h"], c["w_hh_t"]), 4), "step bwd": (lambda: mm(c["dg"], c["w_hh"]), 4),
                "block in": (lambda: mm(c["x"], c["w_ih_t"]), 1), "block dx": (lambda: mm(c["dG"], c["w_ih"]), 1)}  # fmt: skip
    reorder, linear = torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise
    lin = lambda a, w: linear(a, w, None, "none", [], "")
    # the weights each route packs per call: the recurrent one both ways; the linear route the input one too
    fwd, bwd = (("w_hh", "w_ih"), ("w_hh_t", "w_ih_t")) if backend == "linear" else (("w_hh",), ("w_hh_t",))
    packed = {k: reorder(c[k], None) for k in fwd + bwd}
    out = {"pack fwd": (lambda: [reorder(c[k], None) for k in fwd], 1)}
    out["pack bwd"] = (lambda: [reorder(c[k], None) for k in bwd], 1)
    out["step fwd"] = (lambda: lin(c["h"], packed["w_hh"]), 4)
    out["step bwd"] = (lambda: lin(c["dg"], packed["w_hh_t"]), 4)
    if backend == "linear":
        out["block in"] = (lambda: lin(c["x"], packed["w_ih"]), 1)
        out["block dx"] = (lambda: lin(c["dG"], packed["w_ih_t"]), 1)
    else:  # oneDNN's matmul on the weights as stored
        y, dx = torch.empty(c["x"].shape[0], c["w_ih"].shape[0]), torch.empty(c["dG"].shape[0], c["w_ih"].shape[1])
        out["block in"] = (lambda: module.matmul(c["x"], c["w_ih_t"], y, "onednn"), 1)
        out["block dx"] = (lambda: module.matmul(c["dG"], c["w_ih"], dx, "onednn"), 1)
    return out


def _read(path: Path | None) -> dict:
    try:
        data = json.loads(path.read_text()) if path is not None and path.is_file() else {}
    except (OSError, ValueError):
        return {}  # a damaged cache is timed again and rewritten
    return data if isinstance(data, dict) else {}


def _write(path: Path, key: str, record: dict) -> None:
    try:
        write_json(path, {**_read(path), key: record})
    except OSError:
        pass  # a read-only build folder: the next process times again
