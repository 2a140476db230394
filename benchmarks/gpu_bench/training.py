"""The training section of ``benchmarks/gpu_report.py`` (docs/layer.md, "The GPU report"): the experiments'
own commands, parsed by the real ``onlstm`` parser from the words a user would type, run in this process and
timed, on generated data by default.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from onlstm.device import StopRequest
from onlstm.errors import exception_line
from onlstm.nn import kernels, selfcheck
from onlstm.runs import RunDir

from .layer import sync

PTB_TRAIN_TOKENS = 929_589  # PTB's training text with one <eos> per line (887,521 words + 42,068 lines)
PTB_VOCAB = 10_000
Record = dict[str, Any]


def training_runs(prof, args, work: Path) -> Record:
    """Every timed command of the report (``prof``: the run's ``Profile`` in benchmarks/gpu_report.py)."""
    lm_steps, logic_steps = args.lm_steps or prof.steps[0], args.logic_steps or prof.steps[1]
    pairs = [_lm(prof, args, work, name, flags, lm_steps) for name, flags in LM_RUNS]
    lm_records = [record for record, _ in pairs]
    pairs += [_logic(prof, args, work, logic_steps, graphs) for graphs in (True, False)]
    pairs += [_syneval(prof, args, work)]
    return {
        "runs": [record for record, _ in pairs],
        "goals": lm_goals(lm_records, prof.smoke),
        "checks": [check for _, check in pairs],
        "selfchecks": [r.line() for r in selfcheck.results()],  # the kernel's own checks in the runs above
    }


def _guarded(name: str, argv: list[str], fn: Callable[[], Record], ok: Callable[[Record], str | None]):
    """``(record, check)`` of ``onlstm ARGV``: its figures (``fn()``), and whether it did what was asked
    (``ok(record)``: the reason it did not, or None); an exception fails the check with its message."""
    with _stops_asked() as asked:
        try:
            record = {"name": name, "command": "onlstm " + shlex.join(argv), **fn()}
        except Exception as exc:
            record = {"name": name, "error": exception_line(exc, 300)}
    if any(asked):  # Ctrl-C during the command, whatever it returned: the report stops too (exit 130)
        raise KeyboardInterrupt
    if "error" in record:
        return record, {"name": name, "passed": False, "worst": record["error"]}
    problem = ok(record)
    return record, {"name": name, "passed": problem is None, "worst": problem}


def _parse(argv: list[str]):
    from onlstm.cli import build_parser

    return build_parser().parse_args(argv)


#: ``lm train --config ptb-paper`` as timed (issue #49): ON-LSTM on the Triton kernel with CUDA graphs (the default
#: on CUDA) and without, then the same command with ``--cell lstm`` (cuDNN's LSTM), with graphs and without
LM_RUNS = (
    ("onlstm, graphs", ()),
    ("onlstm, eager", ("--no-cuda-graphs",)),
    ("lstm, graphs", ("--cell", "lstm")),
    ("lstm, eager", ("--cell", "lstm", "--no-cuda-graphs")),
)
#: issue #49's goals: ON-LSTM with graphs at most 1.2x the LSTM's step time, at least 1.8x faster than eager ON-LSTM
LM_GOALS = (("lstm, graphs", "at most", 1.2), ("lstm, eager", "at most", 1.2), ("onlstm, eager", "at least", 1.8))


def _lm(prof, args, work: Path, name: str, flags: tuple[str, ...], steps: int) -> tuple[Record, Record]:
    """``lm train --config ptb-paper``, each step's end time taken: s/step after a warm-up, s/epoch, peak memory,
    every step's seconds and the steps that replayed a CUDA graph."""
    from onlstm.lm.config import explicit_settings
    from onlstm.lm.train import train

    data = args.lm_data or work / "lm-data"
    if args.lm_data is None and not data.exists():
        lm_corpus(data, int(1.5 * steps * prof.lm_step_tokens), prof.lm_vocab)
    out, impl = work / f"lm-{name.replace(', ', '-')}", prof.kernel
    where = ["--data-dir", str(data), "--out", str(out), "--device", prof.device.type]
    argv = [*"lm train --config ptb-paper".split(), *where, "--max-steps", str(steps), "--onlstm-impl", impl]
    argv += [*"--no-progress --no-tensorboard --no-final-test".split(), *_model_flags(prof.lm_flags, flags), *flags]
    device, stamps, facts, replayed = prof.device, [], {}, []

    def on_step(trainer) -> None:
        sync(device)
        stamps.append(time.perf_counter())
        if not facts:
            facts.update(_lm_facts(trainer, device, args.lm_data is None))
        graphs = trainer.graphs
        if graphs is not None and graphs.replayed > len(replayed):
            replayed.append(len(stamps) - 1)
        facts["graphs"] = None if graphs is None else {"lengths": len(graphs.lengths), "off": graphs.off}

    def go() -> Record:
        a = _parse(argv)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        explicit = explicit_settings(a.config, a)
        start = time.perf_counter()
        result = train(a.out, a.data_dir, explicit, on_step=on_step, log=lambda _m: None)
        stop_if_interrupted(result.status)
        warm = max(1, min(10, len(stamps) // 10))  # the first steps compile kernels and plan cuDNN: not timed
        per_step = seconds_per_step(stamps, warm)
        return {
            "status": result.status,
            "steps": len(stamps),
            "timed_steps": max(0, len(stamps) - warm),
            "seconds_per_step": per_step,
            "seconds_per_epoch": None if per_step is None else per_step * facts["steps_per_epoch"],
            "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
            "step_seconds": [b - a for a, b in zip([start, *stamps], stamps)],
            "replayed_steps": replayed,
            **facts,
            **_tf32(),
        }

    def ok(r: Record) -> str | None:
        if r["steps"] != steps or r["status"] != "stopped":
            return f"{r['status']} after {r['steps']} steps"
        if name.startswith("onlstm") and r["impl_used"] != impl:
            return f"the layers ran {r['impl_used']!r}"
        want_graphs = "eager" not in name and (device.type == "cuda" or prof.smoke)
        if want_graphs and not r["replayed_steps"]:
            return f"no step replayed a CUDA graph ({r['graphs']})"
        return None

    return _guarded(f"lm train --config ptb-paper, {name}", argv, go, ok)


@contextlib.contextmanager
def _stops_asked() -> Iterator[list[bool]]:
    """Whether each trainer's :class:`~onlstm.device.StopRequest` in the block caught Ctrl-C (or SIGTERM, SIGHUP):
    a stop asked during the last step ends a run as its budget does (status ``stopped``), so the status alone
    cannot tell."""
    asked: list[bool] = []
    leave = StopRequest.__exit__

    def spy(self, *exc):
        asked.append(self.requested)
        return leave(self, *exc)

    with mock.patch.object(StopRequest, "__exit__", spy):
        yield asked


def stop_if_interrupted(status: str) -> None:
    """Go on stopping after a trainer caught Ctrl-C itself (saved, returned ``interrupted``): the report keeps the
    sections finished before and exits 130, rather than record a failed check and run the other commands."""
    if status == "interrupted":
        raise KeyboardInterrupt


def seconds_per_step(stamps: list[float], warm: int) -> float | None:
    """Mean seconds of the steps after the first ``warm`` ones, from their end times; None when none was timed (a
    run stopped after its warm-up: no figure, and the check says how many steps it made)."""
    timed = len(stamps) - warm
    return (stamps[-1] - stamps[warm - 1]) / timed if timed > 0 and warm > 0 else None


def _model_flags(flags: tuple[str, ...], run: tuple[str, ...]) -> list[str]:
    """The profile's lm flags, without ``--chunk-size N`` for an LSTM run (its encoder has no such option)."""
    if "lstm" not in run:
        return list(flags)
    out = list(flags)
    if "--chunk-size" in out:
        i = out.index("--chunk-size")
        del out[i : i + 2]
    return out


def _tf32() -> Record:
    """The TF32 settings in force (PyTorch's defaults unless changed: off for matrix products, on for cuDNN)."""
    return {"tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "tf32_cudnn": torch.backends.cudnn.allow_tf32}


def lm_goals(records: list[Record], smoke: bool) -> list[Record]:
    """Issue #49's goals for ``lm train``: mean seconds per step over the steps where the ON-LSTM run replayed a
    graph (the same segments in every run: one seed, one schedule), the ON-LSTM graph run against each other run."""
    by_name = {r["name"].split(", ", 1)[1]: r for r in records if "step_seconds" in r}
    graphs = by_name.get("onlstm, graphs")
    steps = graphs["replayed_steps"] if graphs else []
    out = []
    for other, how, target in LM_GOALS:
        name = f"onlstm with graphs, {'time' if how == 'at most' else 'speed-up'} against {other}: {how} {target:g}x"
        if not steps or other not in by_name:
            out.append({"goal": name, "value": None, "status": "not measured"})
            continue
        mine = sum(graphs["step_seconds"][i] for i in steps)
        theirs = sum(by_name[other]["step_seconds"][i] for i in steps)
        value = mine / theirs if how == "at most" else theirs / mine
        met = value <= target if how == "at most" else value >= target
        status = "n/a (smoke: the interpreter is no speed)" if smoke else "met" if met else "not met"
        out.append({"goal": name, "value": value, "status": status, "steps": len(steps)})
    return out


def _lm_facts(trainer, device: torch.device, synthetic: bool) -> Record:
    """The layer implementation in use and the steps of one epoch (of PTB when the text is synthetic)."""
    from onlstm.lm.data import bptt_schedule
    from onlstm.nn import ONLSTM

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


def _logic(prof, args, work: Path, steps: int, graphs: bool) -> tuple[Record, Record]:
    """``logic train --config paper``, with its CUDA graphs or ``--no-cuda-graphs``: updates/s by the command's own
    clock (the updates and one validation), and how many updates replayed a graph."""
    from onlstm.logic import train as logic_train
    from onlstm.logic.cli import resolve_settings
    from onlstm.logic.generate import GenerateConfig, generate_dataset

    data = args.logic_data or work / "logic-data"
    if args.logic_data is None and not data.exists():  # as `logic generate` writes (the GPU's: up to 6 operators)
        gen = GenerateConfig(per_length=prof.logic_per_length, max_ops=prof.logic_max_ops, test_count=2)
        generate_dataset(data, gen, log=None)
    out = work / f"logic-{'graphs' if graphs else 'eager'}"
    where = ["--data", str(data), "--out", str(out), "--device", prof.device.type]
    budget = ["--max-steps", str(steps), "--valid-every", str(steps)]  # one validation, after the last update
    argv = [*"logic train --config paper".split(), *where, *budget, "--no-progress", *prof.logic_flags]
    argv += [] if graphs else ["--no-cuda-graphs"]
    made: list = []

    def spy(*a, **kw):
        made.append(step_graphs(*a, **kw))
        return made[-1]

    def go() -> Record:
        model_cfg, train_cfg, data, out, _ = resolve_settings(_parse(argv))
        with mock.patch.object(logic_train, "step_graphs", spy):
            r = logic_train.train(model_cfg, train_cfg, data, out, log=None)
        stop_if_interrupted(r.stopped_by)
        per_s = r.steps / r.seconds if r.seconds > 0 else None
        figures = {"status": r.stopped_by, "updates": r.steps, "seconds": r.seconds, "updates_per_s": per_s}
        g = made[0] if made else None
        used = None if g is None else {"replayed": g.replayed, "lengths": len(g.lengths), "off": g.off}
        return figures | {"valid_accuracy": r.best, "graphs": used}

    def ok(r: Record) -> str | None:
        if r["updates"] != steps:
            return f"{r['status']} after {r['updates']} updates"
        if graphs and (prof.device.type == "cuda" or prof.smoke) and not (r["graphs"] or {}).get("replayed"):
            return f"no update replayed a CUDA graph ({r['graphs']})"
        return None

    step_graphs = logic_train.step_graphs
    auto = kernels.resolve_impl("auto", prof.device, torch.float32)
    name = f"logic train --config paper (impl auto: {auto}), {'graphs' if graphs else 'eager'}"
    return _guarded(name, argv, go, ok)


def _syneval(prof, args, work: Path) -> tuple[Record, Record]:
    """``syneval --json`` with the kernel's lm run's weights: sentences/s as the command reports it."""
    run, items = work / "lm-onlstm-graphs", args.syneval_data or work / "syneval.tsv"
    where = ["--checkpoint", str(run), "--data", str(items), "--device", prof.device.type]
    argv = ["syneval", *where, *"--weights last --json --no-progress".split()]

    def go() -> Record:
        if args.syneval_data is None:
            syneval_items(items, RunDir(run).vocab_path, prof.syneval_items)
        a, text = _parse(argv), io.StringIO()
        with contextlib.redirect_stdout(text):
            a.func(a)
        report = json.loads(text.getvalue())
        model = report["models"][0]
        return {"items": report["items"], "seconds": model["seconds"], "sentences_per_s": model["sentences_per_s"]}

    name = "syneval (the Triton run's weights, impl auto)"
    return _guarded(name, argv, go, lambda r: None if r["sentences_per_s"] else "no sentence scored")


def lm_corpus(folder: Path, tokens: int, vocab: int, seed: int = 0) -> Path:
    """A synthetic PTB-layout corpus (as tests/support.py's, 20 words a line): ``tokens`` training words over
    ``w0 .. w{vocab-1}``, the k-th ~ 1/k as in natural text, each at least once (valid and test have no unknown)."""
    r = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]

    def lines(n: int, drawn: list[str] | None = None) -> str:
        drawn = drawn if drawn is not None else r.choices(words, weights, k=n)
        return "".join(" " + " ".join(drawn[i : i + 20]) + " \n" for i in range(0, len(drawn), 20))

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ptb.train.txt").write_text(lines(0, words) + lines(tokens))
    for split in ("valid", "test"):
        (folder / f"ptb.{split}.txt").write_text(lines(max(200, tokens // 50)))
    return folder


def syneval_items(path: Path, vocab_file: Path, n: int, seed: int = 0) -> Path:
    """``n`` minimal pairs over the run's vocabulary (4-13 words, one word changed), as a sample TSV."""
    from onlstm.data.vocab import Vocab

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
