"""Where a CPU layer call's time goes: the rate (GFLOP/s) of each matrix product of one ON-LSTM forward+backward
on every route PyTorch offers for float32 and on the C++ kernel's own AVX2 products, beside the overall
rate of ``nn.LSTM`` (oneDNN's fused LSTM) and of the ON-LSTM layer, all in one process.

    python benchmarks/gemm_routes.py [--shapes 70x20x400x650x10 70x80x400x1150x10] [--threads 1] [--repeats 3]
    python benchmarks/gemm_routes.py --in-situ      # where one layer call's time goes, inside the C++ kernel

The products of a call of T steps, batch B, input I, hidden H, chunk C (G = 4H + 2H/C gate columns, N = T*B rows):
per step ``h @ w_hh^T`` (B x H by H x G, forward) and ``dG @ w_hh`` (B x G by G x H, backward); over all rows the
input projection ``x @ w_ih^T``, ``d_x = dG @ w_ih`` and the weight gradient ``dG^T @ [h | x]``. Routes: ``mm``
(ATen's GEMM: MKL), ``linear`` (oneDNN's inner product on a weight packed once, ``mkldnn::_linear_pointwise``;
the products over all rows in blocks of 1,024 rows, as the C++ kernel runs them), ``mkl packed`` for the step
products (MKL's packed GEMM: the weight packed once, as the oneDNN routes pack theirs; where torch's MKL exports
it), ``matmul`` for the products over all rows (oneDNN's matmul on the weights as stored, in blocks of 1,024
rows: the ``onednn`` backend's route, where oneDNN runs float32), ``avx2`` for the step products
and the weight gradient (the kernel's own code: the ``avx2`` backend, where the CPU has AVX2), for the weight gradient also
MKL in blocks of 1,024 rows and oneDNN's inner-product backward (``aten::mkldnn_linear_backward_weights``, its
operands converted to oneDNN tensors first, not timed). Each time is the best of ``--repeats`` after one untimed
call, for the products of one layer call (a step product times T). Read the rates against the ``nn.LSTM`` rows:
a layer built from separate products reaches ``nn.LSTM``'s speed only where its products run at that rate.

``--in-situ`` answers the other half of the question: how much of a layer call is products at all. It runs the
ON-LSTM layer's forward+backward (``impl="cpp"``) under ``torch.profiler`` and sums the operators' own time by
kind: the packed-linear products, ATen's GEMM (MKL), weight packing, copies and fills, the kernel's own code
(its operators and autograd function: its element-wise work, and what it computes without the dispatcher, the step
products of the ``avx2`` backend, oneDNN's matmul on the ``onednn`` one) and the rest (autograd, Python). The profiler adds a little time of its own to every operator.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import onlstm
from bench_cli import command, parser, positive_int
from layer_speed import parse_shape  # one reading of TxBxINxHxC for both scripts
from onlstm.device import machine_line
from onlstm.nn import kernels
from onlstm.nn.cpp_kernel import load_extension

BLOCK = 1024


def best_of(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def blocks(n: int) -> list[tuple[int, int]]:
    return [(s, min(BLOCK, n - s)) for s in range(0, n, BLOCK)]


def product_routes(T: int, B: int, I: int, H: int, C: int) -> list[tuple[str, str, float, Callable[[], object]]]:
    """(product, route, its FLOPs per layer call, a callable running it for one layer call)."""
    G, N = 4 * H + 2 * (H // C), T * B
    r = lambda *shape: torch.randn(*shape) * 0.1
    h, dg, x, dG, hx = r(B, H), r(B, G), r(N, I), r(N, G), r(N, H + I)
    w_hh, w_ih = r(G, H), r(G, I)
    w_hh_t, w_ih_t = w_hh.t().contiguous(), w_ih.t().contiguous()
    pack, linear = torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise
    lin = lambda a, w: linear(a, w, None, "none", [], "")
    p_hh, p_hh_t, p_ih, p_ih_t = (pack(w, None) for w in (w_hh, w_hh_t, w_ih, w_ih_t))
    d_w = torch.empty(G, H + I)

    def blocked_dw() -> None:
        d_w.zero_()
        for s, n in blocks(N):
            d_w.addmm_(dG[s : s + n].t(), hx[s : s + n])

    dG_m, hx_m = dG.to_mkldnn(), hx.to_mkldnn()
    step, rows, grad = 2 * T * B * H * G, 2 * N * I * G, 2 * N * G * (H + I)
    own = own_routes(T, h, dg, w_hh, step) + own_grad_route(dG, hx, grad) + mkl_packed_routes(T, h, dg, w_hh, step)
    own += matmul_routes(x, dG, hx, w_ih, rows, grad)
    return own + [
        ("step forward", "mm", step, lambda: [torch.mm(h, w_hh_t) for _ in range(T)]),
        ("step forward", "linear", step, lambda: [lin(h, p_hh) for _ in range(T)]),
        ("step backward", "mm", step, lambda: [torch.mm(dg, w_hh) for _ in range(T)]),
        ("step backward", "linear", step, lambda: [lin(dg, p_hh_t) for _ in range(T)]),
        ("input projection", "mm", rows, lambda: torch.mm(x, w_ih_t)),
        ("input projection", "linear", rows, lambda: [lin(x[s : s + n], p_ih) for s, n in blocks(N)]),
        ("d_x", "mm", rows, lambda: torch.mm(dG, w_ih)),
        ("d_x", "linear", rows, lambda: [lin(dG[s : s + n], p_ih_t) for s, n in blocks(N)]),
        ("weight gradient", "mm", grad, lambda: torch.mm(dG.t(), hx)),
        ("weight gradient", "mm blocks", grad, blocked_dw),
        ("weight gradient", "oneDNN ip", grad, lambda: torch.ops.aten.mkldnn_linear_backward_weights(dG_m, hx_m, d_w, False)),
    ]  # fmt: skip


def own_kernel(backend: str = "avx2"):
    """The compiled kernel where its ``backend`` runs here (``avx2``: its own AVX2 products), else None."""
    ext = load_extension()
    return ext if ext is not None and backend in ext.gemm_backends() else None


def own_grad_route(dG, hx, flops: float) -> list[tuple[str, str, float, Callable[[], object]]]:
    """The weight gradient on the C++ kernel's own blocked AVX2 product, where it runs here."""
    ext = own_kernel()
    return [] if ext is None else [("weight gradient", "avx2", flops, lambda: ext.avx2_weight_grad(dG, hx))]


