"""The training part of ``onlstm bench gpu``: the experiments' own commands, timed.

``lm train --config ptb-paper`` with the Triton kernel and with the reference loop (seconds per step after
a warm-up, per epoch, peak GPU memory), ``logic train --config paper`` (updates/s) and ``syneval`` with the
Triton run's weights (sentences/s). Each command is parsed by the real ``onlstm`` parser from the words a
user would type and run in this process; without ``--lm-data``/``--logic-data``/``--syneval-data`` the data
are generated (no network).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shlex
import time
from pathlib import Path
from typing import Any

import torch

from ..errors import exception_line
from ..runs import RunDir

PTB_TRAIN_TOKENS = 929_589  # PTB's training text with one <eos> per line (887,521 words + 42,068 lines)
PTB_VOCAB = 10_000


def command(argv: list[str]) -> str:
    return "onlstm " + shlex.join(argv)


def _parse(argv: list[str]):
    from ..cli import build_parser

    return build_parser().parse_args(argv)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --------------------------------------------------------------------------- data


def lm_corpus(folder: Path, tokens: int, vocab: int, seed: int = 0) -> Path:
    """A synthetic PTB-layout corpus (``ptb.{train,valid,test}.txt``, one sentence of 20 words a line, as
    tests/support.py's tiny corpus): ``tokens`` Zipf-distributed training words over ``w0 .. w{vocab-1}``,
    every word at least once in the training text (so valid and test have no unknown word)."""
    r = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    cum = []
    total = 0.0
    for i in range(vocab):  # Zipf: the frequency of the k-th word ~ 1/k, as in natural text
        total += 1.0 / (i + 1)
        cum.append(total)

    def lines(n: int, drawn: list[str] | None = None) -> str:
        drawn = drawn if drawn is not None else r.choices(words, cum_weights=cum, k=n)
        return "".join(" " + " ".join(drawn[i : i + 20]) + " \n" for i in range(0, len(drawn), 20))

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ptb.train.txt").write_text(lines(0, words) + lines(tokens))
    for split in ("valid", "test"):
        (folder / f"ptb.{split}.txt").write_text(lines(max(200, tokens // 50)))
    return folder


def logic_data(folder: Path, per_length: int, seed: int = 0) -> Path:
    """Pairs of formulas with up to 6 operators, as ``onlstm logic generate`` writes them."""
    from ..logic.generate import GenerateConfig, generate_dataset

    generate_dataset(folder, GenerateConfig(per_length=per_length, seed=seed, max_ops=6, test_count=2), log=None)
    return folder


def syneval_items(path: Path, vocab_file: Path, n: int, seed: int = 0) -> Path:
    """``n`` minimal pairs over the run's vocabulary (4-13 words, one word changed), as a sample TSV."""
    from ..data.vocab import Vocab

    words = [w for w in Vocab.load(vocab_file).words if not w.startswith("<")]
    r = random.Random(seed)
    rows = []
    for _ in range(n):
        good = [r.choice(words) for _ in range(r.randint(4, 13))]
        k = r.randrange(1, len(good))
        bad = [*good[:k], r.choice(words), *good[k + 1 :]]
        rows.append(f"simple_agrmt\t{' '.join(good)}\t{' '.join(bad)}\n")
    path.write_text("".join(rows))
    return path


# --------------------------------------------------------------------------- runs


def lm_run(argv: list[str], device: torch.device, synthetic: bool) -> dict[str, Any]:
    """``onlstm lm train ARGV`` with each step's end time taken; the figures of the report's training table."""
    from ..lm.config import explicit_settings, overrides_from_args
    from ..lm.train import train

    args = _parse(argv)
    explicit = explicit_settings(args.config, overrides_from_args(args))
    stamps: list[float] = []
    facts: dict[str, Any] = {}

    def on_step(trainer) -> None:
        _sync(device)
        stamps.append(time.perf_counter())
        if not facts:
            facts.update(_lm_facts(trainer, device, synthetic))

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    result = train(args.out, args.data_dir, explicit, max_steps=args.max_steps, on_step=on_step, log=lambda _m: None)
    warm = max(1, min(10, len(stamps) // 10))  # the first steps compile kernels and plan cuDNN: not timed
    per_step = (stamps[-1] - stamps[warm - 1]) / (len(stamps) - warm)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {
        "command": command(argv),
        "status": result["status"],
        "steps": len(stamps),
        "timed_steps": len(stamps) - warm,
        "seconds_per_step": per_step,
        "seconds_per_epoch": per_step * facts["steps_per_epoch"],
        "peak_memory_gib": peak,
        **facts,
    }


def _lm_facts(trainer, device: torch.device, synthetic: bool) -> dict[str, Any]:
    """The layer implementation in use and the steps of one epoch (of PTB when the text is synthetic)."""
    from ..lm.data import bptt_schedule
    from ..nn import ONLSTM

    cfg = trainer.cfg
    rows = PTB_TRAIN_TOKENS // cfg.batch_size if synthetic else trainer.n_rows
    schedule = bptt_schedule(
        rows, cfg.bptt, cfg.seed, 1, cfg.variable_bptt, cfg.bptt_short_prob, cfg.bptt_std, cfg.min_seq_len
    )
    layer = next((m for m in trainer.model.modules() if isinstance(m, ONLSTM)), None)
    return {
        "impl_used": layer.resolved_impl(device) if layer is not None else None,
        "steps_per_epoch": len(schedule),
        "epoch_of": f"PTB's {PTB_TRAIN_TOKENS:,} training tokens" if synthetic else "the given training text",
    }


def logic_run(argv: list[str]) -> dict[str, Any]:
    """``onlstm logic train ARGV``; updates/s by the command's own clock."""
    from ..logic.cli import resolve_settings
    from ..logic.train import train

    model_cfg, train_cfg, data, out, _ = resolve_settings(_parse(argv))
    result = train(model_cfg, train_cfg, data, out, log=None)
    return {
        "command": command(argv),
        "status": result.stopped_by,
        "updates": result.steps,
        "seconds": result.seconds,
        "updates_per_s": result.steps / result.seconds if result.seconds > 0 else None,
        "valid_accuracy": result.best_valid_accuracy,
    }


def syneval_run(argv: list[str]) -> dict[str, Any]:
    """``onlstm syneval ARGV --json``; sentences/s as the command reports it."""
    args = _parse(argv)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        args.func(args)
    report = json.loads(text.getvalue())
    model = report["models"][0]
    return {
        "command": command(argv),
        "items": report["items"],
        "seconds": model["seconds"],
        "sentences_per_s": model["sentences_per_s"],
    }


# --------------------------------------------------------------------------- the section


def _guarded(name: str, fn, ok) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(record, check)`` of one run: its figures, and whether it did what was asked (``ok(record)``: the
    reason it did not, or None); an exception fails the check with its message."""
    try:
        record = {"name": name, **fn()}
    except Exception as exc:
        record = {"name": name, "error": exception_line(exc, 300)}
        return record, {"name": name, "passed": False, "worst": record["error"]}
    problem = ok(record)
    return record, {"name": name, "passed": problem is None, "worst": problem}


def training_runs(prof, opts, work: Path, lm_steps: int, logic_steps: int) -> dict[str, Any]:
    """Every timed command of the report (``prof``: the run's :class:`~onlstm.bench.gpu.Profile`)."""
    from ..nn import selfcheck

    pairs = [_lm(prof, opts, work, impl, lm_steps) for impl in (prof.kernel, "reference")]
    pairs += [_logic(prof, opts, work, logic_steps), _syneval(prof, opts, work)]
    return {
        "runs": [record for record, _ in pairs],
        "checks": [check for _, check in pairs],
        "selfchecks": [r.line() for r in selfcheck.results()],  # the kernel's own checks in the runs above
    }


def _lm(prof, opts, work: Path, impl: str, steps: int) -> tuple[dict[str, Any], dict[str, Any]]:
    data = opts.lm_data
    if data is None:
        data = work / "lm-data"
        if not data.exists():
            lm_corpus(data, int(1.5 * steps * prof.lm_step_tokens), prof.lm_vocab)
    where = ["--data-dir", str(data), "--out", str(work / f"lm-{impl}"), "--device", prof.device.type]
    argv = [*"lm train --config ptb-paper".split(), *where, "--max-steps", str(steps), "--onlstm-impl", impl]
    argv += [*"--no-progress --no-tensorboard --no-final-test".split(), *prof.lm_flags]

    def ok(r: dict[str, Any]) -> str | None:
        if r["steps"] != steps or r["status"] != "stopped":
            return f"{r['status']} after {r['steps']} steps"
        return None if r["impl_used"] == impl else f"the layers ran {r['impl_used']!r}"

    return _guarded(
        f"lm train --config ptb-paper, impl {impl}", lambda: lm_run(argv, prof.device, opts.lm_data is None), ok
    )


def _logic(prof, opts, work: Path, steps: int) -> tuple[dict[str, Any], dict[str, Any]]:
    from ..nn import kernels

    data = opts.logic_data or logic_data(work / "logic-data", prof.logic_per_length)
    where = ["--data", str(data), "--out", str(work / "logic"), "--device", prof.device.type]
    budget = ["--max-steps", str(steps), "--valid-every", str(steps)]  # one validation, after the last update
    argv = [*"logic train --config paper".split(), *where, *budget, "--no-progress", *prof.logic_flags]
    auto = kernels.resolve_impl("auto", prof.device, torch.float32)
    return _guarded(
        f"logic train --config paper (impl auto: {auto})",
        lambda: logic_run(argv),
        lambda r: None if r["updates"] == steps else f"{r['status']} after {r['updates']} updates",
    )


def _syneval(prof, opts, work: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    run = work / f"lm-{prof.kernel}"

    def go() -> dict[str, Any]:
        items = opts.syneval_data or syneval_items(work / "syneval.tsv", RunDir(run).vocab_path, prof.syneval_items)
        where = ["--checkpoint", str(run), "--data", str(items), "--device", prof.device.type]
        return syneval_run(["syneval", *where, *"--weights last --json --no-progress".split()])

    return _guarded(
        "syneval (the Triton run's weights, impl auto)",
        go,
        lambda r: None if r["sentences_per_s"] else "no sentence scored",
    )
