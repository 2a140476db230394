"""``onlstm lm compare``: the language-model half of the paper as one command (docs/lm.md, "A study with seeds").

Every cell is trained with every seed under the same settings (``OUT/<cell>-seed<seed>``, N runs at a time, each a
process of its own: :mod:`onlstm.studies.parallel`; a finished run is reused, an unfinished one resumed), then every
finished run is measured by the project's own commands, run as a user runs them (``parsing eval-parse --json``,
``syneval --json``), their outputs kept in ``OUT/evals/<cell>-seed<seed>/`` and reused: PTB test perplexity (the
run's final test), the trees' sentence F1 on a treebank (sentences of up to 10 words, and all), Marvin & Linzen on
the pairs the vocabulary covers, and SyntaxGym's suites. The tables give each cell's mean ± sample std over its
finished seeds and the first cell against each other (:func:`~onlstm.studies.stats.seed_difference`).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import encoders
from ..checkpoint import CheckpointError
from ..data.ptb import split_file
from ..errors import EXIT_INTERRUPTED, InputError, OnlstmError, first_line
from ..files import json_dict, same_fingerprint, sha256_file, sha256_files, write_json, write_text
from ..lock import RunLock, live_holder
from ..runs.budget import BUDGETS
from ..runs.dirs import RunDir
from ..runs.resume import resume_settings
from ..studies.grid import check_named_once, same_inputs
from ..studies.grid import check_study_folder as check_folder
from ..studies.parallel import Ended, Job, threads_per_job, train_in_processes
from ..studies.stats import mean_std, seed_difference
from .config import RUNTIME_FIELDS, run_config, run_sections
from .data import TEXT_FINGERPRINT


@dataclass
class Yardsticks:
    """What every finished run is measured on (None: not measured)."""

    treebank: Path | None = None
    syneval_data: Path | None = None
    suites: Path | None = None
    threads: int = 1


@dataclass
class StudyResult:
    out_dir: Path
    runs: list[dict] = field(default_factory=list)  # per finished run: cell, seed, run_dir, its figures
    unfinished: list[dict] = field(default_factory=list)  # cell, seed, run_dir, how far it got
    failed: list[Ended] = field(default_factory=list)
    tables: str = ""
    interrupted: bool = False


def run_dir(out: Path, cell: str, seed: int) -> Path:
    return out / f"{cell}-seed{seed}"


def compare(
    explicit: dict,
    data_dir: Path,
    out: Path,
    cells: list[str],
    seeds: list[int],
    yardsticks: Yardsticks,
    jobs: int = 1,
    finished_only: bool = False,
    log: Callable[[str], None] = print,
) -> StudyResult:
    """Train (unless ``finished_only``) and measure the grid ``cells`` x ``seeds``; ``explicit``: the settings every
    run shares (``{"model": ..., "train": ...}``; a cell or seed in them is the grid's to set, and dropped)."""
    explicit = shared_settings(explicit)
    if not finished_only:
        how = "lm compare trains each run in a new process: train its runs one by one with lm train instead"
        encoders.check_in_new_processes(cells, how)
    trains = check_study(explicit, cells, seeds, data_dir, yardsticks)  # every problem found before anything is written
    check_study_folder(Path(out))
    check_runs(Path(out), explicit, trains, Path(data_dir), log, training=not finished_only)
    if not finished_only:
        check_corpus(explicit, trains, Path(data_dir), Path(out))
    # one training study at a time in a folder; reading the finished runs needs no lock (a study may be training)
    lock = contextlib.nullcontext() if finished_only else RunLock(out, "onlstm lm compare", log=log)
    with lock:
        return _compare(explicit, trains, data_dir, out, cells, seeds, yardsticks, jobs, finished_only, log)


def shared_settings(explicit: dict) -> dict:
    """The settings every run of the grid shares: ``explicit`` less the cell and the seed, which the grid sets."""
    model = {k: v for k, v in explicit.get("model", {}).items() if k != "cell"}
    return {**explicit, "model": model, "train": {k: v for k, v in explicit.get("train", {}).items() if k != "seed"}}


def run_settings(explicit: dict, cell: str, seed: int) -> dict:
    """The settings of the grid's run of ``cell`` and ``seed``."""
    return {"model": {**explicit.get("model", {}), "cell": cell}, "train": {**explicit.get("train", {}), "seed": seed}}


def check_study(explicit: dict, cells: list[str], seeds: list[int], data_dir: Path, yardsticks: Yardsticks) -> dict:
    """Every cell's settings, the grid, the training text and the yardsticks' paths, checked before any run starts;
    returns each run's training settings, ``{(cell, seed): TrainConfig}`` (built once, in the grid's order)."""
    for flag, values in (("--cells", cells), ("--seeds", seeds)):
        check_named_once(flag, values)  # one run would count as two
    trains = {(c, s): run_config(run_settings(explicit, c, s)).train for s in seeds for c in cells}
    train = explicit.get("train", {})
    if budget := [f"--{n.replace('_', '-')}" for n in ("max_steps", "time_limit") if train.get(n) is not None]:
        raise InputError(
            f"{' and '.join(budget)}: a run they stop has no final test (it may be trained further), so the study "
            "could measure none; give the study's budget in --epochs (and --patience)"
        )
    for split in ("train", "valid", "test"):
        split_file(Path(data_dir), split)
    for flag, path in (("--treebank", yardsticks.treebank), ("--syneval-data", yardsticks.syneval_data),
                       ("--suites", yardsticks.suites)):  # fmt: skip
        if path is not None and not Path(path).exists():
            raise InputError(f"{flag} {path} does not exist; give the folder or file to measure every run on")
    return trains


def check_corpus(explicit: dict, trains: dict, data_dir: Path, out: Path) -> None:
    """The corpus read once as every run will read it, when a run is to train: a word of the validation or test
    file outside the training vocabulary is one line here, not the same failure in every run's process."""
    from ..data.ptb import load_corpus

    if any(_to_train(run_dir(out, c, s), run_settings(explicit, c, s)["train"]) for c, s in trains):
        train = next(iter(trains.values()))
        load_corpus(data_dir, oov=train.oov, max_vocab=train.max_vocab)


#: What a study's folder holds besides its runs (``<cell>-seed<seed>``) and their logs: refused when anything else
#: is there, since the folder would not be the study's to write into (docs/cli.md, "Outputs").
STUDY_FILES = ("compare.json", "tables.md", "curves.png")


def check_study_folder(out: Path) -> None:
    """``--out``: new, empty, or a study's (its runs, their logs, ``evals/`` and, with a ``compare.json`` of this
    command, its tables and curves); a folder holding anything else is the user's, refused before any work."""
    check_folder(out, "lm compare", "lm-compare", STUDY_FILES, folders=("evals",))


def check_runs(out: Path, explicit: dict, trains: dict, data_dir: Path, log=print, training: bool = True) -> None:
    """Every run already in the study trained with its settings and text (else refused, naming the run and what
    differs): a study neither counts a run trained otherwise nor trains over one. The budget and how a run runs
    (``RUNTIME_FIELDS``) may differ: a larger budget trains a run further, a smaller one is refused when
    ``training`` (reading a study, such a run is listed as past its budget); a run that records no fingerprint of its
    text (an older one) is said, not refused."""
    text, train = None, split_file(data_dir, "train")
    for cell, seed in trains:
        run = RunDir(run_dir(out, cell, seed))
        if not run.config_path.exists():  # not started, or stopped before its header: trained from step 0
            continue
        try:
            header = run.read_config("lm", "a language-model run", "choose another --out")
            _, clash = resume_settings(
                header, run_sections, run_settings(explicit, cell, seed), RUNTIME_FIELDS, run.path
            )
        except CheckpointError as exc:
            raise InputError(f"{first_line(exc)}") from None
        if clash:
            raise InputError(clash)
        past = past_budget(_result(run.path) or {}, trains[cell, seed])
        if past and training:
            raise InputError(
                f"{run.path} holds a run trained {past}; give the study's own --epochs, or choose another --out"
            )
        text = text or sha256_file(train)
        fix = "give the study's --data-dir, or choose another --out"
        same_fingerprint(text, header.get("data") or {}, TEXT_FINGERPRINT, source=train, run=run.path,
                         what="training text", fix=fix, warn=log, flag="--data-dir")  # fmt: skip


def _compare(explicit, trains, data_dir, out, cells, seeds, yardsticks, jobs, finished_only, log) -> StudyResult:
    res = StudyResult(Path(out))
    grid = [(cell, seed) for seed in seeds for cell in cells]
    if not finished_only:
        todo = [_job(res.out_dir, cell, seed, explicit, data_dir, jobs) for cell, seed in grid]
        ended = train_in_processes([j for j in todo if j is not None], jobs, log)
        res.interrupted = any(e.code == EXIT_INTERRUPTED for e in ended)
        res.failed = [e for e in ended if e.code != EXIT_INTERRUPTED]
    test_sha256 = sha256_file(split_file(Path(data_dir), "test"))
    for cell, seed in grid:
        where = run_dir(res.out_dir, cell, seed)
        status = _status(where, trains[cell, seed], test_sha256)
        if status != "finished":
            res.unfinished.append({"cell": cell, "seed": seed, "run_dir": str(where), "status": status})
            log(f"== {cell}, seed {seed}: not measured, {status}")
            continue
        figures = measure(where, res.out_dir / "evals" / where.name, yardsticks, log)
        res.runs.append({"cell": cell, "seed": seed, "run_dir": str(where), "figures": figures})
    res.tables = tables(res, cells)
    write_json(res.out_dir / "compare.json", _record(res, explicit, cells, seeds))
    write_text(res.out_dir / "tables.md", res.tables + "\n")
    _draw_curves(res, cells, seeds, log)
    return res


def _draw_curves(res: StudyResult, cells: list[str], seeds: list[int], log: Callable[[str], None]) -> None:
    """``curves.png``: every run's validation curve so far, finished or not (a run still training is drawn up to
    its last epoch and said so in the legend); which runs finished is the study's own count (``res.runs``)."""
    try:
        from .plots import plot_validation_curves, read_curve
    except ImportError as exc:  # matplotlib is an extra: the tables stand without the figure
        log(f"curves.png not drawn: {exc}; pip install 'onlstm[experiments]' to draw it")
        return
    finished = {(r["cell"], r["seed"]) for r in res.runs}
    runs = {c: [(read_curve(RunDir(run_dir(res.out_dir, c, s)).log_path), (c, s) in finished) for s in seeds]
            for c in cells}  # fmt: skip
    if any(curve for rows in runs.values() for curve, _ in rows):
        plot_validation_curves(runs, res.out_dir / "curves.png")


def _job(out: Path, cell: str, seed: int, explicit: dict, data_dir: Path, jobs: int) -> Job | None:
    """The job that trains one run (None when it has ended under the study's budget); a run folder already there is
    resumed with the study's settings (:func:`check_runs`: the same but for the budget and runtime fields)."""
    where = run_dir(out, cell, seed)
    settings = run_settings(explicit, cell, seed)
    if not _to_train(where, settings["train"]):
        return None
    settings["train"]["threads"] = threads_per_job(settings["train"].get("threads"), jobs)
    payload = {"run_dir": str(where), "data_dir": str(data_dir), "resume": where.exists(), "explicit": settings}
    return Job(f"{cell}, seed {seed}", where, where.exists(), "onlstm.lm.compare:train_job", payload, "onlstm lm train")


def _to_train(where: Path, train: dict) -> bool:
    """Whether the run in ``where`` trains under the study's ``train`` settings: not started or not ended yet, or
    ended by a budget (epochs, max_steps, time_limit) that the study raises; a run ended by patience is final."""
    result = _result(where)
    if not isinstance(result, dict) or result.get("status") not in ("finished", "stopped"):
        return True
    why = result.get("stopped_by")
    if why not in BUDGETS:
        return False
    saved = (RunDir(where).header().get("train") or {}).get(why)
    new = train.get(why, saved)
    return new is None or (saved is not None and new > saved)


def _result(where: Path) -> dict | None:
    try:
        return RunDir(where).results()
    except OnlstmError:  # damaged: its resumed training names the problem (a failed run in the tables)
        return None


def train_job(spec: dict) -> int:
    """A run's process: train (or resume) it; 0 when it ended, 130 when interrupted (resume file saved)."""
    from .train import train

    result = train(Path(spec["run_dir"]), Path(spec["data_dir"]), spec["explicit"], resume=spec["resume"])
    return EXIT_INTERRUPTED if result.interrupted else 0


def past_budget(result: dict, train) -> str | None:
    """How an ended run (``result``: its record) went past the study's budget (``train``: its settings), in words:
    a run of 30 epochs is not one of a study of 20 (None: within it)."""
    if result.get("status") not in ("finished", "stopped"):
        return None
    used = {"epochs": result.get("epochs"), "max_steps": result.get("steps")}
    for name, value in used.items():
        limit = getattr(train, name)
        if limit is not None and isinstance(value, (int, float)) and value > limit + 1e-6:
            return f"past this study's budget ({value:g} {name.replace('_', ' ')}, over its {limit:g})"
    return None


def _status(where: Path, train, test_sha256: str | None = None) -> str:
    """``finished`` (its budget or its patience ended it within the study's, final test done on the study's test
    file: ``test_sha256``, where the run recorded what it read), or how far it got in words."""
    if not where.is_dir():
        return "not started"
    try:
        result = RunDir(where).results()
    except OnlstmError as exc:
        return f"its result cannot be read ({first_line(exc)})"
    status = (result or {}).get("status")
    if status == "finished":
        read = ((result or {}).get("test") or {}).get("sha256")
        if test_sha256 is not None and read is not None and read != test_sha256:
            return "its final test read another test file than --data-dir's (score it with `onlstm lm eval`)"
        return past_budget(result or {}, train) or "finished"
    if status not in (None, "interrupted"):  # stopped by a budget, or diverged: its record says how far
        return f"{status} after {result.get('epochs', 0):.2f} epochs (by {result.get('stopped_by')})"
    if holder := live_holder(where):  # its lock held by a live process: training now, whatever its record says
        when = f"training now, {holder}"
    else:  # where locks cannot tell, an interrupted run may be training again: its record is the last session's
        when = "interrupted, or training again" if status else "training now, or killed"
    return f"unfinished ({when}): {_progress(RunDir(where))}"


def _progress(run: RunDir) -> str:
    """How far a run got, from its ``log.csv``: ``E of N epochs done, best validation perplexity P``."""
    from .plots import read_curve

    curve = read_curve(run.log_path)
    finite = [ppl for _, ppl in curve if math.isfinite(ppl)]
    if not finite:
        return "no validation yet"
    epochs = (run.header().get("train") or {}).get("epochs", "?")
    return f"{curve[-1][0]} of {epochs} epochs done, best validation perplexity {min(finite):.2f}"


def measure(where: Path, evals: Path, yardsticks: Yardsticks, log: Callable[[str], None]) -> dict:
    """A finished run's figures: its final test's perplexity, and each yardstick's command output (kept)."""
    run = RunDir(where)
    result = run.results() or {}
    figures: dict = {"test_ppl": (result.get("test") or {}).get("ppl"), "epochs": result.get("epochs")}
    figures["stopped_by"] = result.get("stopped_by")
    figures["valid_ppl"] = (result.get("valid") or {}).get("ppl")
    figures["averaging_from"] = averaging_from(run.log_path)
    threads = ["--threads", str(yardsticks.threads)]
    cell = (run.header().get("model") or {}).get("cell")
    trees = cell in encoders.names() and encoders.has_distances(cell)  # trees need master gates
    # the weights every command reads (--weights best, else the last: a run whose best file was deleted)
    weights = next((sha256_file(p) for p in (run.weights("best"), run.weights("last")) if p.is_file()), "none")
    if yardsticks.treebank is not None and trees:
        for name, extra in (("wsj10", ["--wsj10"]), ("wsj", [])):
            args = ["parsing", "eval-parse", "--checkpoint", str(where), "--treebank", str(yardsticks.treebank)]
            key = _inputs(name, extra, weights, yardsticks.treebank)
            figures[name] = _parsing(_command(evals / f"{name}.json", [*args, *extra, "--json", *threads], key, log))
    syneval = ["syneval", "--checkpoint", str(where), "--json", "--no-progress", *threads]
    if yardsticks.syneval_data is not None:
        args, key = (
            [*syneval, "--data", str(yardsticks.syneval_data)],
            _inputs("ml", [], weights, yardsticks.syneval_data),
        )
        figures["marvin_linzen"] = _cases(_command(evals / "marvin_linzen.json", args, key, log))
    if yardsticks.suites is not None:
        args, key = [*syneval, "--suite", str(yardsticks.suites)], _inputs("sg", [], weights, yardsticks.suites)
        report = _command(evals / "syntaxgym.json", args, key, log, keep=_without_regions)
        figures["syntaxgym"] = _suites(report)
        figures["sg_score"] = report["models"][0].get("sg_score")  # Hu et al.'s aggregation, as syneval gives it
    return figures


def averaging_from(log_csv: Path) -> int | None:
    """The first epoch whose validation read averaged weights (NT-ASGD's switch), from ``log.csv``; None before."""
    if not log_csv.is_file():
        return None
    with open(log_csv, newline="", encoding="utf-8", errors="replace") as f:
        return next((int(r["epoch"]) for r in csv.DictReader(f) if r.get("averaging") == "1"), None)


def _inputs(name: str, flags: list[str], weights: str, data: Path) -> dict:
    """What a measurement depends on: the measure, its flags, the run's weights and the bytes of the data it reads
    (every file of a folder, by name), so that a kept measurement is reused only for the same inputs."""
    root = Path(data)
    files = [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else [root]
    return {"measure": name, "flags": flags, "weights": weights, "data": sha256_files(files, root)}


def _command(path: Path, args: list[str], inputs: dict, log: Callable[[str], None], keep=lambda r: r) -> dict:
    """The JSON a command printed (``keep`` of it: what the tables need), kept in ``path`` with its ``inputs``
    (:func:`_inputs`): read back instead of running the command again while the inputs are the same, run again
    when they changed (another suite folder, other weights) or the kept file is not such a record (an earlier
    version's)."""
    kept = json_dict(path) or {}
    if same_inputs(kept.get("inputs"), inputs) and isinstance(kept.get("report"), dict):
        return kept["report"]
    log(f"   onlstm {' '.join(args)}")
    done = subprocess.run([sys.executable, "-m", "onlstm", *args], capture_output=True, text=True)
    if done.returncode != 0:
        why = first_line(RuntimeError(done.stderr.strip() or done.stdout.strip() or "no output"))
        raise InputError(f"onlstm {' '.join(args[:2])} failed (exit {done.returncode}): {why}")
    report = keep(json.loads(done.stdout))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"inputs": inputs, "report": report})
    return report