def matmul_routes(x, dG, hx, w_ih, rows: float, grad: float) -> list[tuple[str, str, float, Callable[[], object]]]:
    """The products over all rows on oneDNN's matmul, as the ``onednn`` backend runs them (in blocks of 1,024 rows;
    the input projection and the weight gradient adding each block to the sum so far), where it runs here."""
    ext = own_kernel("onednn")
    if ext is None:
        return []
    N, (G, I) = x.shape[0], w_ih.shape
    w_ih_t, y, dx, d_w = w_ih.t().contiguous(), torch.zeros(N, G), torch.empty(N, I), torch.zeros(G, hx.shape[1])

    def blocked(operands: Callable, add: bool) -> Callable[[], torch.Tensor]:
        """``operands(s, n)``: a, b and c of the block of ``n`` rows from ``s``; the run returns the whole result."""

        def run() -> torch.Tensor:
            for s, n in blocks(N):
                ext.matmul(*operands(s, n), "onednn", add)
            return operands(0, N)[2]

        return run

    return [
        ("input projection", "matmul", rows, blocked(lambda s, n: (x[s : s + n], w_ih_t, y[s : s + n]), True)),
        ("d_x", "matmul", rows, blocked(lambda s, n: (dG[s : s + n], w_ih, dx[s : s + n]), False)),
        ("weight gradient", "matmul", grad, blocked(lambda s, n: (dG[s : s + n].t(), hx[s : s + n], d_w), True)),
    ]  # fmt: skip


def own_routes(T: int, h, dg, w_hh, flops: float) -> list[tuple[str, str, float, Callable[[], object]]]:
    """The step products on the C++ kernel's own AVX2 code, where it runs here."""
    ext = own_kernel()
    if ext is None:
        return []
    G, H = w_hh.shape
    fwd, bwd = ext.avx2_pack(w_hh, False, h.shape[0]), ext.avx2_pack(w_hh, True, h.shape[0])
    return [
        ("step forward", "avx2", flops, lambda: [ext.avx2_matmul(h, fwd, G) for _ in range(T)]),
        ("step backward", "avx2", flops, lambda: [ext.avx2_matmul(dg, bwd, H) for _ in range(T)]),
    ]


