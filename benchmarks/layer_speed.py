"""Forward+backward speed of the ON-LSTM layer against torch.nn.LSTM of the same size, same run.

    python benchmarks/layer_speed.py [--repeats 5] [--impls cpp,fused,reference] [--shapes ...]
    python benchmarks/layer_speed.py --device cuda          # triton, fused, reference vs cuDNN; fp32 and bf16
    python benchmarks/layer_speed.py --impls cpp,cpp:avx2,cpp:linear,cpp:mkl   # the C++ kernel's backends, one run
    python benchmarks/layer_speed.py --impls cpp:avx2-rows,cpp:avx2-outputs --shapes 70x20x400x650x10   # its tiles
    python benchmarks/layer_speed.py --compile --impls cpp,reference   # and each under torch.compile, beside

For each shape (T, B, input, hidden, chunk) it times ``out.sum().backward()`` of a one-layer
``nn.LSTM`` and of each ON-LSTM implementation, interleaved round by round so that drifts in the
machine's speed hit all of them alike, and reports the median tokens/s (T*B / time), the ratio to
``nn.LSTM`` (higher is better; 1.0 = as fast as nn.LSTM) and, when ``reference`` is measured, the
ratio to the reference step loop. On the CPU (float32) each row also gives the layer's achieved GFLOP/s (the
FLOPs of its matrix products, forward and backward: 6 (T B) G (input + hidden), G = 4 hidden for nn.LSTM and
2 hidden/chunk + 4 hidden for ON-LSTM) and, per shape, the GEMM roof: the rate each backend reaches on the
ON-LSTM layer's own products (each shape timed alone, best of 3, weighted by how often the layer runs it),
measured in the same run: MKL (torch.mm with oneDNN disabled) and oneDNN (the matmul the C++ kernel calls).
``% roof`` is the row's GFLOP/s against the better backend's (over 100 where the kernel's packed step products beat
one plain product of the same shape). Where a ``cpp`` row runs, a line "Products alone" gives each backend's
products of one call, timed as the kernel times them to choose, and ``nn.LSTM``'s whole call over that: the ratio
the layer could reach if its element-wise work, copies and set-up took no time. On CUDA every timing ends with ``torch.cuda.synchronize()``; one
warm-up round (kernel compilation included) is not timed. ``--dtypes bf16`` (or ``fp16``) runs every
model, ``nn.LSTM`` too, under ``torch.autocast``.

``cpp:BACKEND`` (``avx2``, ``linear``, ``mkl``, ``onednn``): the C++ kernel with its float32 products on that
backend, set before each of the row's calls (a ``cpp`` or ``auto`` row gets the backend the kernel chose), so the
backends are compared in one process, interleaved like every row; a backend that does not run here is left out
with a note. ``cpp:avx2-rows`` and ``cpp:avx2-outputs`` force the orientation of the avx2 step products' tiles
(the batch's rows or the outputs along the vector lanes; ``cpp:avx2`` lets the batch decide, as the layer does).

``fused`` on CUDA: the fused kernel is registered for the CPU only; this script registers it for CUDA as
well, under the name ``fused_cuda``, to measure it there. ``triton`` on the CPU runs Triton's
interpreter (needs ``TRITON_INTERPRET=1``): it only checks that the code path runs, it is no speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

import onlstm
from bench_cli import COMPILED, command, parser, positive_int
from onlstm.device import machine_line
from onlstm.nn import capabilities, cpp_gemm, kernels
from onlstm.nn.fused import FusedKernel

SHAPES = [(70, 20, 400, 650, 10), (70, 80, 400, 1150, 10), (35, 20, 200, 200, 10)]
PAPER_LAYER = (70, 20, 400, 1150, 10)  # the paper's language-model layer (docs/lm.md)
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # autocast dtype (None: off)


def parse_shape(text: str) -> tuple[int, ...]:
    """``TxBxINxHxC`` as five positive integers (argparse says what is wrong otherwise, in one line)."""
    try:
        values = tuple(int(v) for v in text.split("x"))
    except ValueError:
        values = ()
    if len(values) != 5 or min(values) < 1:
        raise argparse.ArgumentTypeError(f"a shape is TxBxINxHxC, five positive integers: got {text!r}")
    if values[3] % values[4]:  # the layer is cut into chunks of C units
        raise argparse.ArgumentTypeError(f"{text!r}: the hidden size H={values[3]} is not a multiple of C={values[4]}")
    return values


#: ``cpp:avx2-rows`` and ``cpp:avx2-outputs``: the avx2 backend with its step products' tiles forced to one
#: orientation (the batch's rows, or the outputs, along the vector lanes; ``cpp:avx2`` lets the batch decide)
TILES = ("rows", "outputs")


def backend_of(impl: str) -> str | None:
    """The C++ backend a ``cpp:BACKEND`` row names (None for any other row)."""
    if not impl.startswith("cpp:"):
        return None
    backend = impl.split(":", 1)[1]
    return "avx2" if backend in (f"avx2-{t}" for t in TILES) else backend


def tiles_of(impl: str) -> str:
    """The orientation a ``cpp:avx2-TILES`` row forces, else ``auto`` (the kernel's rule)."""
    return impl.rsplit("-", 1)[1] if impl.startswith("cpp:avx2-") else "auto"


def runs_cpp(impl: str) -> bool:
    """Whether a row runs the C++ kernel (``auto`` does on the CPU), so that its backend is set before each call."""
    return impl in ("cpp", "auto") or backend_of(impl) is not None


def on_backend(run, backend: str | None, tiles: str = "auto"):
    """``run`` with the C++ kernel's products on ``backend``, or for None on the one the kernel chooses (timed at
    the first float32 call of each layer size), and the avx2 tiles' orientation ``tiles``, set before each call: the
    rows of one process alternate, each on its own backend."""
    from onlstm.nn.cpp_kernel import load_extension

    ext, kernel = load_extension(), kernels.load_kernel("cpp")
    if ext is None or kernel is None:  # no C++ kernel here: nothing to set (an auto row runs another kernel)
        return run

    def go():
        kernel.pin(backend)  # None: the kernel's own choice for each layer size
        if hasattr(ext, "set_avx2_tiles"):
            ext.set_avx2_tiles(tiles)
        run()

    return go


def step_fn(module, x, device: torch.device, autocast_dtype):
    def run():
        for p in module.parameters():
            p.grad = None
        x.grad = None
        with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            out = module(x)[0]
        out.float().sum().backward()

    return run


def impl_name(impl: str, device: torch.device) -> str:
    """The ``impl=`` value that runs ``impl`` on ``device`` (registering the two benchmark-only variants)."""
    if impl == "fused" and device.type == "cuda":
        floats = (torch.float32, torch.float64)
        kernels.register_kernel(
            kernels.KernelSpec("fused_cuda", FusedKernel, ("cuda",), floats, priority=-100), replace=True
        )
        return "fused_cuda"
    if impl == "triton" and device.type == "cpu":
        from onlstm.nn.triton_kernel import register_interpreter_kernel

        if os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit(
                "layer_speed.py: --impls triton on the CPU needs TRITON_INTERPRET=1 (Triton's interpreter)"
            )
        return register_interpreter_kernel()
    return impl


def runs_here(impl: str, cuda: bool) -> bool:
    """False, with a note, for a ``cpp`` or ``cpp:BACKEND`` row where the C++ kernel or that backend does not run
    (or on CUDA)."""
    from onlstm.nn.cpp_kernel import extension_error, load_extension

    if impl == "cpp" and not cuda and load_extension() is None:
        print(f"note: cpp left out: the C++ kernel is not available ({extension_error()})")
        return False
    backend = backend_of(impl)
    if backend is None:
        return True

    ext = None if cuda else load_extension()
    runs = ext.gemm_backends() if ext is not None else []
    if backend not in runs:
        why = "the C++ kernel is a CPU kernel" if cuda else extension_error() or f"runs here: {', '.join(runs)}"
        print(f"note: {impl} left out: {backend} does not run here ({why})")
    return backend in runs


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def ran_impl(module: onlstm.ONLSTM, device: torch.device, autocast_dtype) -> str:
    """The implementation ``module`` runs in :func:`step_fn`: its ``impl``, or another where that kernel does not
    fit the device or failed its self-check under the same autocast setting (onlstm.nn.selfcheck)."""
    with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
        return module.resolved_impl(device)


def layer_flops(shape, lstm: bool) -> float:
    """FLOPs of the layer's matrix products, forward and backward (element-wise work not counted)."""
    T, B, I, H, C = shape
    G = 4 * H if lstm else 2 * (H // C) + 4 * H
    return 6.0 * T * B * G * (I + H)


def layer_products(shape):
    """The C++ kernel's products ``(count, M, K, N, a_transposed)``: input projection, the per-step recurrent
    products forward and backward, the weight gradients (dG^T [h | x]) and the input gradient."""
    T, B, I, H, C = shape
    N, G = T * B, 2 * (H // C) + 4 * H
    return [(1, N, I, G, False), (T, B, H, G, False), (T, B, G, H, False), (1, G, N, H + I, True), (1, N, G, I, False)]


def gemm_roof(shape, backend: str, repeats: int = 3) -> float:
    """GFLOP/s of ``backend`` (``mkl`` or ``onednn``) on the layer's products, NaN where it cannot run."""
    from onlstm.nn.cpp_kernel import load_extension

    ext = load_extension()
    if backend == "onednn" and (ext is None or ext.gemm_why_not_onednn()):
        return float("nan")
    flops = seconds = 0.0
    mkldnn_was = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = backend == "onednn"  # torch.mm in float32 is MKL's either way; made sure
    try:
        for count, M, K, N, a_t in layer_products(shape):
            f, s = time_product(ext, backend, M, K, N, a_t, repeats)
            flops, seconds = flops + count * f, seconds + count * s
    finally:
        torch.backends.mkldnn.enabled = mkldnn_was
    return flops / seconds / 1e9


def time_product(ext, backend: str, M: int, K: int, N: int, a_transposed: bool, repeats: int):
    """FLOPs and best time of one (M, K) x (K, N) product through ``backend``."""
    a = torch.randn(K, M).t() if a_transposed else torch.randn(M, K)
    b, c = torch.randn(K, N), torch.empty(M, N)
    best = float("inf")
    for _ in range(repeats + 1):  # the first call builds what the backend caches
        t0 = time.perf_counter()
        if backend == "onednn":
            ext.matmul(a, b, c, "onednn")
        else:
            torch.mm(a, b, out=c)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * M * K * N, best


def products_ceiling(shape, lstm_seconds: float) -> str:
    """The kernel's own timing of each backend's products for one call of ``shape`` (``cpp_gemm.time_backends``, as
    the kernel times them to choose: each product alone, warm) against ``nn.LSTM``'s whole call: the ratio the layer
    would reach if nothing but its products took time, an upper bound on what the backend can give."""
    from onlstm.nn.cpp_kernel import load_extension

    T, B, I, H, C = shape
    ext = load_extension()
    backends = cpp_gemm.runnable(ext) if ext is not None else []
    sizes, kernel_block = (I, H, C, B, T), 1024  # the blocks of the kernel's sequence-wide products, not a sample
    seconds = (
        cpp_gemm.time_backends(ext, backends, sizes, time.perf_counter, block_rows=kernel_block) if backends else {}
    )
    each = ", ".join(
        f"{b} {1e3 * t:.4g} ms ({lstm_seconds / t:.2f}x)" for b, t in sorted(seconds.items(), key=lambda kv: kv[1])
    )
    return (
        f"Products alone of T={T} B={B} H={H} (the kernel's timing; in brackets nn.LSTM's whole call, "
        f"{1e3 * lstm_seconds:.4g} ms, over it: the ceiling of a layer that did nothing else): {each or 'no C++ kernel'}"
    )


def roof_lines(shape, label: str, med: dict[str, float]) -> tuple[dict[str, float], str]:
    """The GEMM roof of each library on the layer's products, and the lines that say it (float32 on the CPU); with
    a C++ kernel row, also its products alone against ``nn.LSTM``'s median call in ``med``."""
    roofs = {b: gemm_roof(shape, b) for b in ("mkl", "onednn")}
    line = f"GEMM roof on the products of {label}: MKL {roofs['mkl']:.0f} GFLOP/s, oneDNN {roofs['onednn']:.0f}"
    if any(map(runs_cpp, med)):
        line += "\n" + products_ceiling(shape, med["nn.LSTM"])
    choice = getattr(kernels.load_kernel("cpp"), "choice", None) if {"cpp", "auto"} & set(med) else None
    if choice is not None:  # the choice timed for this layer size (its first unpinned call), which cpp/auto ran
        line += f"\nThe C++ kernel's products at {label}: {choice.describe()}"
    return roofs, line


def measure(shape, impls, dtype_name, device, args):
    """Rows ``(shape, dtype, impl, tokens/s, x nn.LSTM, x reference, GFLOP/s, % roof)`` of one shape and dtype
    (the last two NaN on CUDA and under autocast), and the GEMM roof line (empty there)."""
    T, B, I, H, C = shape
    torch.manual_seed(0)
    x = torch.randn(T, B, I, device=device, requires_grad=True)
    mods = {"nn.LSTM": torch.nn.LSTM(I, H).to(device)}
    for impl in impls:
        name = "cpp" if backend_of(impl) else impl_name(impl, device)
        mods[impl] = onlstm.ONLSTM(I, H, chunk_size=C, impl=name, master_input=args.master_input).to(device)
    fns = {k: step_fn(m, x, device, DTYPES[dtype_name]) for k, m in mods.items()}
    if args.compile:  # beside each ON-LSTM row, the same module under torch.compile (inductor), in the same rounds
        compiled = {f"{k}{COMPILED}": torch.compile(m) for k, m in mods.items() if k != "nn.LSTM"}
        fns.update({k: step_fn(m, x, device, DTYPES[dtype_name]) for k, m in compiled.items()})
    if device.type == "cpu" and any(map(runs_cpp, fns)):  # a backend per row
        fns = {k: on_backend(f, backend_of(k), tiles_of(k)) if runs_cpp(k) else f for k, f in fns.items()}
    for k, f in list(fns.items()):  # warm-up (kernel build and compilation); a failure skips that row only
        try:
            t0 = time.perf_counter()
            f()
            sync(device)
            if k.endswith(COMPILED):
                print(
                    f"note: {k} at T={T} B={B} H={H} {dtype_name}: first call (compiling) {time.perf_counter() - t0:.1f} s"
                )
        except Exception as exc:
            if k == "nn.LSTM":
                raise
            print(f"note: {k} failed at T={T} B={B} H={H} {dtype_name}, left out: {type(exc).__name__}: {exc}")
            del fns[k]
    for k in [k for k in fns if k != "nn.LSTM"]:  # a row must time the kernel its label names
        module = mods[k.removesuffix(COMPILED)]
        ran = ran_impl(module, device, DTYPES[dtype_name])
        if ran != module.impl and module.impl != "auto":
            why = "it does not fit the device or failed its self-check: onlstm info"
            print(f"note: {k} would run {ran} at T={T} B={B} H={H} {dtype_name} ({why}), left out")
            del fns[k]
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.repeats):
        for k, f in fns.items():
            sync(device)
            t0 = time.perf_counter()
            f()
            sync(device)
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(ts) for k, ts in times.items()}
    label = f"T={T} B={B} in={I} H={H} C={C}"
    ref = med.get("reference")
    nan = float("nan")
    roofs, roof_line = (
        roof_lines(shape, label, med) if device.type == "cpu" and DTYPES[dtype_name] is None else ({}, "")
    )
    best = max((r for r in roofs.values() if r == r), default=nan)
    rows = []
    for k, m in med.items():
        gflops = layer_flops(shape, k == "nn.LSTM") / m / 1e9 if roofs else nan
        rows.append((label, dtype_name, k, T * B / m, med["nn.LSTM"] / m, (ref / m) if ref else nan, gflops,
                     100 * gflops / best))  # fmt: skip
    return rows, roof_line


@command
def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--shapes", type=parse_shape, nargs="+", default=None, metavar="TxBxINxHxC")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument(
        "--impls",
        default=None,
        help="comma-separated ON-LSTM implementations (impl= values: cpp, fused, reference, triton, auto, ...; "
        "cpp:BACKEND for the C++ kernel on one backend: avx2, linear, mkl, onednn; cpp:avx2-rows and "
        "cpp:avx2-outputs: avx2 with its step tiles forced to the rows or the outputs along the vector lanes); "
        "default cpp,fused,reference on the CPU and triton,fused,reference on CUDA",
    )
    ap.add_argument("--dtypes", default=None, help="comma-separated from fp32,bf16,fp16 (default: fp32 on the CPU, "
                    "fp32,bf16 on CUDA); bf16/fp16 run under torch.autocast")  # fmt: skip
    ap.add_argument("--repeats", type=positive_int, default=5, help="timed rounds per shape (median reported)")
    ap.add_argument("--master-input", default="paper", choices=["paper", "reverse"])
    ap.add_argument("--compile", action="store_true", help="beside each ON-LSTM row, a row IMPL+compile: the same "
                    "module under torch.compile (the first, compiling call is not timed; its seconds are printed)")  # fmt: skip
    ap.add_argument("--threads", type=positive_int, default=None, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            f"layer_speed.py: --device cuda but no CUDA device is visible (torch {torch.__version__})", file=sys.stderr
        )
        return 2
    cuda = device.type == "cuda"
    impls = [s for s in (args.impls or ("triton,fused,reference" if cuda else "cpp,fused,reference")).split(",") if s]
    if bad := [i for i in impls if i.partition(":")[0] not in kernels.impl_choices()]:
        ap.error(f"--impls: unknown {', '.join(bad)}; choose from {', '.join(kernels.impl_choices())} (or cpp:BACKEND)")
    if bad := [i for i in impls if backend_of(i) is not None and backend_of(i) not in cpp_gemm.BACKENDS]:
        ap.error(f"--impls: {', '.join(bad)}: cpp:BACKEND takes one of {', '.join(cpp_gemm.BACKENDS)}")
    dtypes = [s for s in (args.dtypes or ("fp32,bf16" if cuda else "fp32")).split(",") if s]
    if bad := [d for d in dtypes if d not in DTYPES]:
        ap.error(f"--dtypes: unknown {bad}; choose from {sorted(DTYPES)}")
    for dt in [d for d in dtypes if DTYPES[d] is not None and not cuda]:  # every row is a ratio to nn.LSTM
        if why := capabilities.lstm_autocast_error("cpu", DTYPES[dt]):
            print(f"note: {dt} left out: nn.LSTM under {dt} autocast is {why}")
            dtypes.remove(dt)
    if not dtypes:
        return 0
    shapes = args.shapes or (SHAPES + [PAPER_LAYER] if cuda else SHAPES)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    where = f"torch {torch.__version__}, {torch.cuda.get_device_name()}" if cuda else machine_line()
    print(f"{where}; forward+backward, median of {args.repeats}")
    if not cuda and "triton" in impls:
        print("note: triton on the CPU runs Triton's interpreter: a check that it runs, not a speed")
    impls = [i for i in impls if runs_here(i, cuda)]
    results = [measure(shape, impls, dt, device, args) for shape in shapes for dt in dtypes]
    rows = [row for part, _ in results for row in part]
    w = max(len(r[0]) for r in rows)
    head = f"{'shape':<{w}}  {'dtype':<5} {'impl':<10} {'tokens/s':>10}  {'x nn.LSTM':>9}  {'x reference':>11}"
    print(head + f"  {'GFLOP/s':>7}  {'% roof':>6}")
    for shape, dt, k, tps, ratio, vs_ref, gflops, roof in rows:
        print(
            f"{shape:<{w}}  {dt:<5} {k:<10} {tps:>10.0f}  {ratio:>9.2f}  {vs_ref:>11.2f}  {gflops:>7.0f}  {roof:>6.0f}"
        )
    for _, line in results:
        if line:
            print(line)
    cpp = kernels.load_kernel("cpp") if not cuda and {"cpp", "auto"} & set(impls) else None
    if cpp is not None and getattr(cpp, "choice", None) is not None:  # each layer size's choice: under its rows
        print(f"C++ kernel {cpp.describe()} (the last shape's choice)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
