"""Which library computes the C++ kernel's float32 matrix products: chosen by timing, never by the CPU's name.

The kernel has up to three backends (``csrc/onlstm_cpu.cpp``, "Matrix products"): oneDNN's matmul (runs only where
oneDNN accepts float32 matmul: AVX-512 or AVX-NE-CONVERT), oneDNN's linear on weights packed once per call
(``linear``), and ATen's GEMM (``mkl``, always). Which is fastest depends on the CPU and its load, not on its
instruction set's name: on an AVX2-only AMD EPYC the packed linear beat MKL, on an AVX-512 one the matmul did
(docs/layer.md, "Every CPU"). So at the first float32 call the kernel times every backend that runs here on that
layer's own products (a few forward and backward passes of 8 steps, interleaved; tens of milliseconds), keeps the
fastest, and records the choice in ``gemm_choice.json`` beside the compiled library, keyed by the CPU, torch, the
thread count and the layer's sizes: later processes read it instead of timing again (delete the file to measure
again). ``ONLSTM_CPU_GEMM=mkl|onednn|linear`` forces one backend and skips the timing (tests force each one)."""

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
TIMED_STEPS, ROUNDS = 8, 3


@dataclass
class Choice:
    """The backend in use and how it was chosen: ``forced`` (the environment), ``only`` (the one that runs),
    ``measured`` (timed now) or ``cached`` (timed by an earlier process); ``seconds``: the timings."""

    backend: str
    how: str
    seconds: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        label = LABELS.get(self.backend, self.backend)
        if self.how == "forced":
            return f"{label} ({ENV}={self.backend})"
        if not self.seconds:
            return f"{label} (the only backend that runs here)"
        times = ", ".join(f"{b} {1e3 * s:.1f} ms" for b, s in sorted(self.seconds.items(), key=lambda kv: kv[1]))
        return f"{label} (the fastest of {len(self.seconds)} timed on this layer's products: {times}; {self.how})"


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
    """The backend ``ONLSTM_CPU_GEMM`` names, set; None when it is unset (a bad value is said once, ignored)."""
    name = os.environ.get(ENV, "").strip().lower()
    if not name:
        return None
    if name not in BACKENDS:
        print(f"onlstm: {ENV}={name!r} ignored; use {', '.join(BACKENDS)}", file=sys.stderr)
        return None
    if not module.set_gemm_backend(name):
        print(f"onlstm: {ENV}={name} does not run here ({module.gemm_why_not_onednn()}); timing the others",
              file=sys.stderr)  # fmt: skip
        return None
    return Choice(name, "forced")


def choose(module: Any, inputs: Any, cache_dir: Path | None, timer: Callable[[], float] = time.perf_counter) -> Choice:
    """Set the fastest backend for layers like ``inputs``' (a :class:`~onlstm.nn.kernels.KernelInputs`), from
    the cache in ``cache_dir`` when it has these conditions, else by timing every backend that runs here."""
    candidates = [b for b in module.gemm_backends() if b in BACKENDS]
    if len(candidates) == 1:
        module.set_gemm_backend(candidates[0])
        return Choice(candidates[0], "only")
    sizes = (inputs.x.shape[1], inputs.w_hh.shape[1], int(inputs.chunk), int(inputs.batch_sizes[0]))
    key, path = cache_key(sizes), None if cache_dir is None else cache_dir / CACHE_NAME
    cached = _read(path).get(key)
    if isinstance(cached, dict) and cached.get("backend") in candidates:
        module.set_gemm_backend(cached["backend"])
        return Choice(cached["backend"], "cached", {k: float(v) for k, v in cached.get("seconds", {}).items()})
    seconds = time_backends(module, candidates, sizes, timer)
    best = min(candidates, key=lambda b: (seconds[b], BACKENDS.index(b)))
    module.set_gemm_backend(best)
    if path is not None:
        _write(path, key, {"backend": best, "seconds": seconds})
    return Choice(best, "measured", seconds)


def time_backends(module: Any, backends: list[str], sizes: tuple[int, ...], timer) -> dict[str, float]:
    """The best of :data:`ROUNDS` interleaved timings of a forward and backward pass of :data:`TIMED_STEPS` steps
    per backend, after one untimed pass each (oneDNN builds its primitives then). Random values from a generator
    of its own: torch's would shift every later random number (a resumed run would differ from one not stopped)."""
    args, grads = _timing_case(*sizes)
    best = dict.fromkeys(backends, float("inf"))
    for rnd in range(ROUNDS + 1):
        for b in backends:
            module.set_gemm_backend(b)
            start = timer()
            out, _, _, _, act, cells = module.forward(*args)
            x, w_ih, w_hh, _, h0, c0, bs, chunk, inclusive = args
            module.backward(*grads, x, w_ih, w_hh, h0, c0, bs, act, cells, out, chunk, inclusive)
            if rnd:
                best[b] = min(best[b], timer() - start)
    return best


def _timing_case(n_in: int, hidden: int, chunk: int, batch: int) -> tuple[tuple, tuple]:
    gen = torch.Generator().manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=gen) * 0.1
    gates = 4 * hidden + 2 * (hidden // chunk)
    bs = torch.full((TIMED_STEPS,), batch, dtype=torch.long)
    zeros = torch.zeros(batch, hidden)
    args = (rnd(TIMED_STEPS * batch, n_in), rnd(gates, n_in), rnd(gates, hidden), rnd(gates), zeros, zeros, bs,
            chunk, False)  # fmt: skip
    grads = (rnd(TIMED_STEPS * batch, hidden), zeros, zeros, None)
    return args, grads


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