def _without_regions(report: dict) -> dict:
    """A SyntaxGym report without its region rows and item outcomes (about 10 MB for the 34 suites; `syneval
    --suite --out` writes them): a study's kept record stays small enough to share and commit."""
    slim = lambda suite: {k: v for k, v in suite.items() if k not in ("regions", "outcomes")}
    return {**report, "models": [{**m, "suites": [slim(s) for s in m["suites"]]} for m in report["models"]]}


def _parsing(report: dict) -> dict:
    """Sentence F1 per layer and of the baselines (the paper's convention)."""
    layers = {k: v["sentence_f1"]["f1"] for k, v in report["layers"].items()}
    baselines = {k: v["sentence_f1"] for k, v in report["baselines"].items()}
    return {"sentences": report["sentences"], "layers": layers, "baselines": baselines}


def _cases(report: dict) -> dict:
    """Marvin & Linzen: accuracy per case on the covered pairs, and the coverage."""
    cases = report["models"][0]["cases"]
    out = {}
    for case, rows in cases.items():
        row = rows["comparisons"]["g>u"]
        out[case] = {"accuracy": row["covered_accuracy"], "coverage": row["covered"] / max(row["pairs"], 1)}
    return out


def _suites(report: dict) -> dict:
    """SyntaxGym: accuracy per suite (items the model reads), and the items it could not read."""
    return {
        s["suite"]: {"accuracy": s["accuracy"], "not_scorable": s.get("not_scorable_items", 0), "items": s["items"]}
        for s in report["models"][0]["suites"]
    }


