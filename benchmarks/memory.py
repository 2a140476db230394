"""Peak memory of the ON-LSTM layer under each implementation against torch.nn.LSTM of the same size (issue #25).

    python benchmarks/memory.py                                   # all scenarios, short (a few minutes, 1 thread)
    python benchmarks/memory.py --scenarios logic --steps 1000 --early 100 --eval-every 50   # the issue's run
    python benchmarks/memory.py --impls cpp,fused,reference,lstm               # reference too (slow)
    python benchmarks/memory.py --device cuda                     # triton, reference, nn.LSTM; + peak allocated
    python benchmarks/memory.py --impls cpp,cpp@bf16,lstm,lstm@bf16   # bfloat16 autocast rows too

Every (scenario, model) runs in a fresh process (this script, re-invoked), so that one model's memory never
counts for another, and reports the process's peak resident memory (``ru_maxrss``) before the first step
(torch imported, model built), after step ``--early`` and after the last step; the growth between the last
two, and the end peak as a multiple of ``nn.LSTM``'s in the same scenario. On CUDA, also the peak of
``torch.cuda.max_memory_allocated`` at the same points. The shapes are drawn from a fixed seed, so every
model sees the same batches. Scenarios:

* ``logic``: the logical-inference classifier's training step at the paper's size (one layer, input 128,
  hidden 400, chunk 10, Adam): batches of ``--batch`` packed sequences (default 256: 128 pairs), ``T`` drawn
  from 10..69 and each length from 3..T, so every batch brings new per-step batch sizes; with
  ``--eval-every K``, one batch of the ``eval`` scenario after step 1 and every K steps, as validation
  does in training;
* ``lm``: language-model training at the CPU preset's size (``ptb-cpu``: vocabulary 10,000, embedding 200,
  layers 400-400-200, chunk 10, ``master_input='reverse'``, batch 32, SGD, clipping 0.25) with AWD's random
  BPTT lengths (35, or 17.5 with probability 5%, plus N(0, 5), at least 5), the state carried across steps;
* ``eval``: packed evaluation without gradients at the paper's size: batches of 512 sequences, ``T`` in
  10..120, lengths 3..T.

The first batch of each scenario is as large as the scenario's batches get: the longest ``T`` with the
lengths spread evenly over 3..T (a typical batch at that ``T``; a random one is a few percent larger or
smaller), and the longest BPTT segment, 50 (later ones are capped there). So a model reaches its working
peak at step 1, and growth after the early step is memory that accumulates, e.g. per new shape; RSS also
moves by a few MiB with the allocator's state. Read differences of a few percent as noise. A model whose
layers ran another implementation than the one asked (a kernel that does not fit the device, or the Triton
kernel after a failed self-check) is left out, with what they ran. A float32 ``cpp`` row names the backend its
products ran (``linear``, ``onednn``, ``avx2``, ``mkl``): the oneDNN routes keep a primitive per product shape, so
the backend moves the peak by 100 MiB or more, and each process times them again unless ``ONLSTM_CPU_GEMM`` is set
(a busy machine may choose differently from one row to the next). ``MODEL@bf16`` runs the same steps under
bfloat16 autocast (``--precision bf16`` of the trainers), its ratio taken against ``lstm@bf16`` when that row is
asked too; on a CPU without bfloat16 products (or where torch's LSTM refuses the autocast) it is left out with
the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time

from bench_cli import command, nonnegative_int, parser, positive_int
from onlstm.errors import InputError

IMPLS_CPU = "cpp,fused,lstm"
IMPLS_CUDA = "triton,reference,lstm"
SCENARIOS = ("logic", "lm", "eval")
# steps (batches, for eval) of the short default run: enough to see a model that keeps growing
DEFAULT_STEPS = {"logic": 18, "lm": 24, "eval": 9}


def peaks(device) -> dict:
    """Peak RSS of this process (MiB) and, on CUDA, the peak allocated GPU memory (MiB)."""
    import torch

    out = {"rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if device.type == "cuda":
        torch.cuda.synchronize()
        out["cuda"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def packed_batch(rng: random.Random, n: int, t_range: tuple[int, int], width: int, device, first: bool = False):
    """``n`` random sequences packed; ``first``: the longest ``T``, lengths spread evenly over 3..T."""
    import torch
    from torch.nn.utils.rnn import pack_sequence

    T = t_range[1] if first else rng.randint(*t_range)
    if first:
        lengths = [T - (T - 3) * i // (n - 1) for i in range(n)] if n > 1 else [T]
    else:
        lengths = sorted((rng.randint(3, T) for _ in range(n)), reverse=True)
    return pack_sequence([torch.randn(length, width, device=device) for length in lengths])


def split_model(model: str) -> tuple[str, bool]:
    """``impl@bf16`` -> ``(impl, True)``; ``impl`` -> ``(impl, False)``."""
    impl, _, precision = model.partition("@")
    return impl, precision == "bf16"


def bf16_refusal(model: str, device) -> str | None:
    """Why a ``@bf16`` row cannot run on ``device`` here (None: it can, or the row is float32)."""
    import torch

    from onlstm.device import precision_refusal

    impl, bf16 = split_model(model)
    return precision_refusal("bf16", torch.device(device), impl) if bf16 else None


def reference(model: str, impls: list[str]) -> str:
    """The row a model's ratio is taken against: ``lstm@bf16`` for a bfloat16 row when it is asked, else ``lstm``."""
    return "lstm@bf16" if split_model(model)[1] and "lstm@bf16" in impls else "lstm"


