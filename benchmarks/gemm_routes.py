"""Where a CPU layer call's time goes: the rate (GFLOP/s) of each matrix product of one ON-LSTM forward+backward
on every route PyTorch offers for float32, beside the overall rate of ``nn.LSTM`` (oneDNN's fused LSTM) and of
the ON-LSTM layer, all in one process.

    python benchmarks/gemm_routes.py [--shapes 70x20x400x650x10 70x80x400x1150x10] [--threads 1] [--repeats 3]

The products of a call of T steps, batch B, input I, hidden H, chunk C (G = 4H + 2H/C gate columns, N = T*B rows):
per step ``h @ w_hh^T`` (B x H by H x G, forward) and ``dG @ w_hh`` (B x G by G x H, backward); over all rows the
input projection ``x @ w_ih^T``, ``d_x = dG @ w_ih`` and the weight gradient ``dG^T @ [h | x]``. Routes: ``mm``
(ATen's GEMM: MKL), ``linear`` (oneDNN's inner product on a weight packed once, ``mkldnn::_linear_pointwise``;
the products over all rows in blocks of 1,024 rows, as the C++ kernel runs them), for the weight gradient also
MKL in blocks of 1,024 rows and oneDNN's inner-product backward (``aten::mkldnn_linear_backward_weights``, its
operands converted to oneDNN tensors first, not timed). Each time is the best of ``--repeats`` after one untimed
call, for the products of one layer call (a step product times T). Read the rates against the ``nn.LSTM`` rows:
a layer built from separate products reaches ``nn.LSTM``'s speed only where its products run at that rate.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch

import onlstm

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
    return [
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["70x20x400x650x10", "70x80x400x1150x10"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if not hasattr(torch.ops.mkldnn, "_linear_pointwise") or not torch.backends.mkldnn.is_available():
        print("gemm_routes.py: this torch has no oneDNN linear ops; only MKL runs here", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, CPU, {torch.get_num_threads()} threads, best of {args.repeats}")
    for shape in args.shapes:
        T, B, I, H, C = (int(v) for v in shape.split("x"))
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
