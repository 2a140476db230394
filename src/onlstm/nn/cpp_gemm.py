"""Which library computes the C++ kernel's float32 matrix products: chosen by timing, never by the CPU's name.

The kernel has up to four backends (``csrc/onlstm_cpu.cpp``, "Matrix products"): oneDNN's matmul (runs only where
oneDNN accepts float32 matmul: AVX-512 or AVX-NE-CONVERT), oneDNN's linear on weights packed once per call
(``linear``), that route with the per-step products and the weight gradient by the kernel's own AVX2 code
(``avx2``, where the CPU has AVX2 and FMA), and ATen's GEMM (``mkl``, always). Which is fastest depends on the CPU
and its load, not on its instruction set's name: on an AVX2-only AMD EPYC the packed linear beat MKL, on an AVX-512 one the matmul did
(docs/layer.md, "Every CPU"), nor on one layer size alone: a product of a few rows runs fastest on MKL, a large
layer's on a packed route. So at the first float32 call of each layer size (:func:`size_class`) the kernel times
every backend that runs here on that layer's own product shapes (each product timed alone, weighted by how often a call of that layer runs it; the
backends interleaved product by product, so that a slowdown of a shared host falls on every backend alike: 1.8-2.4 s
for the paper's PTB layer, 3.9-4.4 s for 1150 -> 1150 at batch 80, on one thread of an AMD EPYC), keeps the
fastest, and records the timing in ``gemm_choice.json`` beside the compiled library, keyed by the CPU, torch, the
instruction-set limits set in the environment (:data:`ISA_LIMITS`), the thread count and the layer's sizes. One
timing is not kept as the answer: on a Zen 4 EPYC a kept timing had oneDNN's matmul 24% slower than every later
one, and its choice ran the H=1150 layer at 0.91x ``nn.LSTM`` where the matmul ran 0.97x. So a choice is settled
once two processes' timings name the same backend, or by each backend's median over three (:data:`SETTLE`); until
then each new process times again and chooses by the median of the timings so far. Settled, later processes read it
instead of timing (delete the file to measure again). A timing made while the machine is busy (its one-minute load average above its CPU count) measures the
contention of that moment: on a 2-core AMD EPYC running three other processes it chose MKL for the H=1150 layer,
which ran 0.77x ``nn.LSTM`` on the quiet machine where the packed linear ran 0.85-0.88x. Such a choice serves its
own process and is not cached, so a later process times again. ``ONLSTM_CPU_GEMM=mkl|onednn|linear|avx2`` forces one backend and skips the timing (tests force each one);
``ONLSTM_CPU_GEMM_CACHE`` keeps the timings in another folder, or with ``off`` in none (:func:`cache_folder`)."""

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
from .capabilities import usable_cpus

ENV = "ONLSTM_CPU_GEMM"
CACHE_ENV = "ONLSTM_CPU_GEMM_CACHE"
BACKENDS = ("onednn", "linear", "avx2", "mkl")  # also the order of preference between equal timings
CACHE_NAME = "gemm_choice.json"
LABELS = {
    "onednn": "oneDNN matmul",
    "linear": "oneDNN linear on packed weights",
    "avx2": "own AVX2 step products and weight gradient, oneDNN linear for the rest",
    "mkl": "MKL (ATen's GEMM)",
}
MAX_TIMED_STEPS, ROUNDS = 70, 3
TIMING = 3  # the way of timing a kept record was made with (3: oneDNN's matmul timed as itself, whatever is set)
SETTLE = 3  # timings (one per process) after which a choice is settled whatever they say; two that agree settle it


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
        how = f"{self.how}, under {isa_limits()}" if isa_limits() else self.how
        return f"{label} (the fastest of {len(self.seconds)} timed on this layer's products: {times}; {how})"


def cpuinfo(*fields: str) -> list[str]:
    """The values of the first line of each of ``fields`` in ``/proc/cpuinfo`` that it has (none elsewhere)."""
    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        return []
    found = {}
    for line in lines:
        key = line.split(":", 1)[0].strip()
        if key in fields and key not in found and ":" in line:
            found[key] = line.split(":", 1)[1].strip()
    return [found[f] for f in fields if f in found]


def cpu_name() -> str:
    """The CPU's model name as the kernel reports it (``/proc/cpuinfo``), for the cache's key only."""
    return next(iter(cpuinfo("model name")), "") or platform.processor() or platform.machine()


