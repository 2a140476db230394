"""Train several encoders with the same data, budget and seeds, and evaluate them by length: :func:`compare`
(docs/logic.md, "Comparison"; a finished run with the same settings is reused).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .. import encoders
from ..checkpoint import CheckpointError
from ..device import resolve_device
from ..errors import EXIT_INTERRUPTED, InputError
from ..files import json_dict, sha256_file, write_json, write_text
from ..lock import live_holder
from ..runs import RunDir
from ..runs.budget import BUDGETS, Budget
from ..runs.engine import resume_refusal as engine_refusal
from ..runs.resume import resume_settings
from ..studies.grid import check_study_folder, same_inputs
from ..studies.parallel import Ended, Job, threads_per_job, train_in_processes
from ..studies.stats import seed_difference
from .config import RUNTIME_FIELDS, read_sections
from .data import Example, load_training_examples, recorded_path, same_path, trained_on, validation_examples
from .evaluate import (
    DEFAULT_BUCKETS,
    LengthAccuracy,
    evaluate_examples,
    format_table,
    majority_baseline,
    read_test_examples,
)
from .formulas import to_text
from .model import KIND, LogicModelConfig, load_classifier
from .parallel import logic_job
from .train import (
    LogicTrainConfig,
    read_history,
    train,
)


@dataclass
class CompareResult:
    out_dir: Path
    runs: list[dict] = field(default_factory=list)  # per run: cell, seed, run_dir, train (summary), test
    results: dict[str, list[LengthAccuracy]] = field(default_factory=dict)  # per cell, its seeds' test results
    baseline: LengthAccuracy | None = None
    budget: str = ""  # the training budget every run shared, in words (:func:`budget_text`)
    interrupted: bool = False
    table: str = ""
    plot: Path | None = None  # OUT/accuracy_by_length.png
    curves: Path | None = None  # OUT/training_curves.png: validation and training accuracy against step
    curves_by_ops: Path | None = None  # OUT/curves_by_ops.png: validation accuracy by operator count (if recorded)
    unfinished: list[dict] = field(default_factory=list)  # finished_only: the runs not scored, and how far they got
    differences: list[dict] = field(default_factory=list)  # the first cell against each other (:func:`difference`)
    failed: list[Ended] = field(default_factory=list)  # jobs > 1: the runs whose process failed, and why


def compare(
    model_cfg: LogicModelConfig,
    train_cfg: LogicTrainConfig,
    data: str | Path,
    out: str | Path,
    cells: Iterable[str] = ("onlstm", "lstm"),
    seeds: Iterable[int] = (0,),
    buckets: Iterable[int] = DEFAULT_BUCKETS,
    log: Callable[[str], None] | None = print,
    split: str = "test",
    finished_only: bool = False,
    test_data: str | Path | None = None,
    jobs: int = 1,
    go_on: str | None = None,
) -> CompareResult:
    """Train every cell with every seed (same data, same budget), evaluate on the test files of ``buckets``
    (``split='valid'``: on each run's own validation hold-out of the training files, by length; ``test_data``: on
    another folder's test files). ``finished_only``: train nothing, score the finished runs and list the others in
    ``unfinished``. ``jobs`` > 1: train the runs that need it that many at a time, each in a process of its own
    (:mod:`onlstm.studies.parallel`). ``go_on``: the command said to go on after a Ctrl-C (the comparison's own).
    ``out``: new, empty or a comparison's (:func:`check_compare_folder`, checked first)."""
    log, out, cells, seeds, buckets = log or (lambda _m: None), Path(out), list(cells), list(seeds), list(buckets)
    check_compare_folder(out)
    scored = _scored_pairs(split, data, test_data, train_cfg, seeds, buckets)
    res = CompareResult(out, baseline=majority_baseline(scored[seeds[0]][0]), budget=budget_text(train_cfg))
    start = time.perf_counter()
    log(f"budget of every run: {res.budget}")

    def save() -> None:  # compare.json: what was compared, the settings and budget every run shared, the runs so far
        record = {"kind": "logic-compare", "data": str(data), "cells": cells, "seeds": seeds, "buckets": buckets}
        record.update(split=split, model=model_cfg.to_dict(), train=train_cfg.to_dict(), budget=res.budget)
        record.update(runs=res.runs, majority_baseline=res.baseline.to_dict(), interrupted=res.interrupted)
        record.update(test_data=None if test_data is None else str(test_data), unfinished=res.unfinished)
        record.update(differences=res.differences, failed=[asdict(e) for e in res.failed])
        write_json(out / "compare.json", {**record, "seconds": round(time.perf_counter() - start, 1)})

    runs = list(itertools.product(seeds, cells))
    if not finished_only:
        _check_grid(out, runs, model_cfg, train_cfg, data)
        if jobs > 1:
            job = lambda s, c: _job(out, replace(model_cfg, cell=c), replace(train_cfg, seed=s), data, jobs, go_on)
            _train_in_processes(res, [job(s, c) for s, c in runs], jobs, log, go_on)
            finished_only = True  # every run is now scored if it finished, else listed with how far it got
    for seed, cell in runs:
        mcfg, tcfg, run_dir = replace(model_cfg, cell=cell), replace(train_cfg, seed=seed), out / f"{cell}-seed{seed}"
        if finished_only:
            if (summary := _finished_or_listed(res, run_dir, mcfg, tcfg, data, log)) is None:
                continue
        else:
            summary = _train_or_reuse(run_dir, mcfg, tcfg, data, log, go_on)
            if summary is None:  # interrupted: keep what is done, say so, and list what is not
                _list_the_rest(res, runs[runs.index((seed, cell)) :], model_cfg, train_cfg, data)
                break
        acc = _score_run(run_dir, tcfg, *scored[seed], split, f"{cell}, seed {seed}: {split}", log)
        res.results.setdefault(cell, []).append(acc)
        res.runs.append({"cell": cell, "seed": seed, "run_dir": str(run_dir), "train": summary, "test": acc.to_dict()})
        save()
    res = _finish(res, cells, buckets, train_cfg.max_train_ops)
    save()  # again: with the differences
    return res


#: What a comparison writes into its folder besides its runs (``<cell>-seed<seed>``) and their logs (``--jobs``):
#: its record, its table and its figures (:func:`compare`, :func:`_finish`). Anything else there is the user's.
COMPARE_FILES = ("compare.json", "table.md", "accuracy_by_length.png", "training_curves.png", "curves_by_ops.png")


def check_compare_folder(out: Path) -> None:
    """``--out``: new, empty, or a comparison's: its runs and their logs and, with a ``compare.json`` of kind
    ``logic-compare`` there, its :data:`COMPARE_FILES`; a folder holding anything else is the user's (a
    compare.json or a table.md of theirs would be written over), refused before any work. A run folder is the
    comparison's by its name: what is inside is checked when it is trained (a run of another kind is refused)."""
    check_study_folder(out, "logic compare", "logic-compare", COMPARE_FILES, folders=("evals",))


def _scored_pairs(
    split: str,
    data: str | Path,
    test_data: str | Path | None,
    cfg: LogicTrainConfig,
    seeds: list[int],
    buckets: list[int],
) -> dict[int, tuple[list, str]]:
    """The pairs each seed's runs are scored on and their fingerprint (:func:`_pairs_key`), read once and before
    any training (a problem fails early)."""
    if split == "valid":
        lists = {seed: validation_examples(data, replace(cfg, seed=seed), buckets) for seed in seeds}
    else:
        lists = dict.fromkeys(seeds, read_test_examples(test_data or data, "test", buckets))
    keys = {id(v): _pairs_key(v) for v in lists.values()}  # once a list: the test split's seeds share one
    return {seed: (v, keys[id(v)]) for seed, v in lists.items()}


def _train_in_processes(res: CompareResult, todo: list[Job | None], jobs: int, log, go_on: str | None) -> None:
    """Train ``todo`` (None: a run with nothing to train) ``jobs`` at a time
    (:func:`~onlstm.studies.parallel.train_in_processes`); an interruption and the runs that failed go to ``res``,
    and an interruption's line says to go on with ``go_on``."""
    res.out_dir.mkdir(parents=True, exist_ok=True)  # the runs' logs go beside them
    ended = train_in_processes([j for j in todo if j is not None], jobs, log)
    res.interrupted = any(e.code == EXIT_INTERRUPTED for e in ended)
    res.failed = [e for e in ended if e.code != EXIT_INTERRUPTED or e.signal]  # a killed run is named
    if res.interrupted and go_on:
        log(f"every run stopped with its resume file saved; continue with: {go_on}")


def _check_grid(out: Path, runs: list, model_cfg: LogicModelConfig, train_cfg: LogicTrainConfig, data) -> None:
    """Before any training: no run there would be deleted to be trained again (:func:`_check_kept`), and, when a
    run is to train, the training files read once (a bad one is one line here, not the same failure in every run)."""
    to_train = False
    for seed, cell in runs:
        mcfg, tcfg = replace(model_cfg, cell=cell), replace(train_cfg, seed=seed)
        held = _Held.read(out / f"{cell}-seed{seed}", mcfg, tcfg, data)
        _check_kept(held, tcfg)
        to_train = to_train or _finished_run(held, tcfg)[0] is None
    if to_train:
        load_training_examples(data, train_cfg)


def _check_kept(held: _Held, tcfg: LogicTrainConfig) -> None:
    """A run in the comparison's folder that these settings would not reuse or go on with (trained with other
    settings or data, or past this budget) is refused in one line: training it again would delete it."""
    if held.header is None or _finished_run(held, tcfg)[0] is not None or _resumable(held, tcfg)[0]:
        return
    finished = held.result.get("status") in ("finished", "stopped")
    if held.clash:  # its first clause: the rest of the line is about resuming, which is not what is asked here
        why = f"with other settings ({held.clash.split(' when resuming', 1)[0]})"
    elif not held.same_data:
        why = f"on other data ({held.data_path})"
    elif finished:
        why = f"past this budget ({held.result.get('epochs', 0):g} epochs, stopped by {held.result.get('stopped_by')})"
    else:
        return  # an unfinished run that cannot go on (no resume file yet): nothing finished is lost
    raise InputError(
        f"{held.run_dir} holds a run trained {why}; give the comparison's own settings, another --out, or move "
        "that run away to train it again"
    )


def _list_the_rest(res: CompareResult, rest: list, model_cfg, train_cfg, data) -> None:
    """After a Ctrl-C: the interrupted run and those not reached, in ``res.unfinished`` with how far each got."""
    res.interrupted = True
    for seed, cell in rest:
        run_dir = res.out_dir / f"{cell}-seed{seed}"
        held = _Held.read(run_dir, replace(model_cfg, cell=cell), replace(train_cfg, seed=seed), data)
        why = _finished_run(held, replace(train_cfg, seed=seed))[1] or "finished, not scored (interrupted before)"
        res.unfinished.append({"cell": cell, "seed": seed, "run_dir": str(run_dir), "status": why})


def _finished_or_listed(
    res: CompareResult,
    run_dir: Path,
    mcfg: LogicModelConfig,
    tcfg: LogicTrainConfig,
    data: str | Path,
    log: Callable[[str], None],
) -> dict | None:
    """The summary of a finished run, or None after noting in ``res.unfinished`` how far it got."""
    summary, why = _finished_run(_Held.read(run_dir, mcfg, tcfg, data), tcfg)
    what = f"== {mcfg.cell}, seed {tcfg.seed}:"
    if summary is None:
        log(f"{what} not scored, {why}")
        res.unfinished.append({"cell": mcfg.cell, "seed": tcfg.seed, "run_dir": str(run_dir), "status": why})
    else:
        log(f"{what} the finished run in {run_dir}")
    return summary


def budget_text(cfg: LogicTrainConfig) -> str:
    """The training budget shared by every run of a comparison, in words (logged and kept in compare.json)."""
    parts = [f"{cfg.max_steps:,} updates (max_steps)"] if cfg.max_steps is not None else []
    parts.append(f"{cfg.epochs} epochs")
    if cfg.time_limit is not None:
        parts.append(f"{cfg.time_limit:g} min of wall time (runs of different speeds get different updates)")
    parts.append(f"patience {cfg.patience} checks")
    return ", ".join(parts) + ", whichever ends first"


def _score_run(
    run_dir: Path,
    tcfg: LogicTrainConfig,
    examples: list[Example],
    pairs_key: str,
    split: str,
    what: str,
    log: Callable[[str], None],
) -> LengthAccuracy:
    """Accuracy by length of ``run_dir``'s best model on ``examples`` (fingerprint ``pairs_key``), logged as one
    line, and kept in ``OUT/evals/<run>/<split>.json`` with what it read (the weights, the pairs): read back while
    those are the same, and for a run kept without its weights (:func:`~onlstm.studies.grid.same_inputs`)."""
    path = _evals_path(run_dir, split)
    inputs = {"pairs": pairs_key, "weights": _weights_key(run_dir)}
    kept = json_dict(path) or {}
    if same_inputs(kept.get("inputs"), inputs) and isinstance(kept.get("accuracy"), dict):
        acc, how = LengthAccuracy.from_dict(kept["accuracy"]), "kept"
    elif inputs["weights"] == "none":
        raise InputError(f"{run_dir} holds no weights and no kept score on these pairs; score it where its weights are")
    else:
        model, _ = load_classifier(run_dir, "best", resolve_device(tcfg.device))
        t0 = time.perf_counter()
        acc, how = (
            evaluate_examples(model, examples, tcfg.eval_batch_size),
            f"{time.perf_counter() - t0:.0f} s to evaluate",
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"inputs": inputs, "accuracy": acc.to_dict()})
    parts = list(acc.summary().items())[:2]  # <=6 and 7-12
    shown = ", ".join(f"{name} {100 * v:.1f}%" for name, v in parts if v == v)  # NaN: no pairs of those lengths
    log(f"{what} accuracy {shown} ({how})")
    return acc


def _evals_path(run_dir: Path, split: str) -> Path:
    return run_dir.parent / "evals" / run_dir.name / f"{split}.json"


def _pairs_key(examples: list[Example]) -> str:
    """The scored pairs' fingerprint: their labels and formulas, in order."""
    text = "\n".join(f"{e.label}\t{to_text(e.a)}\t{to_text(e.b)}" for e in examples)
    return hashlib.sha256(text.encode()).hexdigest()


def _weights_key(run_dir: Path) -> str:
    best = RunDir(run_dir).weights("best")
    return sha256_file(best) if best.is_file() else "none"


def _train_or_reuse(
    run_dir: Path,
    mcfg: LogicModelConfig,
    tcfg: LogicTrainConfig,
    data: str | Path,
    log: Callable[[str], None],
    go_on: str | None = None,
) -> dict | None:
    """The training summary of ``run_dir``: reused when finished with these settings and data, else trained
    (resumed when an interrupted run with these settings is there); ``None`` when this training was interrupted
    (its stop's line says to go on with ``go_on``)."""
    what, held = f"== {mcfg.cell}, seed {tcfg.seed}:", _Held.read(run_dir, mcfg, tcfg, data)
    reused, _ = _finished_run(held, tcfg)
    if reused is not None:
        log(f"{what} reusing the finished run in {run_dir}")
        return reused
    resume, doing = _resumable(held, tcfg)
    if holder := live_holder(run_dir):  # another comparison's run (two over one grid): its lock refuses this one
        doing = f"training now ({holder}), not here:"
    log(f"{what} {doing} {run_dir}")
    trained = train(mcfg, tcfg, data, run_dir, log=log, resume=resume, replace=not resume, resume_command=go_on)
    return None if trained.interrupted else trained.record()


def _job(
    out: Path, mcfg: LogicModelConfig, tcfg: LogicTrainConfig, data: str | Path, jobs: int, go_on: str | None = None
) -> Job | None:
    """The training job of one run of a comparison, ``None`` when it is finished with these settings and data."""
    held = _Held.read(out / f"{mcfg.cell}-seed{tcfg.seed}", mcfg, tcfg, data)
    if _finished_run(held, tcfg)[0] is not None:
        return None
    # every job is made before any starts: a run of the user's own encoder is refused before anything is written
    how = f"--jobs {jobs} trains each run in a new process: train them in this one with --jobs 1 (the default)"
    encoders.check_in_new_processes([mcfg.cell], how)
    tcfg = replace(tcfg, threads=threads_per_job(tcfg.threads, jobs))
    return logic_job(held.run_dir, mcfg, tcfg, data, _resumable(held, tcfg)[0], go_on)


def run_header(out: Path, model_cfg: LogicModelConfig, cfg: LogicTrainConfig) -> tuple[dict, str]:
    """The header of the logic run in ``out`` and why it cannot be resumed with these settings ("": it was trained
    with them; :func:`~onlstm.runs.resume_settings`). Raises :class:`CheckpointError` when the file is missing,
    corrupt, of another kind or does not parse."""
    header = RunDir(out).read_config(KIND, "a logic classifier")
    given = {"model": asdict(model_cfg), "train": asdict(cfg)}
    return header, resume_settings(header, read_sections, given, RUNTIME_FIELDS, Path(out))[1]


def resume_refusal(out: Path, clash: str, cfg: LogicTrainConfig) -> str:
    """Why the run in ``out`` cannot be resumed with ``cfg``: its settings clash (:func:`run_header`), or the one
    rule of every trainer (:func:`~onlstm.runs.engine.resume_refusal`); "" when it can."""
    return clash or engine_refusal(RunDir(out), KIND, Budget.of(cfg))


@dataclass(frozen=True)
class _Held:
    """What a comparison finds in one run's directory, read once for both questions asked of it (is it finished
    with these settings and data? can it go on?): its header, why its settings clash with the comparison's (""
    when they do not), its result record, whether it was trained on the comparison's training files
    (:func:`_same_data`); ``header`` None when no readable logic run is there."""

    run_dir: Path
    header: dict | None
    clash: str
    result: dict
    same_data: bool = False

    @classmethod
    def read(cls, run_dir: Path, mcfg: LogicModelConfig, tcfg: LogicTrainConfig, data: str | Path) -> _Held:
        try:
            header, clash = run_header(run_dir, mcfg, tcfg)
            return cls(run_dir, header, clash, RunDir(run_dir).results() or {}, _same_data(header, data, tcfg))
        except CheckpointError:
            return cls(run_dir, None, "no run", {})

    @property
    def data_path(self) -> str | None:
        return recorded_path(self.header or {})


def _same_data(header: dict, data: str | Path, tcfg: LogicTrainConfig) -> bool:
    """Whether the run of ``header`` was trained on the training files ``data`` holds now: by their contents (the
    fingerprint it recorded; the same folder generated again with another seed is other data, another spelling of
    its path is not); for a run written before fingerprints were recorded, by the path, resolved."""
    same = trained_on(header, data, tcfg)
    return same_path(recorded_path(header), data) if same is None else same


def _resumable(held: _Held, tcfg: LogicTrainConfig) -> tuple[bool, str]:
    """Whether the unfinished run ``held`` goes on from its resume file (else it is trained again from step 0),
    and the words for it."""
    same_data, clash, result = held.same_data, held.clash, held.result
    finished = not clash and result.get("status") in ("finished", "stopped")
    try:
        go_on = same_data and not resume_refusal(held.run_dir, clash, tcfg)
    except CheckpointError:  # an unreadable resume file: the run is trained again
        go_on = False
    doing = ("extending the finished run in" if finished else "resuming the interrupted run in") if go_on else ""
    return go_on, doing or "training into"


def _same_stop(header: dict, result: dict, tcfg: LogicTrainConfig) -> bool:
    """Whether a run with ``tcfg``'s budget stops where the finished run of ``header`` stopped (``result``: its
    record): the budget that stopped it unchanged, and no other budget below what the run used (patience: none)."""
    saved = header.get("train") or {}
    used = {"epochs": result["epochs"], "max_steps": result["steps"], "time_limit": result["seconds"] / 60}
    for name in BUDGETS:
        new = getattr(tcfg, name)
        if name == result.get("stopped_by"):
            if new != saved.get(name):
                return False
        elif new is not None and new < used[name]:
            return False
    return True


def _finished_run(held: _Held, tcfg: LogicTrainConfig) -> tuple[dict | None, str]:
    """``(result record, "")`` of a run finished with these settings, data and budget, else ``(None, how far it
    got or why it does not count)``."""
    header, result = held.header, held.result
    if header is None:
        return None, "not started"
    if held.clash:
        return None, f"trained with other settings ({held.clash})"
    if not held.same_data:
        return None, f"trained on other data ({held.data_path})"
    done = result.get("status") in ("finished", "stopped") and _same_stop(header, result, tcfg)
    kept = (held.run_dir.parent / "evals" / held.run_dir.name).is_dir()  # kept without its weights: its scores
    if done and (RunDir(held.run_dir).weights("best").exists() or kept):
        return result, ""
    return None, _progress(held.run_dir, result.get("status") or header.get("status") or "running", tcfg)


def _progress(run_dir: Path, status: str, tcfg: LogicTrainConfig) -> str:
    """How far a run got, from its history: ``STATUS: epoch E of N, best validation V%`` (STATUS says who trains it
    when a live process holds its lock, whatever its record says)."""
    holder = live_holder(run_dir)
    status = f"training now ({holder})" if holder else status
    try:
        history = read_history(run_dir, "let the run write its next check")
    except CheckpointError:  # none yet, or unreadable: how far it got is then unknown
        history = []
    checks = [r for r in history if isinstance(r, dict) and isinstance(r.get("valid_accuracy"), (int, float))]
    if not checks:
        return f"{status}, no validation yet"
    best = max(r["valid_accuracy"] for r in checks)
    return f"{status}: epoch {checks[-1].get('epoch', 0):g} of {tcfg.epochs}, best validation {100 * best:.2f}%"


def difference(first: list[LengthAccuracy], other: list[LengthAccuracy], pool: str = "7-12") -> dict:
    """``first`` minus ``other`` on a pooled column, mean over seeds, with its standard error
    (``sqrt(s1²/n1 + s2²/n2)``, sample variances) and the verdict: ``ahead`` or ``behind`` when the difference
    exceeds twice that error, else ``level``; ``None`` figures with fewer than 2 seeds on a side."""
    a, b = ([r.summary()[pool] for r in rs] for rs in (first, other))
    return {"pool": pool} | seed_difference(a, b)


def verdict_pool(scored: LengthAccuracy | None) -> str:
    """The pooled column the verdict is taken on: 7-12 operators (length generalisation) when the scored pairs
    (``scored``: any result on them) have such lengths, else all of them (a systematicity split's held-out pairs
    and a validation hold-out have none)."""
    return "7-12" if scored is None or not math.isnan(scored.summary()["7-12"]) else "all"


def difference_line(first: str, other: str, d: dict) -> str:
    """One line of :func:`difference` for people, in accuracy points."""
    if d["difference"] is None:
        return f"{first} - {other}, pooled {d['pool']}: {d['verdict']}"
    n1, n2 = d["seeds"]
    return (
        f"{first} - {other}, pooled {d['pool']}: {100 * d['difference']:+.2f} points (standard error "
        f"{100 * d['se']:.2f} over {n1} and {n2} seeds): {d['verdict']} (ahead or behind means beyond 2 SE)"
    )


def _finish(res: CompareResult, cells: list[str], buckets: list[int], max_train_ops: int) -> CompareResult:
    """The table, the differences and the figures of the runs scored; table.md always says what this call found
    (the runs not scored included), and a figure it did not draw is removed (it showed an earlier call's runs)."""
    for name in COMPARE_FILES[2:]:
        (res.out_dir / name).unlink(missing_ok=True)
    if not res.results:
        unscored = "".join(f"\n- not scored: {u['cell']}, seed {u['seed']}: {u['status']}" for u in res.unfinished)
        write_text(res.out_dir / "table.md", f"No run of the comparison is scored.\n{unscored}\n")
        return res
    from .plots import plot_accuracy_by_length, plot_curves_by_ops, plot_training_curves

    rows = list(res.results.items())
    res.table = format_table(rows + [("majority label", [res.baseline])], buckets, counts=res.baseline)
    first, *others = cells  # the first compared cell against each other, scored or not
    got = lambda cell: res.results.get(cell, [])
    pool = verdict_pool(res.baseline)
    res.differences = [{"first": first, "other": o} | difference(got(first), got(o), pool) for o in others]
    notes = [difference_line(d["first"], d["other"], d) for d in res.differences]
    notes += [f"not scored: {u['cell']}, seed {u['seed']}: {u['status']}" for u in res.unfinished]
    if notes:
        res.table += "\n\n" + "\n".join(f"- {n}" for n in notes)
    res.plot = plot_accuracy_by_length(rows, res.out_dir / "accuracy_by_length.png", max_train_ops)
    curves = []
    for run in res.runs:
        try:
            curves.append((run["cell"], read_history(run["run_dir"], "train it again")))
        except CheckpointError:  # a run directory without a history (never validated): nothing to draw
            pass
    res.curves = plot_training_curves(curves, res.out_dir / "training_curves.png")
    if any(r.get("valid_by_ops") for _, h in curves for r in h):
        res.curves_by_ops = plot_curves_by_ops(curves, res.out_dir / "curves_by_ops.png", max_train_ops)
    write_text(res.out_dir / "table.md", f"{res.table}\n\nBudget of every run: {res.budget}\n")
    return res