def measures(figures: dict) -> dict[str, tuple[float | None, bool]]:
    """Every figure of a run the tables compare: name -> (value, higher is better)."""
    out: dict[str, tuple[float | None, bool]] = {"PTB test perplexity": (figures.get("test_ppl"), False)}
    for name, label in (("wsj10", "WSJ10"), ("wsj", "WSJ all lengths")):
        parsed = figures.get(name) or {}
        for layer, f1 in {**parsed.get("layers", {}), **parsed.get("baselines", {})}.items():
            out[f"{label} sentence F1, {layer}"] = (100 * f1, True)  # the baselines: the same trees every run
    cases = figures.get("marvin_linzen") or {}
    if cases:
        out["Marvin & Linzen, mean over cases"] = (_mean_percent(cases), True)
    sg = figures.get("sg_score") or {}
    if sg:  # Hu et al.'s SG score and circuits (their 31 suites; the ones not scored named in the notes)
        out["SyntaxGym SG score (Hu et al. 2020)"] = (_percent(sg.get("score")), True)
        for name, c in (sg.get("by_circuit") or {}).items():
            out[f"SyntaxGym circuit: {name}"] = (_percent(c.get("score")), True)
    suites = figures.get("syntaxgym") or {}
    if suites:  # over the suites the model can score: the others are named in the tables' notes (not_scored)
        out["SyntaxGym, mean over the suites scored"] = (_mean_percent(suites), True)
    for case, c in cases.items():
        out[f"M&L {case}"] = (_percent(c["accuracy"]), True)
    for suite, s in suites.items():
        out[f"SyntaxGym {suite}"] = (_percent(s["accuracy"]), True)
    return out


