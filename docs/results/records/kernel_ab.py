"""Two builds of the C++ kernel in one process: the layer's calls sent through either library's operators in
alternating rounds, ``nn.LSTM`` timed in the same rounds (docs/results/layer.md, "Panels to whichever thread is
free"). Alternating processes (``benchmarks/layer_speed.py`` run from each checkout) measure the same thing, but on
shared cores whose rate moves by more than a few percent between processes.

    # the earlier build: a worktree of the earlier commit, its kernel compiled once by a first call
    git worktree add --detach ../before COMMIT
    PYTHONPATH=../before/src python -c "import torch, onlstm; onlstm.ONLSTM(4, 10, chunk_size=5)(torch.randn(2, 1, 4))"
    # its library is the newest ~/.cache/torch_extensions/py311_cpu/onlstm_cpu_*/onlstm_cpu_*.so (TORCH_EXTENSIONS_DIR)
    PYTHONPATH=src python docs/results/records/kernel_ab.py --before BUILD.so --threads 2 --batch 20 --hidden 650

The build in ``src`` is "after"; both run the products on ``--backend`` (default ``avx2``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import onlstm
from onlstm.nn.kernels import load_kernel


def timed(call, n: int = 3) -> float:
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, required=True, help="the earlier build's library (.so)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--hidden", type=int, default=650)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--backend", default="avx2")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    layer, ref = onlstm.ONLSTM(400, a.hidden, chunk_size=10, impl="cpp"), torch.nn.LSTM(400, a.hidden)
    x = torch.randn(70, a.batch, 400, requires_grad=True)
    kernel = load_kernel("cpp")
    torch.ops.load_library(str(a.before))
    libraries = {"before": getattr(torch.ops, a.before.stem), "after": kernel._module}
    if not kernel.pin(a.backend):
        raise SystemExit(f"the {a.backend} backend does not run here")

    def call(module) -> None:
        module(x)[0].sum().backward()

    for library in libraries.values():  # warm-up: buffers, packed weights
        kernel._module = library
        call(layer)
    call(ref)
    times: dict[str, list[float]] = {"before": [], "after": [], "lstm": []}
    for r in range(a.rounds):
        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
            kernel._module = libraries[name]
            times[name].append(timed(lambda: call(layer)))
        times["lstm"].append(timed(lambda: call(ref)))
    ms = {name: statistics.median(v) * 1e3 for name, v in times.items()}
    print(
        f"B={a.batch} H={a.hidden} threads={a.threads} backend={a.backend} rounds={a.rounds}: "
        + ", ".join(f"{name} {v:.1f} ms" for name, v in ms.items())
        + f"; after/before {ms['after'] / ms['before']:.3f}; x nn.LSTM before {ms['lstm'] / ms['before']:.2f}, "
        f"after {ms['lstm'] / ms['after']:.2f}"
    )


if __name__ == "__main__":
    main()
