"""Training speed of the logical-inference classifier: ON-LSTM vs LSTM (vs GRU) encoders, same run.

    python benchmarks/logic_speed.py [--data runs/logic/data] [--batch-size 64] [--steps 20] [--repeats 5] [--threads 1]
    python benchmarks/logic_speed.py --bucketing [--cells onlstm lstm] ...   # random vs length-bucketed batches
    python benchmarks/logic_speed.py --cells onlstm onlstm:avx2 onlstm:mkl lstm   # the C++ kernel's backends
    python benchmarks/logic_speed.py --cells onlstm onlstm@bf16 lstm-std lstm-std@bf16 lstm   # bfloat16 autocast

Times the full training step of ``onlstm logic train`` (embedding dropout, both formulas through the
shared encoder in one packed call, features, MLP, cross-entropy, backward, clipping, Adam) with the
paper's model (400 units, embedding 128). Batches are real pairs with <= 6 operators: read from
``--data`` when it has train files (e.g. from ``onlstm logic generate``), otherwise generated in
memory with a fixed seed. Every model sees the same batches. The models are timed in alternation
(ON-LSTM, LSTM, ON-LSTM, ...) after warm-up steps, so that load from other processes affects all
alike; the median over ``repeats`` is printed with the ratio to the LSTM, and the rate of the encoder's matrix
products (6 FLOPs per token and weight: forward, input and weight gradients) against the GEMM roof, MKL's (and
oneDNN's where it runs) on the products of one ON-LSTM layer of the step's mean length and batch. ``CELL:BACKEND`` (``onlstm:avx2``,
``lstm-std:mkl``, ...) is that encoder with the C++ kernel's products on one backend (``layer_speed.py``'s
``cpp:BACKEND``), so the backends are compared in one process. ``CELL@bf16`` is that encoder's step under
bfloat16 autocast (``logic train --precision bf16``; left out with a note where the CPU has no bfloat16 products);
its GFLOP/s count the same FLOPs, against the float32 roof.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

import layer_speed
from bench_cli import command, nonnegative_int, parser, positive_int
from onlstm import encoders
from onlstm.device import machine_line, precision_refusal
from onlstm.logic.config import LogicModelConfig, LogicTrainConfig
from onlstm.logic.data import load_training_examples
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.logic.model import LogicClassifier, collate, encode_examples
from onlstm.logic.train import train_step
from onlstm.nn import cpp_gemm, kernels


def batches(data_dir: Path | None, batch_size: int, n: int, seed: int = 0):
    cfg = LogicTrainConfig()
    if data_dir is not None and any(Path(data_dir).glob("train*")):
        examples = load_training_examples(data_dir, cfg)
        source = str(data_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="onlstm-logic-bench-") as tmp:  # removed once read
            per_length = max(200, batch_size * n // 6)
            generate_dataset(
                Path(tmp), GenerateConfig(per_length=per_length, seed=seed, max_ops=6, balance_labels=True), log=None
            )
            examples = load_training_examples(Path(tmp), cfg)
        source = f"generated with seed {seed}"
    data = encode_examples(examples)
    rng = random.Random(seed)
    rng.shuffle(data)
    out = [collate(data[(i * batch_size) % len(data) :][:batch_size]) for i in range(n)]
    return out, source


def bucketed(data_dir: Path | None, batch_size: int, n: int, seed: int = 0):
    """``n`` batches of pairs of similar length (what bucketing by length gives): a pool of ``8 n`` batches sorted
    by length, every 8th slice taken, so that the batches span the lengths as random batches do."""
    cfg = LogicTrainConfig()
    examples = (
        load_training_examples(data_dir, cfg) if data_dir is not None and any(Path(data_dir).glob("train*")) else None
    )
    if examples is None:
        return None
    data = encode_examples(examples)
    random.Random(seed).shuffle(data)
    pool = sorted(data[: batch_size * n * 8], key=lambda e: len(e[0]) + len(e[1]))
    return [collate(pool[i * batch_size : (i + 1) * batch_size]) for i in range(0, n * 8, 8)]


def tokens(batches) -> int:
    return sum(int(b[1].sum() + b[3].sum()) for b in batches)


def compare_bucketing(run, cells, data, sorted_data, repeats: int) -> None:
    """Per cell, microseconds per token on random batches and on length-bucketed ones, timed in alternation:
    with packed sequences the padding costs nothing, so bucketing pays only if the per-token cost falls.
    ``run(cell, batches)`` times one pass (each row on its backend and precision, as the main table's)."""
    print("# mean T: each batch's longest formula (its padded length), averaged over the batches")
    print(f"{'encoder':8s} {'batches':>9s} {'mean T':>6s} {'us/token':>9s}")
    for cell in cells:
        times: dict[str, list[float]] = {"random": [], "bucketed": []}
        for _ in range(repeats):
            for name, bb in (("random", data), ("bucketed", sorted_data)):
                times[name].append(run(cell, bb) / tokens(bb) * 1e6)
        for name, bb in (("random", data), ("bucketed", sorted_data)):
            mean_t = statistics.mean(b[0].shape[0] for b in bb)
            print(f"{cell:8s} {name:>9s} {mean_t:6.1f} {statistics.median(times[name]):9.1f}")


def encoder_flops(model: LogicClassifier, n_tokens: int) -> float:
    """FLOPs of the encoder's matrix products over ``n_tokens`` tokens, forward and backward: each weight matrix
    meets each token once forward and twice backward (the input's and the weight's gradients), 2 FLOPs a time."""
    return 6.0 * n_tokens * sum(p.numel() for p in model.encoder.parameters() if p.dim() == 2)


def bf16_runs_here(cell: str) -> bool:
    """Whether ``cell``'s row runs here: a ``@bf16`` row needs the CPU's bfloat16 products (and, on one of torch's
    recurrent layers, that layer under autocast); otherwise it is left out with a note."""
    if not cell.endswith("@bf16"):
        return True
    why = precision_refusal("bf16", torch.device("cpu"), cell.partition("@")[0].partition(":")[0])
    if why:
        print(f"# {cell} left out: {why}")
    return why is None


def roof_line(data, args) -> tuple[str, float]:
    """The GEMM roof on an ON-LSTM layer of the steps' mean formula length and batch (both formulas of a pair),
    and the best rate (NaN where no backend ran)."""
    T = max(1, round(tokens(data) / (2 * sum(b[1].numel() for b in data))))
    shape = (T, 2 * args.batch_size, 128, args.hidden_size, args.chunk_size)
    roofs = {b: layer_speed.gemm_roof(shape, b) for b in ("mkl", "onednn")}
    text = ", ".join(f"{b} {r:.0f}" for b, r in roofs.items() if r == r)
    best = max((r for r in roofs.values() if r == r), default=float("nan"))
    return f"# GEMM roof on a layer of T={T} B={shape[1]} {shape[2]}->{shape[3]}: {text} GFLOP/s", best


@command
def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--data", type=Path, default=Path("runs/logic/data"))
    ap.add_argument("--cells", nargs="+", default=["onlstm", "lstm", "lstm-std"])
    ap.add_argument("--batch-size", type=positive_int, default=64)
    ap.add_argument("--hidden-size", type=positive_int, default=400)
    ap.add_argument("--chunk-size", type=positive_int, default=10, help="ON-LSTM chunk size (default 10)")
    ap.add_argument("--steps", type=positive_int, default=20, help="steps per measurement (default 20)")
    ap.add_argument("--repeats", type=positive_int, default=5, help="measurements per model (default 5)")
    ap.add_argument("--warmup", type=nonnegative_int, default=3)
    ap.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1, as the logic presets)")
    ap.add_argument(
        "--bucketing", action="store_true", help="time random against length-bucketed batches (needs --data)"
    )
    args = ap.parse_args(argv)
    if bad := [c for c in args.cells if ":" in c and c.split(":", 1)[1] not in cpp_gemm.BACKENDS]:
        ap.error(f"--cells: {', '.join(bad)}: CELL:BACKEND takes one of {', '.join(cpp_gemm.BACKENDS)}")
    if bad := [c for c in args.cells if c.partition("@")[2] not in ("", "bf16")]:
        ap.error(f"--cells: {', '.join(bad)}: CELL@bf16 is the only precision suffix")
    torch.set_num_threads(args.threads)  # before the machine line, which names the threads
    print(f"# {machine_line()}", flush=True)  # the first line of every benchmark's output (CONTRIBUTING.md)
    args.cells = [c for c in args.cells if bf16_runs_here(c)]
    bare = [c.partition("@")[0] for c in args.cells]
    args.cells = [
        c for c, b in zip(args.cells, bare) if ":" not in b or layer_speed.runs_here("cpp:" + b.split(":", 1)[1], False)
    ]
    if "lstm" not in args.cells:
        ap.error("--cells must include lstm (the reference of the ratio)")
    torch.set_flush_denormal(True)
    data, source = batches(args.data, args.batch_size, args.steps)

    models = {}
    for cell in args.cells:
        torch.manual_seed(0)
        encoder, _, backend = cell.partition("@")[0].partition(":")
        m = LogicClassifier(LogicModelConfig(cell=encoder, hidden_size=args.hidden_size, chunk_size=args.chunk_size))
        m.train()
        models[cell] = (m, torch.optim.Adam(m.parameters(), lr=1e-3), backend or None)

    def run(cell: str, batches: list) -> float:
        m, opt, backend = models[cell]
        bf16 = cell.endswith("@bf16")
        steps = [lambda batch=batch: train_step(m, opt, batch, clip=1.0, bf16=bf16) for batch in batches]
        if backend is not None or any(":" in c for c in models):  # each row on its own backend
            steps = [layer_speed.on_backend(step, backend) for step in steps]
        t0 = time.perf_counter()
        for step in steps:
            step()
        return time.perf_counter() - t0

    for cell in args.cells:
        run(cell, data[: args.warmup])
    if args.bucketing:
        sorted_data = bucketed(args.data, args.batch_size, args.steps)
        if sorted_data is None:
            ap.error("--bucketing needs --data with train files")
        compare_bucketing(run, args.cells, data, sorted_data, args.repeats)
        return 0
    times: dict[str, list[float]] = {c: [] for c in args.cells}
    for _ in range(args.repeats):
        for cell in args.cells:
            times[cell].append(run(cell, data[: args.steps]))

    print(
        f"# logic classifier training step: {args.hidden_size} units, embedding 128, batch {args.batch_size} pairs "
        f"(<= 6 operators) from {source}"
    )
    print(f"# {args.steps} steps x {args.repeats} repeats, alternating; median")
    roof_text, roof = roof_line(data, args)
    print(roof_text)
    ref = args.steps / statistics.median(times["lstm"])
    print(f"{'encoder':8s} {'steps/s':>9s} {'x lstm':>7s} {'GFLOP/s':>8s} {'% roof':>7s}")
    per_step = tokens(data) // len(data)
    for cell in args.cells:
        sps = args.steps / statistics.median(times[cell])
        gflops = encoder_flops(models[cell][0], per_step) * sps / 1e9
        print(f"{cell:8s} {sps:9.2f} {sps / ref:7.2f} {gflops:8.1f} {100 * gflops / roof:7.0f}")
    cpp = kernels.load_kernel("cpp") if any(":" not in c for c in args.cells) else None
    if cpp is not None and getattr(cpp, "choice", None) is not None:  # what the rows without :BACKEND ran on
        print(f"# C++ kernel {cpp.describe()}")
    print(legend(args.cells))
    return 0


def legend(cells: list[str]) -> str:
    """What each row's encoder is, from the registry: ``lstm-std`` (the authors' LSTM on onlstm's kernel) was twice
    written up as ``nn.LSTM`` (``lstm``) from this table's names alone."""
    bare = dict.fromkeys(c.partition("@")[0].partition(":")[0] for c in cells)
    return "\n".join(f"# {name}: {encoders.get(name).description}" for name in bare)


if __name__ == "__main__":
    raise SystemExit(main())