class MklPacked:
    """MKL's packed GEMM (``cblas_sgemm_pack`` once, ``cblas_sgemm_compute`` at every step: the weight converted to
    MKL's internal layout once per call, as the kernel's oneDNN routes pack theirs), called through ctypes in
    torch's own library, which links MKL statically; :meth:`find` is None where that library does not export it
    (a torch built without MKL, or on OpenBLAS)."""

    ROW_MAJOR, NO_TRANS, TRANS, B_MATRIX, PACKED = 101, 111, 112, 162, 151  # MKL's CBLAS enumerations

    def __init__(self, lib: ctypes.CDLL):
        self.size, self.pack, self.compute = (
            lib.cblas_sgemm_pack_get_size,
            lib.cblas_sgemm_pack,
            lib.cblas_sgemm_compute,
        )
        self.size.restype, self.size.argtypes = ctypes.c_size_t, [ctypes.c_int] * 4
        self.pack.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        self.compute.argtypes = [ctypes.c_int] * 6 + [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                                      ctypes.c_float, ctypes.c_void_p, ctypes.c_int]  # fmt: skip

    @classmethod
    def find(cls) -> MklPacked | None:
        try:
            return cls(ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")))
        except (OSError, AttributeError):
            return None

    def product(self, a: torch.Tensor, w: torch.Tensor, transposed: bool) -> Callable[[], torch.Tensor]:
        """``a @ w.t()`` (``transposed``) or ``a @ w``, ``w`` packed now; the callable computes it with the packing."""
        (m, k), n = a.shape, w.shape[0] if transposed else w.shape[1]
        packed = torch.empty(-(-self.size(self.B_MATRIX, m, n, k) // 4))
        trans = self.TRANS if transposed else self.NO_TRANS
        self.pack(self.ROW_MAJOR, self.B_MATRIX, trans, m, n, k, 1.0, w.data_ptr(), w.shape[1], packed.data_ptr())
        out = torch.empty(m, n)

        def run() -> torch.Tensor:
            self.compute(self.ROW_MAJOR, self.NO_TRANS, self.PACKED, m, n, k, a.data_ptr(), k, packed.data_ptr(),
                         w.shape[1], 0.0, out.data_ptr(), n)  # fmt: skip
            return out

        return run


def mkl_packed_routes(T: int, h, dg, w_hh, flops: float) -> list[tuple[str, str, float, Callable[[], object]]]:
    """The step products on MKL's packed GEMM (issue #46 named it a candidate), where torch's MKL exports it."""
    mkl = MklPacked.find()
    if mkl is None:
        return []
    fwd, bwd = mkl.product(h, w_hh, True), mkl.product(dg, w_hh, False)
    return [
        ("step forward", "mkl packed", flops, lambda: [fwd() for _ in range(T)]),
        ("step backward", "mkl packed", flops, lambda: [bwd() for _ in range(T)]),
    ]


def layer_rows(T: int, B: int, I: int, H: int, C: int, repeats: int) -> list[tuple[str, str, float, float]]:
    """(what, pass, FLOPs, seconds) of ``nn.LSTM`` and the ON-LSTM layer, forward alone and forward+backward."""
    x = torch.randn(T, B, I, requires_grad=True)
    out = []
    for name, module, gates in (("nn.LSTM", torch.nn.LSTM(I, H), 4 * H), ("ON-LSTM", onlstm.ONLSTM(I, H, chunk_size=C), 4 * H + 2 * (H // C))):  # fmt: skip
        flops = 2 * T * B * gates * (I + H)

        def forward(m=module) -> None:
            with torch.no_grad():
                m(x)

        def both(m=module) -> None:
            m.zero_grad(set_to_none=True)
            m(x)[0].sum().backward()

        out.append((name, "forward", flops, best_of(forward, repeats)))
        out.append((name, "forward+backward", 3 * flops, best_of(both, repeats)))
    return out


OWN = "the kernel's own code (avx2: its step products; onednn: its matmul products)"
#: ``--in-situ``: the profiler's operator names, by kind (the first kind whose test a name passes).
IN_SITU_KINDS = (
    ("products: packed linear (oneDNN)", lambda op: op == "mkldnn::_linear_pointwise"),
    ("products: ATen GEMM (MKL)", lambda op: op in ("aten::mm", "aten::addmm", "aten::addmm_")),
    ("weight packing", lambda op: op == "mkldnn::_reorder_linear_weight"),
    ("copies, fills, sums", lambda op: op in ("aten::copy_", "aten::fill_", "aten::zero_", "aten::clone", "aten::sum", "aten::add_")),
    # the kernel's operators (onlstm_cpu_<build>::forward, ::backward) and its autograd function: their own time is
    # the element-wise work and the products computed without the dispatcher (avx2's, oneDNN's matmul)
    (OWN, lambda op: op.startswith(("_KernelFunction", "onlstm_cpu_"))),
    ("the rest (autograd, Python, views)", lambda op: True),
)  # fmt: skip


def in_situ(T: int, B: int, I: int, H: int, C: int, repeats: int) -> list[tuple[str, float]]:
    """(kind, seconds per call) of one ON-LSTM forward+backward through the C++ kernel, by operators' own time."""
    from torch.profiler import ProfilerActivity, profile

    module, x = onlstm.ONLSTM(I, H, chunk_size=C, impl="cpp"), torch.randn(T, B, I, requires_grad=True)

    def call() -> None:
        module.zero_grad(set_to_none=True)
        module(x)[0].sum().backward()

    call()  # builds the kernel, packs nothing twice: the profile sees calls as a run makes them
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            call()
    totals = dict.fromkeys((kind for kind, _ in IN_SITU_KINDS), 0.0)
    for event in prof.key_averages():
        kind = next(kind for kind, test in IN_SITU_KINDS if test(event.key))
        totals[kind] += event.self_cpu_time_total / 1e6 / repeats
    return list(totals.items())


def print_in_situ(T: int, B: int, I: int, H: int, C: int, repeats: int) -> None:
    rows = in_situ(T, B, I, H, C, repeats)
    total = sum(s for _, s in rows)
    cpp = kernels.load_kernel("cpp")
    print(f"\nT={T} B={B} in={I} H={H} C={C}: one ON-LSTM forward+backward, C++ kernel {cpp.describe()}")
    width = max(len(kind) for kind, _ in rows)
    print(f"{'kind':<{width}} {'ms':>8} {'share':>6}")
    for kind, s in rows:
        print(f"{kind:<{width}} {1e3 * s:>8.1f} {100 * s / total:>5.1f}%")
    print(f"{'all (profiled)':<{width}} {1e3 * total:>8.1f}")


@command
def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", type=parse_shape, default=[(70, 20, 400, 650, 10), (70, 80, 400, 1150, 10)])
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--repeats", type=positive_int, default=3)
    ap.add_argument("--in-situ", action="store_true", help="profile the layer's calls instead of timing products")
    args = ap.parse_args(argv)
    if not hasattr(torch.ops.mkldnn, "_linear_pointwise") or not torch.backends.mkldnn.is_available():
        print("gemm_routes.py: this torch has no oneDNN linear ops; only MKL runs here", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    how = f"the mean of {args.repeats} profiled calls" if args.in_situ else f"best of {args.repeats}"
    print(f"{machine_line()}; {how}")
    for T, B, I, H, C in args.shapes:
        if args.in_situ:
            print_in_situ(T, B, I, H, C, args.repeats)
            continue
        print(f"\nT={T} B={B} in={I} H={H} C={C}: one layer call's products")
        print(f"{'product':<18} {'route':<11} {'ms':>8} {'GFLOP/s':>8}")
        for product, route, flops, fn in product_routes(T, B, I, H, C):
            s = best_of(fn, args.repeats)
            print(f"{product:<18} {route:<11} {1e3 * s:>8.1f} {flops / s / 1e9:>8.1f}")
        for name, what, flops, s in layer_rows(T, B, I, H, C, args.repeats):
            print(f"{name + ' ' + what:<30} {1e3 * s:>8.1f} {flops / s / 1e9:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
