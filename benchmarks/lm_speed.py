"""Training speed of the language model: ON-LSTM vs LSTM layers, same preset, same run.

    python benchmarks/lm_speed.py [--config ptb-cpu] [--steps 10] [--repeats 3] [--threads N]
    python benchmarks/lm_speed.py --config ptb-paper --device cuda --onlstm-impls triton,reference
    python benchmarks/lm_speed.py --compile   # and each model's step under torch.compile, beside it

Times the trainer's full step (embedding/locked dropout, DropConnect, the recurrent layers, full
softmax over a 10,000-word vocabulary, AR/TAR, backward, clipping, SGD) on random tokens, with the
preset's sizes, batch and BPTT length. The two models are timed in alternation (ON-LSTM, LSTM,
ON-LSTM, ...) after warm-up steps, so that load from other processes affects both alike; each
measurement is ``steps`` steps, and the median over ``repeats`` is reported, with the ratio.
Any model or training field can be overridden like ``onlstm lm train`` flags, e.g. ``--hidden-sizes``.
``--device`` places the models and data (``auto``: CUDA when available; default of the preset);
``--onlstm-impls`` times the ON-LSTM model once per layer implementation (``impl=``: ``triton``,
``reference``, ...; ``--onlstm-impl NAME``, as ``lm train`` takes it, is one such row), each with its ratio to LSTM; ``--precision bf16`` runs the steps under bfloat16 autocast, as ``lm train`` does (refused
where the trainer refuses it); a kernel the device cannot run, or one that fails its self-check there (the layers
would run the reference loop under the kernel's label), is refused with exit status 2. ``--compile`` (the trainer's
flag) adds a row ``NAME+compile`` beside each model: its objective (the model and the loss, forward and backward)
under ``torch.compile`` (inductor), as ``lm train --compile`` runs it, the optimizer step as before; the first
call's compile is printed, not timed. On CUDA
every measurement ends with ``torch.cuda.synchronize()`` and the peak GPU memory of each model's steps is printed.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

import onlstm
from bench_cli import COMPILED, command, nonnegative_int, parser, positive_int
from onlstm.device import machine_line, precision_refusal, resolve_device
from onlstm.errors import InputError, OnlstmError
from onlstm.lm.config import add_config_flags, load_config
from onlstm.lm.ntasgd import make_optimizer
from onlstm.lm.train import _Objective
from onlstm.models.language_model import LanguageModel, LMConfig
from onlstm.nn import kernels
from onlstm.runs.engine import update


def build(cfg, cell: str, vocab: int, device: torch.device, impl: str | None = None, compiled: bool = False):
    torch.manual_seed(cfg.train.seed)
    model = LanguageModel(LMConfig(vocab_size=vocab, **{**cfg.model, "cell": cell})).to(device)
    for module in model.modules():
        if impl and isinstance(module, onlstm.ONLSTM):
            module.impl = impl
    model.train()
    obj = _Objective(model, cfg.train.alpha, cfg.train.beta, cfg.train.ar_target)
    return model, torch.compile(obj) if compiled else obj, make_optimizer(list(model.parameters()), cfg.train)


def step(model, obj, opt, x, y, clip, precision="fp32"):
    """The trainer's step: its objective (AR/TAR included; under bfloat16 autocast with ``precision=bf16``, as the
    trainer runs it), then its backward pass, clipping and update."""
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = obj(x, y, None, None)[0]
    update(opt, loss, model.parameters(), clip)


@command
def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--config", type=Path, default=Path("ptb-cpu"), help="YAML file or lm preset name")
    ap.add_argument("--cells", nargs="+", default=["onlstm", "lstm"])
    ap.add_argument("--steps", type=positive_int, default=10, help="steps per measurement (default 10)")
    ap.add_argument("--repeats", type=positive_int, default=3, help="measurements per model (default 3)")
    ap.add_argument("--warmup", type=nonnegative_int, default=2, help="untimed steps per model first (default 2)")
    ap.add_argument("--vocab", type=positive_int, default=10000, help="vocabulary size (PTB: 10000)")
    ap.add_argument("--seq-len", type=positive_int, default=None, help="segment length (default: the preset's bptt)")
    ap.add_argument("--onlstm-impls", default="", help="comma-separated impl= values to time the ON-LSTM model with")
    add_config_flags(ap)
    args = ap.parse_args(argv)
    torch.set_flush_denormal(True)
    cfg = load_config(args.config, args)
    t = cfg.train
    if t.threads:
        torch.set_num_threads(t.threads)
    seq = args.seq_len or t.bptt
    g = torch.Generator().manual_seed(0)
    try:
        device = resolve_device(t.device)
    except OnlstmError as exc:
        print(f"lm_speed.py: {exc}", file=sys.stderr)
        return 2
    print(f"# {where(device)}", flush=True)  # the first line of every benchmark's output (CONTRIBUTING.md)
    try:
        impls = onlstm_impls(args.onlstm_impls, t.onlstm_impl)
    except OnlstmError as exc:
        print(f"lm_speed.py: {exc}", file=sys.stderr)
        return exc.exit_code
    for cell in args.cells:
        why = precision_refusal(t.precision, device, cell)
        if why:
            print(f"lm_speed.py: --cells {cell}: {why}", file=sys.stderr)
            return 2
    for impl in impls:
        refusal = impl_refusal(impl, device)
        if refusal:
            print(f"lm_speed.py: --onlstm-impls {impl}: {refusal}; leave it out", file=sys.stderr)
            return 2
    data = torch.randint(0, args.vocab, (seq + 1, t.batch_size), generator=g).to(device)
    x, y = data[:-1], data[1:]
    runs, peak = {}, {}
    for name, cell, impl in variants(args.cells, impls, t.compile):
        runs[name] = build(cfg, cell, args.vocab, device, impl, compiled=name.endswith(COMPILED))
        refusal = impl and impl_refusal(impl, device, runs[name][0])  # now with the model's layer sizes
        if refusal:
            print(f"lm_speed.py: --onlstm-impls {impl}: {refusal}; leave it out", file=sys.stderr)
            return 2
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        compiled, t0 = name.endswith(COMPILED), time.perf_counter()
        for _ in range(max(args.warmup, compiled)):  # a compiled row compiles in an untimed step, whatever --warmup
            step(*runs[name], x, y, t.clip, t.precision)
        sync(device)
        if compiled:
            print(f"# {name}: warm-up, compiling included, {time.perf_counter() - t0:.1f} s")
        if device.type == "cuda":
            peak[name] = torch.cuda.max_memory_allocated(device) / 2**20
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.repeats):
        for name in names:
            sync(device)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step(*runs[name], x, y, t.clip, t.precision)
            sync(device)
            times[name].append(time.perf_counter() - t0)
    tokens = args.steps * seq * t.batch_size
    m = cfg.model
    print(
        f"# {args.config.name}: emb {m['emb_size']}, layers {m['hidden_sizes']}, chunk {m['chunk_size']}, "
        f"batch {t.batch_size}, seq {seq}, vocab {args.vocab}, precision {t.precision}; {args.steps} steps x "
        f"{args.repeats} repeats, alternating"
    )
    print("| cell | params | tokens/s (median) | min .. max | ms/step | peak GPU MiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    rate = {}
    for cell in names:
        ts = times[cell]
        rate[cell] = tokens / statistics.median(ts)
        n = sum(p.numel() for p in runs[cell][0].parameters())
        print(
            f"| {cell} | {n / 1e6:.2f}M | {rate[cell]:,.0f} | {tokens / max(ts):,.0f} .. {tokens / min(ts):,.0f} | "
            f"{1000 * statistics.median(ts) / args.steps:.0f} | {peak.get(cell, float('nan')):.0f} |"
        )
    for name in names if "lstm" in rate else []:  # every ON-LSTM row: onlstm, or onlstm/<impl> per impl
        if name == "onlstm" or name.startswith("onlstm/"):
            label = "ON-LSTM" + name.removeprefix("onlstm")
            print(f"{label} / LSTM tokens/s: {rate[name] / rate['lstm']:.2f}")
    for name in names:  # every compiled row against the same model eager
        if (eager := name.removesuffix(COMPILED)) != name:
            print(f"{name} / {eager} tokens/s: {rate[name] / rate[eager]:.2f}")
    return 0


def onlstm_impls(impls: str, config_impl: str) -> list[str]:
    """The ON-LSTM layers' implementations to time: ``--onlstm-impls``, else ``--onlstm-impl`` (``train.onlstm_impl``,
    as ``lm train`` reads it) when not ``auto``; [] for one row on the layer's default. Both given is refused: one
    of them would be ignored."""
    chosen = [s for s in impls.split(",") if s]
    if chosen and config_impl != "auto":
        raise InputError(f"--onlstm-impl {config_impl} and --onlstm-impls {impls}: give one of them")
    return chosen or ([config_impl] if config_impl != "auto" else [])


def where(device: torch.device) -> str:
    """The machine the figures are measured on: the CPU's line, or on CUDA the GPU's name."""
    if device.type == "cuda":
        return f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.cuda.get_device_name(device)}"
    return machine_line()


def impl_refusal(impl: str, device: torch.device, model=None) -> str | None:
    """Why the ON-LSTM layers would not run ``impl`` on ``device``, else None: a kernel that does not fit the device
    or, given ``model``, one that fails its self-check there at the model's layer sizes (:mod:`onlstm.nn.selfcheck`,
    run here if not yet). Either way the layer runs its reference loop, which would be timed under the kernel's
    label."""
    try:
        ran = kernels.resolve_impl(impl, device, torch.float32)
    except (ValueError, RuntimeError) as exc:
        return str(exc)
    if impl == "auto":
        return None
    if ran != impl:
        return f"on {device} float32 tensors the layer would run {ran} instead"
    layers = [] if model is None else [m for m in model.modules() if isinstance(m, onlstm.ONLSTM)]
    fell_back = {m.resolved_impl(device) for m in layers} - {impl}
    if not fell_back:
        return None
    return f"the layers run {', '.join(sorted(fell_back))}: the kernel failed its self-check (see onlstm info)"


def variants(cells: list[str], impls: list[str], compiled: bool = False) -> list[tuple[str, str, str | None]]:
    """``(label, cell, impl)`` per model to time: the ON-LSTM once per ``impls`` entry (``onlstm/<impl>``), and
    with ``compiled`` each also as ``<label>+compile``."""
    out: list[tuple[str, str, str | None]] = []
    for cell in cells:
        chosen = impls if cell == "onlstm" else []
        out += [(f"onlstm/{impl}", cell, impl) for impl in chosen] or [(cell, cell, None)]
    return [(f"{n}{tag}", c, i) for n, c, i in out for tag in ("", COMPILED)[: 1 + compiled]]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    sys.exit(main())