def _percent(accuracy: float | None) -> float | None:
    return None if accuracy is None else 100 * accuracy


def _mean_percent(parts: dict) -> float | None:
    """The mean accuracy (%) over the parts (cases, suites) that have one: a part with no scorable item (a SyntaxGym
    suite whose every item has a region the model reads nothing of, e.g. a lone comma for a PTB model) has none."""
    scored = [p["accuracy"] for p in parts.values() if p["accuracy"] is not None]
    return 100 * sum(scored) / len(scored) if scored else None


def not_scored(res: StudyResult) -> list[str]:
    """One note per run with SyntaxGym suites or Marvin & Linzen cases it could not score, named."""
    notes = []
    for r in res.runs:
        for label, key in (("SyntaxGym suites", "syntaxgym"), ("Marvin & Linzen cases", "marvin_linzen")):
            if missing := [name for name, p in (r["figures"].get(key) or {}).items() if p["accuracy"] is None]:
                notes.append(f"- {label} not scored by {r['cell']}, seed {r['seed']} (no item it can read): "
                             + ", ".join(missing))  # fmt: skip
    return notes


def summary(res: StudyResult, cells: list[str]) -> list[dict]:
    """Per measure: each cell's values over its measured seeds and the first cell minus each other
    (:func:`~onlstm.studies.stats.seed_difference`); what the tables show, for compare.json."""
    per_cell = {c: [measures(r["figures"]) for r in res.runs if r["cell"] == c] for c in cells}
    names = list(dict.fromkeys(n for rows in per_cell.values() for row in rows for n in row))
    first, *others = cells
    out = []
    for name in names:
        values = {c: [row[name][0] for row in rows if name in row and row[name][0] is not None]
                  for c, rows in per_cell.items()}  # fmt: skip
        higher = next(row[name][1] for rows in per_cell.values() for row in rows if name in row)
        means = {c: dict(zip(("mean", "std"), mean_std(v))) | {"n": len(v)} for c, v in values.items() if v}
        differences = {o: seed_difference(values[first], values[o], higher) for o in others}
        out.append({"measure": name, "higher_is_better": higher, "values": values, "cells": means,
                    "differences": differences})  # fmt: skip
    return out


