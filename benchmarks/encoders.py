"""Forward+backward speed and memory of every registered encoder against torch.nn.LSTM, in one run.

    python benchmarks/encoders.py [--seq-len 35] [--batch 20] [--input 200] [--hidden 200] [--repeats 5]
                                  [--threads 1] [--device cpu|cuda] [--encoders onlstm,sru,...]

Two tables, each with ``nn.LSTM(input, hidden)`` as the reference row:

* **same hidden size**: every encoder (one layer, built through the registry) with ``--hidden`` units;
* **same parameter budget**: every encoder with the hidden size whose parameter count is closest to that
  ``nn.LSTM``'s (among the sizes its registry entry accepts, e.g. multiples of ON-LSTM's chunk size).

Speed: the median time of ``out.sum().backward()`` over ``--repeats`` rounds, all modules of a table
interleaved round by round so that drifts of a shared machine hit them alike; tokens/s = T*B / time, and the
ratio to nn.LSTM (higher is faster). On CPU the time is this process's CPU time (``time.process_time``):
on a machine shared with other work, waiting for a core does not count (with several threads it adds
the threads' times; ``--wall`` for the wall clock); on CUDA the wall clock between synchronisations.

Memory: on CUDA, ``torch.cuda.max_memory_allocated`` during one forward+backward minus what was allocated
before it (the allocator's true peak above parameters and input). On CPU there is no allocator peak to read
(the resident-set size moves with the allocator's caching and the first touch of pages, not with tensors),
so the CPU column is the memory the forward pass keeps alive for backward: every tensor autograd saves,
counted once per storage, parameters and input excluded. That is the part of training memory that depends
on the encoder and grows with T*B; temporaries freed during the pass are not in it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from bench_cli import command, parser, positive_int
from onlstm import encoders as E
from onlstm.device import machine_line
from onlstm.errors import InputError


def param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def options(name: str, chunk_size: int) -> dict:
    return {"chunk_size": chunk_size} if "chunk_size" in E.get(name).option_names else {}


def accepts(name: str, hidden: int, chunk_size: int) -> bool:
    try:
        E.get(name).validate(hidden, options(name, chunk_size))
    except E.EncoderError:
        return False
    return True


def build(name: str, input_size: int, hidden: int, chunk_size: int) -> nn.Module:
    return E.make_encoder(name, input_size, hidden, **options(name, chunk_size))


def next_accepted(name: str, hidden: int, chunk_size: int) -> int:
    """The smallest hidden size >= ``hidden`` that the encoder's registry entry accepts."""
    for h in range(hidden, hidden + 1024):
        if accepts(name, h, chunk_size):
            return h
    raise InputError(f"encoder {name!r} accepts no hidden size in {hidden}..{hidden + 1023}")


def equal_budget_hidden(name: str, input_size: int, target: int, chunk_size: int) -> int:
    """The accepted hidden size whose one-layer parameter count is closest to ``target``: a binary search on
    the (non-decreasing) count, then the accepted sizes on either side of the crossing."""

    def count(h: int) -> int:
        return param_count(build(name, input_size, next_accepted(name, h, chunk_size), chunk_size))

    lo, hi = 1, 1
    while count(hi) < target:
        lo, hi = hi, hi * 2
    while lo < hi:  # smallest h with count(h) >= target
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if count(mid) < target else (lo, mid)
    above = next_accepted(name, lo, chunk_size)
    below = [h for h in range(lo - 1, max(0, lo - 1024), -1) if accepts(name, h, chunk_size)][:1]
    return min([above, *below], key=lambda h: abs(count(h) - target))


# --------------------------------------------------------------------------- measurements