#: Variables that narrow the instruction sets torch's kernels, oneDNN and MKL use: a timing made under them (an
#: AVX2-only CPU imitated on an AVX-512 one) says nothing of the CPU without them, nor the reverse.
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def isa_limits() -> str:
    """The instruction-set limits set in the environment (``ONEDNN_MAX_CPU_ISA=AVX2, ...``); "" when none are."""
    return set_in_environment(ISA_LIMITS)


def set_in_environment(names: tuple[str, ...]) -> str:
    """``NAME=value, ...`` for each of ``names`` set (not blank) in the environment; "" when none is."""
    return ", ".join(f"{v}={os.environ[v]}" for v in names if os.environ.get(v, "").strip())


def runnable(module: Any) -> list[str]:
    """The backends of :data:`BACKENDS` that run here, as the compiled ``module`` says."""
    return [b for b in module.gemm_backends() if b in BACKENDS]


def machine() -> str:
    """The CPU and torch a timing holds for, with the instruction-set limits set in the environment, if any."""
    limits = isa_limits()
    return f"{cpu_name()} | torch {torch.__version__}" + (f" | {limits}" if limits else "")


def cache_key(sizes: tuple[int, ...]) -> str:
    """The conditions a timing holds for: :func:`machine`, threads, the layer's (input, hidden, chunk, batch)."""
    return f"{machine()} | {torch.get_num_threads()} threads | sizes {sizes}"


def cache_folder(build_dir: Path | None) -> Path | None:
    """Where the timings are kept: the folder ``ONLSTM_CPU_GEMM_CACHE`` names, none with ``off`` (every process
    times again), else the compiled kernel's build folder. The tests set ``off``, so that the timings of their tiny
    layers do not fill the user's file (``onlstm info`` lists it)."""
    where = os.environ.get(CACHE_ENV, "")
    return build_dir if not where else None if where == "off" else Path(where).expanduser()


def cached_choices(cache_dir: Path | None, most: int = 6) -> str:
    """The choices earlier processes kept for this CPU and torch (``gemm_choice.json``), in words: ``avx2 at
    400->650 chunk 10 batch 20 (1 thread)``, at most ``most`` of them, the largest layers (products per step) first,
    since those are the ones whose speed matters; "" when there are none."""
    mine = f"{machine()} | "
    found: list[tuple[int, str]] = []
    for key, record in _read(None if cache_dir is None else cache_dir / CACHE_NAME).items():
        sizes = key.rpartition("| sizes ")[2].strip("()").split(", ")
        threads = key[len(mine) :].split(" threads", 1)[0]
        # a record timed under limits this process does not have (or none) continues its key with them, not threads
        if not key.startswith(mine) or not threads.isdigit() or len(sizes) < 4:
            continue
        if not isinstance(record, dict) or "backend" not in record:
            continue
        timings = _timings(record)
        unsettled = "" if _settled(timings) else f", {len(timings)} timing{'s' if len(timings) != 1 else ''} so far"
        work = (
            (int(sizes[0]) + int(sizes[1])) * int(sizes[1]) * int(sizes[3]) if all(map(str.isdigit, sizes[:4])) else 0
        )
        found.append((work, f"{record['backend']} at {sizes[0]}->{sizes[1]} chunk {sizes[2]} batch {sizes[3]} "
                            f"({threads} thread{'s' if threads != '1' else ''}{unsettled})"))  # fmt: skip
    found.sort(key=lambda f: -f[0])  # stable: equal sizes keep the file's order
    more = f" and {len(found) - most} more" if len(found) > most else ""
    return ", ".join(text for _, text in found[:most]) + more


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


def size_class(inputs: Any) -> tuple[int, ...]:
    """The layer size a choice holds for (as the bfloat16 decision's): input, hidden and chunk, and the batch
    rounded up to a power of two. Not the steps: a training's every length would be timed, and each timing leaves
    oneDNN primitives of its own shapes in memory (issue #25); the first call of the class is timed."""
    return (
        inputs.x.shape[1],
        inputs.w_hh.shape[1],
        int(inputs.chunk),
        1 << (int(inputs.batch_sizes[0]) - 1).bit_length(),
    )