def layer(model: str, input_size: int, hidden: int, device):
    import torch

    import onlstm

    if model == "lstm":
        return torch.nn.LSTM(input_size, hidden).to(device)
    return onlstm.ONLSTM(input_size, hidden, chunk_size=10, impl=model).to(device)


def logic_steps(model: str, args, device, report) -> None:
    """The classifier's encoder step: both formulas of every pair through one packed call, backward, Adam."""
    import torch

    rnn = layer(model, 128, 400, device)
    opt = torch.optim.Adam(rnn.parameters(), lr=1e-3)
    rng = random.Random(0)
    report(0)
    for step in range(1, args.steps + 1):
        out, (h_n, _) = rnn(packed_batch(rng, args.batch, (10, 69), 128, device, first=step == 1))
        loss = h_n.square().mean() + out.data.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.eval_every and (step == 1 or step % args.eval_every == 0):
            with torch.no_grad():
                rnn(packed_batch(rng, 512, (10, 120), 128, device, first=step == 1))
        report(step)
    return rnn


LONGEST_BPTT = 50  # 35 + 3 standard deviations: the first segment, and the cap of the others


def bptt_length(rng: random.Random, bptt: int = 35) -> int:
    """AWD-LSTM's random segment length, as ``onlstm.lm.data.bptt_schedule`` draws it (capped)."""
    base = bptt if rng.random() >= 0.05 else bptt / 2
    return min(LONGEST_BPTT, max(5, int(rng.gauss(base, 5))))


def lm_steps(model: str, args, device, report) -> None:
    import torch
    import torch.nn.functional as F

    from onlstm import ONLSTM
    from onlstm.models.language_model import LanguageModel, LMConfig

    cell = "lstm" if model == "lstm" else "onlstm"
    cfg = LMConfig(
        vocab_size=10_000, emb_size=200, hidden_sizes=[400, 400, 200], cell=cell, chunk_size=10,
        master_input="reverse", dropout_emb=0.05, dropout_in=0.3, dropout_hidden=0.2, dropout_out=0.3,
        dropconnect=0.3,
    )  # fmt: skip
    lm = LanguageModel(cfg).to(device)
    for m in lm.modules():
        if isinstance(m, ONLSTM):
            m.impl = model
    opt = torch.optim.SGD(lm.parameters(), lr=30.0)
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    state = None
    report(0)
    for step in range(1, args.steps + 1):
        length = LONGEST_BPTT if step == 1 else bptt_length(rng)
        tokens = torch.randint(0, 10_000, (length + 1, 32), generator=gen).to(device)
        output, state, _ = lm(tokens[:-1], state)
        state = [tuple(s.detach() for s in layer_state) for layer_state in state]
        loss = F.cross_entropy(lm.logits(output).flatten(0, 1), tokens[1:].flatten())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 0.25)
        opt.step()
        report(step)
    return lm


def eval_steps(model: str, args, device, report) -> None:
    import torch

    rnn = layer(model, 128, 400, device).eval()
    rng = random.Random(0)
    report(0)
    with torch.no_grad():
        for step in range(1, args.steps + 1):
            rnn(packed_batch(rng, 512, (10, 120), 128, device, first=step == 1))
            report(step)
    return rnn


def child(args) -> int:
    """One scenario with one model, in this process; prints one JSON line."""
    import torch

    import onlstm

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    device = torch.device(args.device)
    points: dict[int, list[str]] = {}
    for step, name in ((0, "start"), (args.early, "early"), (args.steps, "end")):
        points.setdefault(step, []).append(name)  # --steps 1: the early step is the last one
    result: dict = {}

    def report(step: int) -> None:
        for name in points.get(step, []):
            result[name] = peaks(device)

    impl, bf16 = split_model(args.model)
    start = time.perf_counter()
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        model = {"logic": logic_steps, "lm": lm_steps, "eval": eval_steps}[args.scenario](impl, args, device, report)
    result["seconds"] = time.perf_counter() - start
    # what the layers ran: another kernel than asked where it does not fit the device or failed its self-check
    result["ran"] = sorted({m.resolved_impl(device) for m in model.modules() if isinstance(m, onlstm.ONLSTM)})
    if result["ran"] == ["cpp"] and not bf16:  # its float32 backend decides how many oneDNN primitives it keeps
        from onlstm.nn.cpp_kernel import load_extension

        result["products"] = load_extension().gemm_backend()
    print(json.dumps(result))
    return 0