def step_fn(module: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        for p in module.parameters():
            p.grad = None
        out = module(x)[0]
        out.sum().backward()

    return run


def saved_bytes(module: nn.Module, x: torch.Tensor) -> int:
    """Bytes autograd keeps for backward in one forward pass (CPU memory column): unique storages of the
    saved tensors, without the parameters and the input."""
    exclude = {p.untyped_storage().data_ptr() for p in module.parameters()} | {x.untyped_storage().data_ptr()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in exclude:
            seen[s.data_ptr()] = max(seen.get(s.data_ptr(), 0), s.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(x)[0]
    total = sum(seen.values())
    out.sum().backward()
    return total


def cuda_peak_bytes(module: nn.Module, x: torch.Tensor) -> int:
    """Peak bytes allocated during one forward+backward above what was allocated before it (CUDA column)."""
    for p in module.parameters():
        p.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step_fn(module, x)()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def median_times(mods: dict[str, nn.Module], x: torch.Tensor, repeats: int, wall: bool) -> dict[str, float]:
    """Median seconds of forward+backward per module, interleaved round by round."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    clock = time.perf_counter if wall or x.is_cuda else time.process_time
    fns = {k: step_fn(m, x) for k, m in mods.items()}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():  # warm-up
        f()
    for _ in range(repeats):
        for k, f in fns.items():
            sync()
            t0 = clock()
            f()
            sync()
            times[k].append(clock() - t0)
    return {k: statistics.median(ts) for k, ts in times.items()}


# --------------------------------------------------------------------------- tables


def table(title: str, mods: dict[str, nn.Module], sizes: dict[str, int], x: torch.Tensor, args) -> None:
    med = median_times(mods, x, args.repeats, args.wall)
    memory = cuda_peak_bytes if x.is_cuda else saved_bytes
    mem = {k: memory(m, x) for k, m in mods.items()}
    tokens = x.shape[0] * x.shape[1]
    ref = "nn.LSTM"
    print(f"\n{title}")
    head = f"{'encoder':<10} {'hidden':>6} {'params':>10} {'tokens/s':>10} {'x nn.LSTM':>9} {'memory MB':>10} {'x nn.LSTM':>9}"
    print(head + "\n" + "-" * len(head))
    for k, m in mods.items():
        print(
            f"{k:<10} {sizes[k]:>6} {param_count(m):>10,} {tokens / med[k]:>10,.0f} {med[ref] / med[k]:>9.2f} "
            f"{mem[k] / 2**20:>10.2f} {mem[k] / mem[ref]:>9.2f}"
        )


@command
def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--seq-len", type=positive_int, default=35)
    ap.add_argument("--batch", type=positive_int, default=20)
    ap.add_argument("--input", type=positive_int, default=200, help="input width of the layer")
    ap.add_argument("--hidden", type=positive_int, default=200, help="hidden size of the reference nn.LSTM")
    ap.add_argument("--chunk-size", type=positive_int, default=10, help="for encoders that take one (ON-LSTM)")
    ap.add_argument("--encoders", default=",".join(E.names()), help="comma-separated (default: the whole registry)")
    ap.add_argument("--repeats", type=positive_int, default=5, help="timed rounds (median reported)")
    ap.add_argument("--threads", type=positive_int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--wall", action="store_true", help="on CPU, time by the wall clock instead of CPU time")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is visible")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    names = [n for n in args.encoders.split(",") if n]
    for n in names:
        E.get(n)  # an unknown name lists the registry
    I, H, dev = args.input, args.hidden, torch.device(args.device)
    torch.manual_seed(0)
    x = torch.randn(args.seq_len, args.batch, I, device=dev)
    reference = nn.LSTM(I, H).to(dev)
    target = param_count(reference)
    clock = "wall clock" if args.wall or dev.type == "cuda" else "process CPU time"
    print(
        f"{machine_line()}, {args.device}, {clock}, T={args.seq_len} "
        f"B={args.batch} in={I}, forward+backward, median of {args.repeats}"
    )
    memory = "peak allocated (CUDA)" if dev.type == "cuda" else "saved for backward (CPU)"
    for title, sizes in (
        (f"same hidden size ({H}); memory: {memory}", {n: H for n in names if accepts(n, H, args.chunk_size)}),
        (
            f"same parameter budget (nn.LSTM {I}->{H}: {target:,}); memory: {memory}",
            {n: equal_budget_hidden(n, I, target, args.chunk_size) for n in names},
        ),
    ):
        mods = {"nn.LSTM": reference, **{n: build(n, I, h, args.chunk_size).to(dev) for n, h in sizes.items()}}
        table(title, mods, {"nn.LSTM": H, **sizes}, x, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