def choose(module: Any, inputs: Any, cache_dir: Path | None, timer: Callable[[], float] = time.perf_counter) -> Choice:
    """Set the fastest backend for layers like ``inputs``' (a :class:`~onlstm.nn.kernels.KernelInputs`), from
    the cache in ``cache_dir`` when it has these conditions, else by timing every backend that runs here."""
    candidates = runnable(module)
    if len(candidates) == 1:
        module.set_gemm_backend(candidates[0])
        return Choice(candidates[0], "only")
    # the call's own sizes (steps capped): packing a weight costs once per call and saves at every step, so the
    # steps weigh the products (timing whole passes of 8 steps chose MKL where 70 ran 1.14x faster packed)
    steps = min(len(inputs.batch_sizes), MAX_TIMED_STEPS)
    sizes = (inputs.x.shape[1], inputs.w_hh.shape[1], int(inputs.chunk), int(inputs.batch_sizes[0]), steps)
    key, path = cache_key(sizes), None if cache_dir is None else cache_dir / CACHE_NAME
    cached = _read(path).get(key)
    record = cached if isinstance(cached, dict) else {}
    earlier = _timings(record, candidates)
    if _settled(earlier) and record.get("backend") in candidates:
        module.set_gemm_backend(record["backend"])
        return Choice(record["backend"], "cached", _median(earlier))
    seconds = time_backends(module, candidates, sizes, timer, rows=[int(b) for b in inputs.batch_sizes])
    load, cpus = load_average()
    if load is not None and load > cpus:
        best = _fastest(seconds, candidates)
        module.set_gemm_backend(best)
        return Choice(best, f"measured on a busy machine (load {load:.1f} on {cpus} CPUs), not cached", seconds)
    timings = earlier + [seconds]
    best = _fastest(_median(timings), candidates)
    module.set_gemm_backend(best)
    if path is not None:
        _write(path, key, {"backend": best, "timings": timings, "load": load, "timing": TIMING})
    how = "measured" if len(timings) == 1 else f"measured, the median of {len(timings)} processes' timings"
    return Choice(best, how if _settled(timings) else how + "; not settled yet", _median(timings))


def _timings(record: dict, candidates: list[str] | None = None) -> list[dict[str, float]]:
    """The quiet timings a cache record holds for ``candidates`` (None: the backends it timed): none when it was made
    another way (:data:`TIMING`), over other backends than run here now (a backend added by a newer kernel, or one
    gone), or is damaged; a record of one timing only (``seconds``, as earlier versions kept) counts as one."""
    if record.get("timing") != TIMING:
        return []
    found = record.get("timings", [record["seconds"]] if isinstance(record.get("seconds"), dict) else [])
    if not isinstance(found, list) or not found or not all(isinstance(t, dict) for t in found):
        return []
    names = set(found[0] if candidates is None else candidates)
    if not names <= set(BACKENDS) or any(set(t) != names for t in found):
        return []
    try:
        return [{b: float(t[b]) for b in names} for t in found]
    except (TypeError, ValueError):
        return []


def _fastest(seconds: dict[str, float], candidates: list[str]) -> str:
    return min(candidates, key=lambda b: (seconds[b], BACKENDS.index(b)))