def tables(res: StudyResult, cells: list[str]) -> str:
    """One row per measure: each cell's mean ± std (n), the first cell minus each other with its SE and verdict."""
    per_cell = {c: [measures(r["figures"]) for r in res.runs if r["cell"] == c] for c in cells}
    first, *others = cells
    columns = ["measure", *cells, *(f"{first} - {o} (SE): verdict" for o in others)]
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"] if res.runs else ["No run finished yet."]
    for row in summary(res, cells):
        values = row["values"]
        cols = [_mean_cell(values[c]) for c in cells]
        cols += [_difference_cell(row["differences"][o], bool(values[first] and values[o])) for o in others]
        lines.append(f"| {row['measure']} | " + " | ".join(cols) + " |")
    notes = [f"- not measured: {u['cell']}, seed {u['seed']}: {u['status']}" for u in res.unfinished]
    notes += not_scored(res) + coverage(res)
    notes += [f"- failed: {e.name}: {e.why}" for e in res.failed]
    rule = "ahead/behind: the difference of the means beyond twice its standard error over seeds, else level"
    return "\n".join([*lines, "", *parsing_claim(per_cell), f"Verdicts for {first}; {rule}.", *notes, "",
                      *per_run(res)])  # fmt: skip


#: The per-run table's columns: header, and the run's figure (a key of its figures) or measure (of measures()).
PER_RUN = (
    ("best validation perplexity", "valid_ppl"),
    ("test perplexity", "test_ppl"),
    ("WSJ10 F1, layer 2", "WSJ10 sentence F1, layer 2"),
    ("WSJ F1, layer 2", "WSJ all lengths sentence F1, layer 2"),
    ("M&L mean", "Marvin & Linzen, mean over cases"),
    ("SG score", "SyntaxGym SG score (Hu et al. 2020)"),
)


