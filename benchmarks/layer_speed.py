"""Forward+backward speed of the ON-LSTM layer against torch.nn.LSTM of the same size, same run.

    python benchmarks/layer_speed.py [--repeats 5] [--impls cpp,fused,reference] [--shapes ...]

For each shape (T, B, input, hidden, chunk) it times ``out.sum().backward()`` of a one-layer
``nn.LSTM`` and of each ON-LSTM implementation, interleaved round by round so that drifts in the
machine's speed hit all of them alike, and reports the median tokens/s (T*B / time) and the ratio
to ``nn.LSTM`` (higher is better; 1.0 = as fast as nn.LSTM).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import onlstm

SHAPES = [(70, 20, 400, 650, 10), (70, 80, 400, 1150, 10), (35, 20, 200, 200, 10)]


def parse_shape(s: str):
    vals = tuple(int(v) for v in s.split("x"))
    if len(vals) != 5:
        raise argparse.ArgumentTypeError(f"shape must be TxBxINxHxC, got {s!r}")
    return vals


def step_fn(module, x):
    def run():
        for p in module.parameters():
            p.grad = None
        x.grad = None
        out = module(x)[0]
        out.sum().backward()

    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", type=parse_shape, nargs="+", default=SHAPES, metavar="TxBxINxHxC")
    ap.add_argument(
        "--impls",
        default="cpp,fused,reference",
        help="comma-separated ON-LSTM implementations (impl= values: cpp, fused, reference, auto, ...)",
    )
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds per shape (median reported)")
    ap.add_argument("--master-input", default="paper", choices=["paper", "reverse"])
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    impls = [s for s in args.impls.split(",") if s]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, forward+backward, median of {args.repeats}")
    rows = []
    for T, B, I, H, C in args.shapes:
        torch.manual_seed(0)
        x = torch.randn(T, B, I, requires_grad=True)
        mods = {"nn.LSTM": torch.nn.LSTM(I, H)}
        for impl in impls:
            mods[impl] = onlstm.ONLSTM(I, H, chunk_size=C, impl=impl, master_input=args.master_input)
        fns = {k: step_fn(m, x) for k, m in mods.items()}
        times = {k: [] for k in fns}
        for f in fns.values():  # warm-up (and kernel build)
            f()
        for _ in range(args.repeats):
            for k, f in fns.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
        ref = statistics.median(times["nn.LSTM"])
        for k, ts in times.items():
            med = statistics.median(ts)
            rows.append((f"T={T} B={B} in={I} H={H} C={C}", k, T * B / med, ref / med))
    w = max(len(r[0]) for r in rows)
    print(f"{'shape':<{w}}  {'impl':<10} {'tokens/s':>10}  {'x nn.LSTM':>9}")
    for shape, k, tps, ratio in rows:
        print(f"{shape:<{w}}  {k:<10} {tps:>10.0f}  {ratio:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