def _median(timings: list[dict[str, float]]) -> dict[str, float]:
    """Each backend's median over ``timings`` (the lower middle of an even count: the faster of two)."""
    return {b: sorted(t[b] for t in timings)[(len(timings) - 1) // 2] for b in timings[0]} if timings else {}


def _settled(timings: list[dict[str, float]]) -> bool:
    """Whether ``timings`` decide: :data:`SETTLE` of them, or two (or more) whose every one names the same backend."""
    winners = {_fastest(t, list(t)) for t in timings}
    return len(timings) >= SETTLE or (len(timings) >= 2 and len(winners) == 1)


#: ``on`` or ``off``: whether a float32 call under ``torch.autocast("cpu", torch.bfloat16)`` takes the bfloat16
#: products, whatever the timing says (tests run both routes on every machine).
BF16_ENV = "ONLSTM_CPU_BF16"


def choose_bf16(module: Any, inputs: Any, timer: Callable[[], float] = time.perf_counter) -> tuple[bool, str]:
    """Whether float32 calls under bfloat16 autocast take the kernel's bfloat16 products, and why, in words:
    :data:`BF16_ENV` decides where set; else they are taken where they run here (the module's probe, and torch's
    oneDNN has bfloat16 products on this CPU) and time faster than float32 on the call's product shapes. Elsewhere
    autocast leaves the layer in float32: bfloat16 emulated would be slower, and no more exact."""
    decided = forced_bf16(module)
    if decided is not None:
        return decided
    from .capabilities import bf16_products_error

    if bf16_products_error():
        return False, "float32 (torch's oneDNN has no bfloat16 products on this CPU)"
    ratio = bf16_speedup(inputs, timer, module)
    if ratio > 1.0:
        return True, f"bfloat16 (its products timed {ratio:.1f}x float32's on this layer's shapes)"
    return False, f"float32 (bfloat16's products timed {ratio:.2f}x float32's on this layer's shapes)"


def forced_bf16(module: Any) -> tuple[bool, str] | None:
    """:func:`choose_bf16`'s answer where no timing is needed (``onlstm info`` says it too): :data:`BF16_ENV` set
    to ``off``, or the module cannot run bfloat16 products (``on`` cannot force those), or ``on``; else None."""
    forced = os.environ.get(BF16_ENV, "").strip().lower()
    if forced not in ("", "on", "off"):
        print(f"onlstm: {BF16_ENV}={forced!r} ignored; use on or off", file=sys.stderr)
        forced = ""
    why = module.bf16_why_not()
    if forced == "off" or why:
        return False, f"float32 ({BF16_ENV}=off)" if forced == "off" else f"float32 ({why})"
    if forced == "on":
        return True, f"bfloat16 ({BF16_ENV}=on)"
    return None


def bf16_speedup(inputs: Any, timer: Callable[[], float] = time.perf_counter, module: Any = None) -> float:
    """How many times faster a layer call's products run in bfloat16 than in float32 here: a step's ``h @ w_hh^T``
    (``h`` rounded at every step, as in the kernel) and a block's input projection, weighted as a call runs them
    (best of :data:`ROUNDS` after one untimed call; random values from a generator of its own). Float32 is the
    faster of MKL's GEMM and, where ``module`` runs it, oneDNN's matmul: on AMD CPUs MKL's float32 can run at half
    oneDNN's rate, and bfloat16 beating MKL alone would not make it beat the layer's float32."""
    steps = min(len(inputs.batch_sizes), MAX_TIMED_STEPS)
    sizes = (inputs.x.shape[1], inputs.w_hh.shape[1], int(inputs.chunk), int(inputs.batch_sizes[0]), steps)
    c = _product_case(*sizes)
    x16, w16, wi16 = c["x"].bfloat16(), c["w_hh_t"].bfloat16(), c["w_ih_t"].bfloat16()
    runs = {
        "float32": (lambda: torch.mm(c["h"], c["w_hh_t"]), lambda: torch.mm(c["x"], c["w_ih_t"])),
        "bfloat16": (lambda: torch.mm(c["h"].bfloat16(), w16), lambda: torch.mm(x16, wi16)),
    }
    if module is not None and "onednn" in runnable(module):
        y_step, y_block = (
            torch.empty(c["h"].shape[0], c["w_hh_t"].shape[1]),
            torch.empty(c["x"].shape[0], c["w_ih_t"].shape[1]),
        )
        runs["float32 onednn"] = (lambda: module.matmul(c["h"], c["w_hh_t"], y_step, "onednn"),
                                  lambda: module.matmul(c["x"], c["w_ih_t"], y_block, "onednn"))  # fmt: skip
    blocks = sizes[3] * steps / c["x"].shape[0]
    best: dict[str, list[float]] = {k: [float("inf")] * 2 for k in runs}
    for rnd in range(ROUNDS + 1):
        for kind, products in runs.items():
            for i, product in enumerate(products):
                start = timer()
                product()
                if rnd:
                    best[kind][i] = min(best[kind][i], timer() - start)
    cost = {k: steps * t[0] + blocks * t[1] for k, t in best.items()}
    float32 = min(v for k, v in cost.items() if k.startswith("float32"))
    return float32 / max(cost["bfloat16"], 1e-12)


def load_average() -> tuple[float | None, int]:
    """The one-minute load average (None where the system gives none) and the CPUs this process may use."""
    cpus = usable_cpus()
    try:
        return os.getloadavg()[0], cpus
    except (AttributeError, OSError):
        return None, cpus


def time_backends(
    module: Any,
    backends: list[str],
    sizes: tuple[int, ...],
    timer,
    rows: list[int] | None = None,
    block_rows: int = 256,
) -> dict[str, float]:
    """Each backend's time for the products of one layer call of ``sizes`` (input, hidden, chunk, batch, steps),
    from timings of its product shapes: per step, ``h @ w_hh^T`` and ``dG @ w_hh`` (packed weights for the oneDNN
    routes: their packing is paid once per call, and counted once); per block of up to ``block_rows`` rows (256: a
    sample of the rate of the kernel's 1,024-row blocks, quicker to time; a benchmark times 1,024), the input projection, ``d_x`` and the weight gradient. Each product is timed alone, the
    best of :data:`ROUNDS` rounds after one untimed call (oneDNN builds its primitives then), the backends
    interleaved product by product. Random values from a generator of its own: torch's would shift every later
    random number. ``rows``: the call's rows at each step (its ``batch_sizes``; None: ``batch`` at every step): a
    ragged batch's steps shrink, so the step products are also timed at its smallest step and each step costs what
    its rows cost between the two (the oneDNN routes' rows padded as the kernel pads them, :func:`bucket_rows`)."""
    n_in, hidden, chunk, batch, steps = sizes
    rows = list(rows) if rows else [batch] * steps
    case = _product_case(n_in, hidden, chunk, batch, steps, block_rows)
    products = {b: _products(module, b, case) for b in backends}
    low = min(rows)
    if low < batch:  # the same products at the smallest step's rows (the tiles still chosen for the batch)
        small = {**case, "h": case["h"][:low], "dg": case["dg"][:low]}
        for b in backends:
            steps_small = {k: v for k, v in _products(module, b, small).items() if k.startswith("step ")}
            products[b].update({k.replace("step", "small"): v for k, v in steps_small.items()})
    best = _best_times(products, backends, timer)
    scale = steps / len(rows)  # the timed steps (capped) stand for the whole call
    blocks = sum(rows) * scale / case["x"].shape[0]
    weights = {"block": blocks, "grad": blocks, "pack": 1}
    seconds = {}
    for b in backends:
        t = best[b]
        fixed = sum(weights[name.split()[0]] * v for name, v in t.items() if name.split()[0] in weights)
        padded = [bucket_rows(r) if b in PADDED else r for r in rows]
        per_step = sum(
            _step_time(t[f"step {d}"], t.get(f"small {d}"), low, batch, r) for d in ("fwd", "bwd") for r in padded
        )
        seconds[b] = fixed + scale * per_step
    return seconds


#: The routes whose step products read a padded number of rows (:func:`bucket_rows`): oneDNN's.
PADDED = ("linear", "onednn")


def bucket_rows(m: int) -> int:
    """The rows a oneDNN step product reads for ``m`` (the kernel's ``bucket_rows``): ``m`` up to 4, then rounded
    up to 4 steps per doubling, so that a ragged batch meets few shapes."""
    if m <= 4:
        return m
    step = 1 << ((m - 1).bit_length() - 3)
    return -(-m // step) * step


def _step_time(full: float, small: float | None, low: int, batch: int, rows: int) -> float:
    """A step product's time at ``rows``, from its times at the batch's rows (``full``) and at the smallest
    step's (``small``, at ``low`` rows): on the line through both, or in proportion to ``full`` without it."""
    if small is None or low >= batch:
        return full * rows / batch
    return small + (full - small) * (rows - low) / (batch - low)


def _best_times(products: dict, backends: list[str], timer) -> dict[str, dict[str, float]]:
    """Each backend's best time for each of its products (see :func:`time_backends`)."""
    names = list(dict.fromkeys(name for b in backends for name in products[b]))
    best: dict[str, dict[str, float]] = {b: {} for b in backends}
    for rnd in range(ROUNDS + 1):
        # product by product, each backend in turn first: a slowdown of the machine (a neighbour's burst on a
        # shared host) falls on the same product of every backend, not on one backend's whole timing
        order = backends[rnd % len(backends) :] + backends[: rnd % len(backends)]
        for name in names:
            for b in (b for b in order if name in products[b]):
                product, times = products[b][name]
                start = timer()
                for _ in range(times):
                    product()
                if rnd:
                    best[b][name] = min(best[b].get(name, float("inf")), (timer() - start) / times)
    return best


def _product_case(n_in: int, hidden: int, chunk: int, batch: int, steps: int, block_rows: int = 256) -> dict:
    gen = torch.Generator().manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=gen) * 0.1
    gates = 4 * hidden + 2 * (hidden // chunk)
    rows = min(batch * steps, block_rows)  # a block of the sequence-wide products: their rate, not all their rows
    w_ih, w_hh = rnd(gates, n_in), rnd(gates, hidden)
    return {"h": rnd(batch, hidden), "dg": rnd(batch, gates), "tiles": batch, "x": rnd(rows, n_in), "dG": rnd(rows, gates), "hx": rnd(rows, hidden + n_in),
            "w_ih": w_ih, "w_hh": w_hh, "w_hh_t": w_hh.t().contiguous(), "w_ih_t": w_ih.t().contiguous()}  # fmt: skip


def _products(module: Any, backend: str, c: dict) -> dict[str, tuple[Callable[[], Any], int]]:
    """The products of a layer call on ``backend``, as callables with how many times to run each in a timing."""
    if backend == "mkl":
        mm = torch.mm
        return {"step fwd": (lambda: mm(c["h"], c["w_hh_t"]), 4), "step bwd": (lambda: mm(c["dg"], c["w_hh"]), 4),
                "block in": (lambda: mm(c["x"], c["w_ih_t"]), 1), "block dx": (lambda: mm(c["dG"], c["w_ih"]), 1),
                "grad dw": (lambda: mm(c["dG"].t(), c["hx"]), 1)}  # fmt: skip
    reorder, linear = torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise
    lin = lambda a, w: linear(a, w, None, "none", [], "")
    # the weights each route packs per call: the recurrent one both ways; the linear routes the input one too
    own = backend == "avx2"  # its own packing of the recurrent weight, for its own step products
    keys = (
        ("w_ih", "w_ih_t")
        if own
        else ("w_hh", "w_hh_t", "w_ih", "w_ih_t")
        if backend == "linear"
        else ("w_hh", "w_hh_t")
    )
    packed = {k: reorder(c[k], None) for k in keys}
    out: dict[str, tuple[Callable[[], Any], int]] = {"pack": (lambda: [reorder(c[k], None) for k in keys], 1)}
    if own:
        (gates, hidden), rows = c["w_hh"].shape, c["tiles"]  # the batch sets the tiles, not a step's rows
        fwd, bwd = module.avx2_pack(c["w_hh"], False, rows), module.avx2_pack(c["w_hh"], True, rows)
        out["pack own"] = (lambda: [module.avx2_pack(c["w_hh"], flip, rows) for flip in (False, True)], 1)
        out["step fwd"] = (lambda: module.avx2_matmul(c["h"], fwd, gates), 4)
        out["step bwd"] = (lambda: module.avx2_matmul(c["dg"], bwd, hidden), 4)
        out["grad dw"] = (lambda: module.avx2_weight_grad(c["dG"], c["hx"]), 1)
    else:
        out["step fwd"] = (lambda: lin(c["h"], packed["w_hh"]), 4)
        out["step bwd"] = (lambda: lin(c["dg"], packed["w_hh_t"]), 4)
    # the weight gradient adds each row block's product to the sum so far, as the kernel does (so does the oneDNN
    # matmul's input projection, onto the bias): the timing reads the sum too
    dw = torch.zeros(c["dG"].shape[1], c["hx"].shape[1])
    if backend == "linear":  # ATen's GEMM for the weight gradient
        out["grad dw"] = (lambda: dw.addmm_(c["dG"].t(), c["hx"]), 1)
    if backend in ("linear", "avx2"):
        out["block in"] = (lambda: lin(c["x"], packed["w_ih"]), 1)
        out["block dx"] = (lambda: lin(c["dG"], packed["w_ih_t"]), 1)
    else:  # oneDNN's matmul on the weights as stored
        y, dx = torch.zeros(c["x"].shape[0], c["w_ih"].shape[0]), torch.empty(c["dG"].shape[0], c["w_ih"].shape[1])
        out["block in"] = (lambda: module.matmul(c["x"], c["w_ih_t"], y, "onednn", True), 1)
        out["block dx"] = (lambda: module.matmul(c["dG"], c["w_ih"], dx, "onednn"), 1)
        out["grad dw"] = (lambda: module.matmul(c["dG"].t(), c["hx"], dw, "onednn", True), 1)
    return out


def _read(path: Path | None) -> dict:
    try:
        data = json.loads(path.read_text()) if path is not None and path.is_file() else {}
    except (OSError, ValueError):
        return {}  # a damaged cache is timed again and rewritten
    return data if isinstance(data, dict) else {}


def _write(path: Path, key: str, record: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {**_read(path), key: record})
    except OSError:
        pass  # a read-only build folder: the next process times again