def per_run(res: StudyResult) -> list[str]:
    """One row per measured run: how it ended (epochs, by what, NT-ASGD's switch) and its headline figures."""
    if not res.runs:
        return []
    head = ["run", "epochs (stopped by)", "averaging from epoch", *(h for h, _ in PER_RUN)]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in sorted(res.runs, key=lambda r: (r["cell"], r["seed"])):
        f = r["figures"]
        values = {**f, **{name: value for name, (value, _) in measures(f).items()}}
        ended = f"{f.get('epochs') or 0:g} ({f.get('stopped_by') or '?'})"
        cols = [f"{r['cell']}, seed {r['seed']}", ended, str(f.get("averaging_from") or "-")]
        cols += ["-" if values.get(key) is None else f"{values[key]:.2f}" for _, key in PER_RUN]
        lines.append("| " + " | ".join(cols) + " |")
    return lines


def parsing_claim(per_cell: dict[str, list[dict]]) -> list[str]:
    """The paper's parsing claim for each cell with trees: each layer's sentence F1 minus right-branching's on the
    same sentences (the same trees in every run), over the cell's seeds, with the verdict rule; [] without trees."""
    lines = []
    for cell, rows in per_cell.items():
        for label in ("WSJ10", "WSJ all lengths"):
            base = f"{label} sentence F1, right-branching"
            layers = sorted({n for row in rows for n in row if n.startswith(f"{label} sentence F1, layer ")})
            for name in layers:
                ours, theirs = ([row[n][0] for row in rows if n in row and row[n][0] is not None] for n in (name, base))
                cell_text = _difference_cell(seed_difference(ours, theirs), bool(ours and theirs))
                lines.append(f"| {cell}, {label}, {name.rsplit(', ', 1)[1]} | {cell_text} |")
    head = [
        "| the paper's parsing claim: sentence F1 minus right-branching's | difference (SE): verdict |",
        "|---|---|",
    ]
    return [*head, *lines, ""] if lines else []