def run_child(scenario: str, model: str, steps: int, early: int, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", scenario, model, "--steps", str(steps)]
    cmd += ["--early", str(early), "--batch", str(args.batch), "--eval-every", str(args.eval_every)]
    cmd += ["--threads", str(args.threads), "--device", args.device]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def row(scenario: str, model: str, r: dict, ref: dict | None, key: str) -> str:
    if "error" in r:
        return f"{scenario:<6} {model:<10} failed: {r['error']}"
    if r["ran"] not in ([], [split_model(model)[0]]) and model != "auto":
        return f"{scenario:<6} {model:<10} left out: the layers ran {', '.join(r['ran'])} (onlstm info says why)"
    s, e, z = r["start"][key], r["early"][key], r["end"][key]
    vs = f"{z / ref['end'][key]:.2f}" if ref and "error" not in ref else "-"
    line = f"{scenario:<6} {model:<10} {s:>9,.0f} {e:>9,.0f} {z:>9,.0f} {100 * (z - e) / e:>+8.1f}% {vs:>9} {r['seconds']:>6.0f}"
    return line + (f"  {r['products']}" if "products" in r else "")


@command
def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated from {','.join(SCENARIOS)}")
    ap.add_argument("--impls", default=None, help=f"ON-LSTM impl= values and lstm (nn.LSTM); default {IMPLS_CPU} "
                    f"on the CPU, {IMPLS_CUDA} on CUDA")  # fmt: skip
    ap.add_argument("--steps", type=positive_int, default=None, help=f"steps per scenario (default {DEFAULT_STEPS})")
    ap.add_argument("--early", type=positive_int, default=None, help="the early step growth is measured from "
                    "(default: a third of --steps)")  # fmt: skip
    ap.add_argument("--batch", type=positive_int, default=256, help="sequences per logic batch (default 256)")
    ap.add_argument(
        "--eval-every",
        type=nonnegative_int,
        default=0,
        help="logic: a no-grad eval batch every K steps (default 0: none)",
    )
    ap.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--child", nargs=2, metavar=("SCENARIO", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.scenario, args.model = args.child
        return child(args)
    scenarios = [s for s in args.scenarios.split(",") if s]
    if bad := [s for s in scenarios if s not in SCENARIOS]:
        ap.error(f"--scenarios: unknown {bad}; choose from {SCENARIOS}")
    impls = [s for s in (args.impls or (IMPLS_CUDA if args.device == "cuda" else IMPLS_CPU)).split(",") if s]
    if "lstm" not in impls:
        impls.append("lstm")  # the reference of the ratio
    if bad := [m for m in impls if m.partition("@")[2] not in ("", "bf16")]:
        ap.error(f"--impls: {', '.join(bad)}: MODEL@bf16 is the only precision suffix")
    import torch

    from onlstm.device import machine_line

    if args.device == "cuda" and not torch.cuda.is_available():  # every row's process would fail
        raise InputError(f"--device cuda but no CUDA device is visible (torch {torch.__version__})")
    torch.set_num_threads(args.threads)  # as each row's process does: the header names the rows' threads
    print(f"# {machine_line()}; {args.device}; peak memory in MiB; each row is its own process")
    keys = [("rss", "peak RSS")] + ([("cuda", "peak CUDA allocated")] if args.device == "cuda" else [])
    for model in impls[:]:
        if why := bf16_refusal(model, args.device):
            print(f"# {model} left out: {why}")
            impls.remove(model)
    results = {}
    for scenario in scenarios:
        steps = args.steps or DEFAULT_STEPS[scenario]
        early = min(args.early or max(1, steps // 3), steps)
        for model in impls:
            results[scenario, model] = run_child(scenario, model, steps, early, args)
        for key, title in keys:
            print(f"\n## {scenario}: {title}, {steps} steps, growth from step {early} to {steps}")
            print(
                f"{'scen.':<6} {'model':<10} {'start':>9} {'early':>9} {'end':>9} {'growth':>9} {'x nn.LSTM':>9} {'sec':>6}"
                "  products (the C++ kernel's float32 backend: each process times them unless ONLSTM_CPU_GEMM is set)"
            )
            for model in impls:
                ref = results[scenario, reference(model, impls)]
                print(row(scenario, model, results[scenario, model], ref, key), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
