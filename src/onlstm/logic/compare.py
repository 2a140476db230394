"""Train several encoders with the same data, budget and seeds, and evaluate them by length: :func:`compare`
(docs/logic.md, "Comparison"; a finished run with the same settings is reused).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..checkpoint import CheckpointError
from ..files import write_json, write_text
from ..runs import RunDir, resolve_device
from .evaluate import (
    DEFAULT_BUCKETS,
    LengthAccuracy,
    evaluate_examples,
    format_table,
    majority_baseline,
    read_test_examples,
)
from .model import LogicModelConfig, load_classifier
from .train import (
    BUDGETS,
    LogicTrainConfig,
    read_history,
    resume_refusal,
    run_header,
    train,
    validation_examples,
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
) -> CompareResult:
    """Train every cell with every seed (same data, same budget), evaluate on the test files of ``buckets``
    (``split='valid'``: on each run's own validation hold-out of the training files, by length)."""
    log = log or (lambda _m: None)
    out, cells, seeds, buckets = Path(out), list(cells), list(seeds), list(buckets)

    # The pairs each seed's runs are scored on, read once and before any training (a problem fails early).
    if split == "valid":
        scored = {seed: validation_examples(data, replace(train_cfg, seed=seed), buckets) for seed in seeds}
    else:
        scored = dict.fromkeys(seeds, read_test_examples(data, "test", buckets))
    res = CompareResult(out, baseline=majority_baseline(scored[seeds[0]]), budget=budget_text(train_cfg))
    start = time.perf_counter()
    log(f"budget of every run: {res.budget}")

    def save() -> None:  # compare.json: what was compared, the settings and budget every run shared, the runs so far
        record = {"kind": "logic-compare", "data": str(data), "cells": cells, "seeds": seeds, "buckets": buckets}
        record.update(split=split, model=model_cfg.to_dict(), train=train_cfg.to_dict(), budget=res.budget)
        record.update(runs=res.runs, majority_baseline=res.baseline.to_dict(), interrupted=res.interrupted)
        write_json(out / "compare.json", {**record, "seconds": round(time.perf_counter() - start, 1)})

    for seed in seeds:
        for cell in cells:
            mcfg, tcfg = replace(model_cfg, cell=cell), replace(train_cfg, seed=seed)
            run_dir = out / f"{cell}-seed{seed}"
            summary = _train_or_reuse(run_dir, mcfg, tcfg, data, log)
            if summary is None:  # interrupted: keep what is done, say so
                res.interrupted = True
                save()
                return _finish(res, buckets, train_cfg.max_train_ops)
            acc = _score_run(run_dir, tcfg, scored[seed], f"{cell}, seed {seed}: {split}", log)
            res.results.setdefault(cell, []).append(acc)
            res.runs.append(
                {"cell": cell, "seed": seed, "run_dir": str(run_dir), "train": summary, "test": acc.to_dict()}
            )
            save()
    return _finish(res, buckets, train_cfg.max_train_ops)


def budget_text(cfg: LogicTrainConfig) -> str:
    """The training budget shared by every run of a comparison, in words (logged and kept in compare.json)."""
    parts = [f"{cfg.max_steps:,} updates (max_steps)"] if cfg.max_steps is not None else []
    parts.append(f"{cfg.epochs} epochs")
    if cfg.time_limit is not None:
        parts.append(f"{cfg.time_limit:g} min of wall time (runs of different speeds get different updates)")
    parts.append(f"patience {cfg.patience} checks")
    return ", ".join(parts) + ", whichever ends first"


def _score_run(
    run_dir: Path, tcfg: LogicTrainConfig, examples: list, what: str, log: Callable[[str], None]
) -> LengthAccuracy:
    """Accuracy by length of ``run_dir``'s best model on ``examples``, logged as one line."""
    model, _ = load_classifier(run_dir, "best", resolve_device(tcfg.device))
    t0 = time.perf_counter()
    acc = evaluate_examples(model, examples, tcfg.eval_batch_size)
    parts = list(acc.summary().items())[:2]  # <=6 and 7-12
    shown = ", ".join(f"{name} {100 * v:.1f}%" for name, v in parts if v == v)  # NaN: no pairs of those lengths
    log(f"{what} accuracy {shown} ({time.perf_counter() - t0:.0f} s to evaluate)")
    return acc


def _train_or_reuse(
    run_dir: Path, mcfg: LogicModelConfig, tcfg: LogicTrainConfig, data: str | Path, log: Callable[[str], None]
) -> dict | None:
    """The training summary of ``run_dir``: reused when finished with these settings and data, else trained
    (resumed when an interrupted run with these settings is there); ``None`` when this training was interrupted."""
    what = f"== {mcfg.cell}, seed {tcfg.seed}:"
    try:
        header, clash = run_header(run_dir, mcfg, tcfg)
    except CheckpointError:
        header, clash = {}, "no run"
    same_data = (header.get("data") or {}).get("path") == str(data)
    finished = not clash and header.get("status") == "finished" and header.get("result") is not None
    if finished and same_data and _same_stop(header, tcfg) and RunDir(run_dir).weights("best").exists():
        log(f"{what} reusing the finished run in {run_dir}")
        return header["result"]
    try:
        go_on = same_data and not resume_refusal(run_dir, header, clash, tcfg)
    except CheckpointError:  # an unreadable resume file: the run is trained again
        go_on = False
    doing = ("extending the finished run in" if finished else "resuming the interrupted run in") if go_on else ""
    log(f"{what} {doing or 'training into'} {run_dir}")
    if train(mcfg, tcfg, data, run_dir, log=log, resume=go_on, replace=not go_on).interrupted:
        return None
    return RunDir(run_dir).read_config()["result"]


def _same_stop(header: dict, tcfg: LogicTrainConfig) -> bool:
    """Whether a run with ``tcfg``'s budget stops where the finished run of ``header`` stopped: the budget that
    stopped it unchanged, and no other budget below what the run used (patience: none)."""
    saved, result = header.get("train") or {}, header["result"]
    used = {"epochs": result["epochs"], "max_steps": result["steps"], "time_limit": result["seconds"] / 60}
    for name in BUDGETS:
        new = getattr(tcfg, name)
        if name == result.get("stopped_by"):
            if new != saved.get(name):
                return False
        elif new is not None and new < used[name]:
            return False
    return True


def _finish(res: CompareResult, buckets: list[int], max_train_ops: int) -> CompareResult:
    if not res.results:
        return res
    from .plots import plot_accuracy_by_length, plot_curves_by_ops, plot_training_curves

    rows = list(res.results.items())
    res.table = format_table(rows + [("majority label", [res.baseline])], buckets, counts=res.baseline)
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