def coverage(res: StudyResult) -> list[str]:
    """The share of each Marvin & Linzen case's pairs the models' vocabulary covers (the accuracies are on those),
    over the runs measured: one figure when every run covers the same, else the range."""
    by_case: dict[str, list[float]] = {}
    for r in res.runs:
        for case, c in (r["figures"].get("marvin_linzen") or {}).items():
            if c.get("coverage") is not None:
                by_case.setdefault(case, []).append(100 * c["coverage"])
    shown = [
        f"{case} {min(v):.0f}%" + (f"-{max(v):.0f}%" if max(v) - min(v) >= 0.5 else "") for case, v in by_case.items()
    ]
    notes = [f"- Marvin & Linzen pairs covered by the vocabulary: {', '.join(shown)}"] if shown else []
    sgs = [r["figures"]["sg_score"] for r in res.runs if r["figures"].get("sg_score")]
    if sgs:  # what the SG score averages: Hu et al.'s suites, those a run could not score named in not_scored
        counts = sorted({f"{sg['suites']} of {sg['of']}" for sg in sgs})
        left = sorted({name for sg in sgs for name in sg.get("left_out", [])})
        notes.append(f"- SyntaxGym SG score: the mean over Hu et al.'s suites scored ({' or '.join(counts)}), "
                     f"as their analysis takes it" + (f"; left out by their rule: {', '.join(left)}" if left else ""))  # fmt: skip
    return notes


def _mean_cell(values: list[float]) -> str:
    if not values:
        return "-"
    mean, std = mean_std(values)
    return f"{mean:.2f} ± {std:.2f} ({len(values)})" if std == std else f"{mean:.2f} (1)"


def _difference_cell(d: dict, both: bool = True) -> str:
    if not both:  # a side with no figure at all: nothing to compare (an LSTM's trees, a suite no model scores)
        return "-"
    if d["difference"] is None:
        return "not decided (< 2 seeds a side)"
    return f"{d['difference']:+.2f} ({d['se']:.2f}): {d['verdict']}"


def _record(res: StudyResult, explicit: dict, cells: list[str], seeds: list[int]) -> dict:
    record = {"kind": "lm-compare", "settings": explicit, "cells": cells, "seeds": seeds, "runs": res.runs}
    record.update(unfinished=res.unfinished, failed=[vars(e) for e in res.failed], interrupted=res.interrupted)
    record.update(summary=summary(res, cells))  # the tables' figures: each cell's values, the differences
    return record
