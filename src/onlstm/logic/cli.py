"""``onlstm logic {generate,check,train,eval,trees,curves,compare}``: the logical-inference experiment (where
``train`` and ``compare`` take their settings from: docs/logic.md)."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError, Settings, flags_given, option
from ..device import resolve_device, runtime_device
from ..errors import EXIT_FINDING, EXIT_INTERRUPTED, InputError, UserNote, command_error
from ..files import (
    add_files,
    check_new_files,
    check_output_folder,
    check_output_owner,
    json_text,
    publish_folder,
    read_input,
    split_lines,
)
from ..flags import add_command, add_flags, add_group, add_runtime_flags, command_flags, command_line, runtime_settings
from ..nn import Distances
from ..runs import RunDir
from ..runs.resume import resume_settings
from ..saved import check_weights_choice
from .config import (
    CONFIG_KEYS,
    RUNTIME_FIELDS,
    SECTIONS,
    CompareSettings,
    EvalSettings,
    LogicModelConfig,
    LogicTrainConfig,
    read_sections,
    resolve,
)
from .data import (
    Example,
    has_split,
    read_examples,
    recorded_path,
    relabel_mismatches,
    same_path,
    trained_on,
    validation_examples,
    write_file,
)
from .evaluate import (
    HISTORY_KEYS,
    evaluate_examples,
    format_table,
    history_table,
    majority_baseline,
    read_test_examples,
)
from .formulas import Formula, FormulaSyntaxError, parse
from .generate import GenerateConfig, format_label_counts, generate_dataset
from .model import KIND, load_classifier
from .relations import RELATIONS
from .systematicity import SPLITS, held_out
from .train import read_history, train

DATA_KIND = "logic-data"  # the marker of a folder logic generate wrote (onlstm.files.publish_folder)
# the marker of a folder logic holdout wrote: its own, so that neither command replaces the other's folder
HOLDOUT_KIND = "logic-holdout"
TREES_KIND = "logic-trees"  # the marker of a folder logic trees wrote


#: The systematicity splits (onlstm.logic.systematicity): each name with its pattern as the Ordered Memory paper
#: writes it (``*`` any sub-formula, ``X`` any variable).
SYSTEMATICITY_SPLITS = {name: split.pattern for name, split in SPLITS.items()}


OUT_HELP = "output directory (new, empty, or an earlier generated set)"
REPLACE_HELP = "replace --out even when it holds other files"
PATH_HELP = "a directory of train{k}/test{k} files, or one file"
#: What `logic curves` writes into its --out.
CURVE_FILES = ("training_curves.png", "curves_by_ops.png")


@dataclass(kw_only=True)
class GenerateArgs:
    out: Path = option(help=OUT_HELP)
    quiet: bool = option(False, "print only the final summary")
    overwrite: bool = option(False, REPLACE_HELP)


@dataclass(kw_only=True)
class CheckArgs:
    path: Path = option(help=PATH_HELP, positional=True)
    show: int = option(5, "how many disagreements to print", ge=0)


@dataclass(kw_only=True)
class SettingsArgs:
    """``train`` and ``compare``: where the settings, the data and the runs are (the settings' own flags:
    :func:`_add_settings`)."""

    config: Path | None = option(
        None, "YAML file with data/out/model/train/compare settings, or a preset name (cpu-1h; `onlstm presets`)"
    )
    data: Path | None = option(None, "directory of train{k}/test{k} files (generated or the original data)")
    out: Path | None = option(None, "output directory")


@dataclass(kw_only=True)
class TrainArgs(SettingsArgs):
    resume: bool = option(
        False,
        "go on from --out/resume.safetensors (same settings but the budget: a larger --epochs, --max-steps or "
        "--time-limit trains a run stopped by its budget further; written at every validation check and on Ctrl-C)",
    )


@dataclass(kw_only=True)
class EvalArgs:
    checkpoint: Path = option(
        help="run directory of `onlstm logic train` (uses model.best) or a .safetensors file in one"
    )
    data: Path = option(help="directory of test{k} files (or one file)")
    json: bool = option(False, "print one JSON object instead of a table")


@dataclass(kw_only=True)
class PredictArgs:
    checkpoint: Path = option(help="run directory of `onlstm logic train`, a .safetensors file in one, or a model")
    file: Path = option(help="pairs of formulas, A<TAB>B on each line ('-': stdin)", positional=True)
    tag: str = option("best", "weights file model.<tag>.safetensors of a run directory")
    batch_size: int = option(512, "pairs per batch", ge=1)
    json: bool = option(False, "one JSON object per pair, with the probability of every relation")


@dataclass(kw_only=True)
class TreesArgs:
    checkpoint: Path = option(
        help="run directory of an ON-LSTM classifier (`onlstm logic train --cell onlstm`) or a .safetensors file in one"
    )
    data: Path = option(help="directory of test{k} files (or one file): both formulas of each pair are parsed")
    out: Path = option(help="a new or empty directory for the tree files (or an earlier `logic trees` output)")
    gate: str = option(
        "forget",
        "which master gate's distances split the formulas: forget (1 - mean master forget, as ON-LSTM parsing "
        "reads a language model) or input (mean master input)",
        choices=Distances._fields,
    )
    overwrite: bool = option(False, REPLACE_HELP)


@dataclass(kw_only=True)
class CurvesArgs:
    runs: list[Path] = option(help="run directories of `onlstm logic train`", positional=True)
    out: Path = option(help="directory for the two PNG files")
    overwrite: bool = option(False, "replace the two PNG files when --out holds them already")
    at_steps: str | None = option(
        None,
        "also print a table of validation accuracy by operator count at these steps (e.g. 2000,8000,32000): "
        "per run, the last check at or before each step",
        metavar="STEPS",
    )
    table: str = option(
        "valid",
        "with --at-steps: validation accuracy by operator count (valid), or the test accuracy by length "
        "recorded at each check by --score-test (test)",
        choices=("valid", "test"),
    )


@dataclass(kw_only=True)
class StatsArgs:
    path: Path = option(help=PATH_HELP, positional=True)
    against: Path | None = option(None, "a second data set: print both, its figures after a slash")
    split: str | None = option(None, "read only this split's files", choices=("train", "test"))


@dataclass(kw_only=True)
class HoldoutArgs:
    data: Path = option(help="a directory of train{k} files (e.g. Bowman et al.'s train0-6)")
    split: str | None = option(
        None,
        "a systematicity split (A, B, C: the Ordered Memory paper's; B-var, C-var: only negated variables, the "
        "reading used before #50): " + "; ".join(f"{k}: {v}" for k, v in SYSTEMATICITY_SPLITS.items()),
        choices=list(SYSTEMATICITY_SPLITS),
    )
    pattern: str | None = option(
        None, "hold out every pair where a side contains this regular expression (instead of --split)"
    )
    out: Path = option(
        help="a new or empty directory for train{k} (kept) and test{k} (held out), or an earlier `logic holdout` "
        "output (replaced); not --data nor a folder inside it"
    )
    overwrite: bool = option(False, REPLACE_HELP)


def register(subparsers) -> None:
    """Add ``onlstm logic`` with its own sub-commands to the top-level ``subparsers``."""
    sub = add_group(
        subparsers,
        "logic",
        "logical inference (Bowman et al. 2015): generate, check, train, eval, predict, trees, compare, ...",
        "Propositional-logic relation classification: the data and the experiment.",
    )
    add_flags(add_command(sub, "generate", _cmd_generate, GenerateArgs), GenerateConfig, "generate", "data")
    add_command(sub, "check", _cmd_check, CheckArgs)
    add_command(sub, "stats", _cmd_stats, StatsArgs)
    add_command(sub, "holdout", _cmd_holdout, HoldoutArgs)
    _add_settings(add_command(sub, "train", _cmd_train, TrainArgs), cell=True)
    evaluate = add_command(sub, "eval", _cmd_eval, EvalArgs)
    add_flags(evaluate, EvalSettings, "eval", "evaluation", skip=("progress",))  # scoring shows no bar
    add_runtime_flags(add_command(sub, "predict", _cmd_predict, PredictArgs), skip=("progress",))
    trees = add_command(sub, "trees", _cmd_trees, TreesArgs)
    add_flags(trees, EvalSettings, "eval", "which pairs", skip=("progress",))
    add_command(sub, "curves", _cmd_curves, CurvesArgs)
    compare = add_command(sub, "compare", _cmd_compare, SettingsArgs)
    _add_settings(compare, cell=False)
    add_flags(compare, CompareSettings, "compare", "comparison")


def _cmd_generate(args: argparse.Namespace) -> int:
    """write random labelled formula pairs as train0..train12 / test0..test12

    Random formula pairs over a-f with not/and/or, labelled with their relation from the truth sets, written as
    LABEL<TAB>A<TAB>B into train{k}/test{k} (k = larger operator count; file 12 holds 12 or more).
    """
    settings = Settings.resolve({"generate": GenerateConfig}, flags=args)  # bad settings: one-line errors
    if {"test_fraction", "test_count"} <= set(settings.given["generate"]):
        raise ConfigError("give --test-fraction or --test-count, not both")
    cfg = settings.build("generate")
    # a new or empty folder, or an earlier generated set (replaced whole), or --overwrite: never a mix with files
    # already there (Bowman's train0-12 have the same names)
    check_output_owner(args.out, DATA_KIND, overwrite=args.overwrite)
    reports, log = [], None if args.quiet else print
    publish_folder(args.out, DATA_KIND, lambda tmp: reports.append(generate_dataset(tmp, cfg, log=log)))
    report = reports[0]
    rate = report.n_pairs / report.seconds if report.seconds > 0 else float("inf")
    print(f"wrote {report.n_pairs} pairs to {args.out} in {report.seconds:.1f} s ({rate:,.0f} pairs/s)")
    for split in ("train", "test"):
        counts = report.label_counts(split)
        print(f"{split:>5} labels ({sum(counts.values())}): {format_label_counts(counts)}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    """read a data directory or file, recompute every label and the file-number rule

    Read train{k}/test{k} files (or one file), recompute each label from the truth sets and check that file k
    holds pairs whose larger operator count is k (12: 12 or more).
    """
    t0 = time.perf_counter()
    examples = read_examples(args.path)  # a LogicDataError (bad input) exits with status 2 (see onlstm.errors)
    by_file: dict[str, Counter] = {}
    for ex in examples:
        by_file.setdefault(Path(ex.source).name, Counter())[ex.label] += 1
    misfiled = [ex for ex in examples if ex.file_number is not None and ex.file_number != ex.bucket]
    for name, counts in by_file.items():
        print(f"{name:>16} {sum(counts.values()):>7}  {format_label_counts(counts)}")
    wrong = relabel_mismatches(examples)
    for ex, computed in wrong[: args.show]:
        print(f"label differs at {ex.where}: file says {ex.label!r}, truth sets give {computed!r}")
    for ex in misfiled[: args.show]:
        print(f"misfiled at {ex.where}: larger operator count {ex.max_ops} but file number {ex.file_number}")
    print(
        f"{len(examples) - len(wrong)}/{len(examples)} labels agree, {len(misfiled)} lines break the "
        f"file-number rule ({time.perf_counter() - t0:.1f} s)"
    )
    return 0 if not wrong and not misfiled else EXIT_FINDING  # a finding, not bad input


def _holdout_rule(split: str | None, pattern: str | None) -> Callable[[Example], bool]:
    """Whether an example is held out: by the systematicity split ``split``, or when a side's text contains the
    regular expression ``pattern``."""
    if split is not None:
        return lambda ex: held_out(split, ex.a, ex.b)
    try:
        regex = re.compile(pattern or "")
    except (re.error, OverflowError, RecursionError, MemoryError) as exc:  # a{99999999999}: OverflowError
        why = f"not a regular expression: {exc}" if isinstance(exc, re.error) else "too large or nested too deep"
        raise ConfigError(f"--pattern {str(pattern)[:80]!r} is {why} for Python's re; simplify it") from None
    return lambda ex: bool(regex.search(ex.text_a) or regex.search(ex.text_b))


def _cmd_holdout(args: argparse.Namespace) -> int:
    """hold out every pair with a given sub-formula: train{k} keeps the rest, test{k} the held-out pairs

    Reads the train{k} files of --data and writes into --out: train{k} with the pairs where no side matches,
    test{k} with those where one does (a systematicity split: train on the rest, score on the held-out pairs).
    --split A, B and C are the Ordered Memory paper's splits: a pair is held out when a side has an 'and' (C: an
    'and' or an 'or') whose right operand is the negation of a (A) or of any sub-formula (B, C); B-var and C-var
    hold out negated variables only (the reading used before #50).
    """
    if (args.split is None) == (args.pattern is None):
        raise ConfigError(f"give --split {'|'.join(SYSTEMATICITY_SPLITS)} or --pattern REGEX (one of the two)")
    held_out_by = _holdout_rule(args.split, args.pattern)
    _check_outside(args.out, args.data)
    examples = read_examples(args.data, split="train")
    check_output_owner(args.out, HOLDOUT_KIND, overwrite=args.overwrite, reads=(args.data,))
    files: dict[str, list] = {}
    for ex in examples:
        held = held_out_by(ex)
        files.setdefault(("test" if held else "train") + str(ex.length), []).append((ex.label, ex.a, ex.b))

    def write(tmp: Path) -> None:
        for name, rows in sorted(files.items()):
            write_file(tmp / name, rows)

    publish_folder(args.out, HOLDOUT_KIND, write)  # all files at once, or none
    n_held = sum(len(r) for n, r in files.items() if n.startswith("test"))
    print(f"held out {n_held} of {len(examples)} pairs ({100 * n_held / len(examples):.1f}%) into {args.out}/test*")
    return 0


def _check_outside(out: Path, data: Path) -> None:
    """``holdout``'s ``--out`` is neither ``--data`` nor inside it: the folder it writes replaces ``--out`` whole,
    the files it reads with it (``--overwrite`` included)."""
    real_out, real_data = Path(out).resolve(), Path(data).resolve()
    if real_out == real_data or real_data in real_out.parents:
        where = "is --data itself" if real_out == real_data else f"is inside --data {data}"
        raise InputError(
            f"--out {out} {where}: holdout would write its split over the training files it reads; choose an --out "
            "outside --data"
        )


def _cmd_stats(args: argparse.Namespace) -> int:
    """structural statistics per file: variables per pair, and/or depth, 'not' share, tokens, labels

    Per train{k}/test{k} file: pairs, distinct variables per pair, share of pairs over 4 variables, and/or nesting
    depth, share of 'not' among operators, tokens per pair, the smaller side's operator count and the label
    shares; with --against, a second data set's figures after a slash (e.g. generated / original).
    """
    from .stats import file_statistics, stats_table

    ours = file_statistics(read_examples(args.path, split=args.split))
    theirs = file_statistics(read_examples(args.against, split=args.split)) if args.against else ours
    if args.against and not set(ours) & set(theirs):
        raise ConfigError(f"{args.path} and {args.against} have no file name in common: nothing to compare")
    print(stats_table(ours, theirs if args.against else None))
    return 0


def _add_settings(p: argparse.ArgumentParser, cell: bool) -> None:
    """One flag per model and training field (generated from the dataclasses)."""
    add_flags(p, LogicModelConfig, "model", "model", skip=() if cell else ("cell",))
    add_flags(p, LogicTrainConfig, "train", "training")


def resolve_settings(args: argparse.Namespace, compare: bool = False):
    """``(model config, train config, data, out, compare settings or None)`` from defaults < YAML < flags
    (:func:`onlstm.logic.config.resolve`)."""
    settings, model_cfg, train_cfg, what = resolve(args.config, args, compare)
    resolve_device(train_cfg.device)  # cuda asked for on a machine without it: an InputError before any work
    data = args.data or settings.keys.get("data")
    out = args.out or settings.keys.get("out")
    if data is None:
        raise ConfigError(
            "no data directory: pass --data DIR (or data: in the --config file); "
            "create one with `onlstm logic generate --out DIR`"
        )
    if out is None:
        raise ConfigError("no output directory: pass --out DIR (or out: in the --config file)")
    return model_cfg, train_cfg, Path(data), Path(out), what


def resumed_settings(args: argparse.Namespace):
    """``logic train --resume``'s ``(model config, train config, data, out)``: the run's own settings with what was
    given (a --config file, flags) over them, as ``lm train`` resumes; a change of what is learned is refused (only
    the runtime settings, the budget among them, may change). ``--data`` defaults to the run's recorded data."""
    settings = Settings.resolve(SECTIONS, args.config, args, experiment="logic", keys=CONFIG_KEYS)
    out = args.out or settings.keys.get("out")
    if out is None:
        raise ConfigError("--resume needs the run: pass --out RUN (or out: in the --config file)")
    run = RunDir(Path(out))
    if not run.config_path.exists():  # not a run: the training's own check says so
        return (*resolve_settings(args)[:2], Path(args.data or settings.keys.get("data") or "."), Path(out))
    header = run.header()
    sections, clash = resume_settings(header, read_sections, settings.given, RUNTIME_FIELDS, Path(out))
    if clash:
        raise ConfigError(clash)
    data = args.data or settings.keys.get("data") or recorded_path(header)
    if data is None:
        raise ConfigError(f"{out} records no data folder: pass --data DIR, the run's own training files")
    train_cfg = LogicTrainConfig.from_dict(sections["train"])
    resolve_device(train_cfg.device)
    return LogicModelConfig.from_dict(sections["model"]), train_cfg, Path(data), Path(out)


def train_command(config: dict) -> str | None:
    """The ``onlstm logic train`` command that reproduces a run's settings (its ``config.json``), else None."""
    if not isinstance(config.get("train"), dict):
        return None
    data = (config.get("data") or {}).get("path") or "DATA"
    sections = {"model": LogicModelConfig, "train": LogicTrainConfig}  # no compare: `logic train` has no such flags
    return command_line(["onlstm", "logic", "train", "--data", str(data), "--out", "RUN"], config, sections)


def _numbers(text: str | list, what: str, example: str, ranges: bool = True) -> list[int]:
    """Comma-separated whole numbers (``32_000`` too), with ``ranges`` also spans ``a-b`` (both ends included),
    or a list of them, in the order given; empty, negative or unreadable: a :class:`ConfigError`."""
    items = text if isinstance(text, list) else [t for t in str(text).split(",") if t.strip()]
    out: list[int] = []
    try:
        for item in (str(t).strip().replace("_", "") for t in items):
            lo, dash, hi = item.partition("-") if ranges and "-" in item[1:] else (item, "", "")
            out += range(int(lo), int(hi) + 1) if dash else [int(item)]
    except ValueError:
        out = []
    if not out or min(out) < (0 if ranges else 1):
        raise ConfigError(f"{what} {text!r}: give {example}")
    return out


def parse_buckets(text: str | list) -> list[int]:
    """``'1-12'``, ``'7,8,9'``, ``'0-3,12'`` or a list of ints -> sorted list of lengths."""
    return sorted(set(_numbers(text, "bad lengths", "non-negative operator counts, e.g. 1-12 or 7,8,9")))


def _cmd_train(args: argparse.Namespace) -> int:
    """train a relation classifier (ON-LSTM, LSTM or GRU encoder) on <= 6 operators

    Train the paper's classifier (shared one-layer encoder, features [h1, h2, h1*h2, |h1-h2|], MLP over the 7
    relations) on the train{k} files with k <= --max-train-ops, 10% held out for validation and early stopping.
    Writes config.json, vocab.json, history.json, model.best.safetensors and model.last.safetensors into
    --out. Ctrl-C stops after the current step, keeps the best checkpoint and writes resume.safetensors (exit
    status 130); `onlstm logic train --out RUN --resume` goes on exactly where it stopped, with the run's own
    settings and data (flags given with it go over them: a larger budget trains a run stopped by its budget further).
    """
    model_cfg, train_cfg, data, out = resumed_settings(args) if args.resume else resolve_settings(args)[:4]
    result = train(model_cfg, train_cfg, data, out, resume=args.resume)
    if result.interrupted:
        return EXIT_INTERRUPTED
    # without test files (the original data) the validation hold-out is what there is to score
    split = " --split valid" if Path(data).is_dir() and not has_split(data, "test") else ""
    print(
        f"evaluate with: onlstm logic eval --checkpoint {shlex.quote(str(out))} --data {shlex.quote(str(data))}{split}"
    )
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    """accuracy of a trained classifier for each number of operators

    Accuracy on the test{k} files of --data for each length k (the larger operator count of a pair; file 12
    holds 12 or more), then pooled over <= 6, 7-12 and all. Percent. Also prints the majority-label accuracy of
    the same pairs for reference.
    """
    opts, lengths, model, header, examples = _model_and_pairs(args)
    result, baseline = evaluate_examples(model, examples, opts.batch_size), majority_baseline(examples)
    cell = header["model"]["cell"]
    if args.json:
        facts = {"checkpoint": str(args.checkpoint), "cell": cell, "data": str(args.data), "split": opts.split}
        print(json_text({**facts, **result.to_dict(), "majority_baseline": baseline.to_dict()}))
    else:
        print(format_table([(cell, [result]), ("majority label", [baseline])], lengths, counts=baseline))
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    """the relation a trained classifier predicts for pairs of formulas

    Reads A<TAB>B on each line (formulas in the notation of the data files, docs/logic.md; blank lines are
    skipped) and prints RELATION<TAB>A<TAB>B, the data files' own format, in the order read; --json prints one
    object per pair with the probability of every relation (= < > ^ | v #). A labelled file is scored by
    `onlstm logic eval` instead.
    """
    check_weights_choice(args.checkpoint, args.tag, "--tag")
    read = [_pair(line, args.file, k) for k, line in _lines(args.file) if line.strip()]
    if not read:
        raise InputError(f"{args.file} holds no pair of formulas (A<TAB>B on each line)")
    model, _ = load_classifier(args.checkpoint, args.tag, runtime_device(runtime_settings(args)))
    probabilities = model.relation_probabilities([formulas for _, formulas in read], args.batch_size)
    for ((a, b), _), p, k in zip(read, probabilities.tolist(), probabilities.argmax(-1).tolist()):
        relation = RELATIONS[k]
        if args.json:
            print(json_text({"a": a, "b": b, "relation": relation, "probabilities": dict(zip(RELATIONS, p))}, None))
        else:
            print(f"{relation}\t{a}\t{b}")
    return 0


def _lines(path: Path) -> list[tuple[int, str]]:
    """``(line number, text)`` of ``path`` ('-': stdin), one line a pair."""
    return list(enumerate(split_lines(read_input(path)), start=1))


def _pair(line: str, path: Path, lineno: int) -> tuple[tuple[str, str], tuple[Formula, Formula]]:
    """One line's two formulas, as written and as read by the notation's parser (a problem names the line)."""
    fields = line.rstrip("\r").split("\t")
    if len(fields) != 2:
        more = "; a labelled line (LABEL<TAB>A<TAB>B) is scored by `onlstm logic eval`" if len(fields) == 3 else ""
        raise InputError(f"{path}, line {lineno}: expected A<TAB>B, found {len(fields)} TAB-separated fields{more}")
    formulas = []
    for which, text in zip(("first", "second"), fields):
        try:
            formulas.append(parse(text))
        except FormulaSyntaxError as exc:
            raise InputError(f"{path}, line {lineno}: the {which} formula is not in the notation: {exc}") from None
    return (fields[0], fields[1]), (formulas[0], formulas[1])


def _model_and_pairs(args: argparse.Namespace):
    """``eval``'s and ``trees``' settings, the lengths, the classifier and its header, and the pairs they read."""
    try:
        settings = Settings.resolve({"eval": EvalSettings}, flags=args)
        opts = settings.build("eval")
        lengths = parse_buckets(opts.lengths)
        check_weights_choice(args.checkpoint, settings.given["eval"].get("tag"), "--tag")
        model, header = load_classifier(args.checkpoint, opts.tag, runtime_device(opts))
        if opts.split == "valid":
            if not isinstance(header.get("train"), dict):
                raise InputError(
                    f"--split valid rebuilds the run's validation hold-out from its training settings, which "
                    f"{args.checkpoint} does not hold (a model saved without them); score test files instead"
                )
            cfg = LogicTrainConfig.from_dict(header["train"])
            _check_run_data(args.checkpoint, header, args.data, cfg)
            examples = validation_examples(args.data, cfg, lengths)
        else:
            examples = read_test_examples(args.data, opts.split, lengths)
    except ValueError as exc:  # bad input reported by library code as a plain ValueError
        raise command_error(exc) from None
    return opts, lengths, model, header, examples


def _check_run_data(run: Path, header: dict, data: Path, cfg: LogicTrainConfig) -> None:
    """``--split valid`` rebuilds the run's validation hold-out from the training files of ``data``: they must be the
    run's own (its recorded fingerprint), else other pairs would be scored as its hold-out. A run written before
    fingerprints were recorded can only be checked by its path: a note when that differs."""
    same, recorded = trained_on(header, data, cfg), recorded_path(header)
    if same is False:
        raise InputError(
            f"--data {data} does not hold the training files {run} was trained on ({recorded or 'its own --data'}): "
            f"--split valid rebuilds the run's validation hold-out from them; give --data {recorded or 'as in training'}"
            ", or score test files instead"
        )
    if same is None and recorded is not None and not same_path(recorded, data):
        warnings.warn(
            f"{run} records no fingerprint of its training files (an older run) and was trained on {recorded}; "
            f"cannot check that --data {data} holds the same files",
            UserNote,
            stacklevel=1,
        )


def _cmd_trees(args: argparse.Namespace) -> int:
    """the trees an ON-LSTM classifier induces for the formulas of the pairs, beside those of their brackets

    Both formulas of every pair of --data (--split and --lengths as for eval), each once, of 3 or more tokens
    besides brackets. The encoder reads each formula with its brackets; its distances (--gate forget: 1 - mean
    master forget; input: mean master input) give a tree over every token (the greedy top-down builder), whose
    brackets are then dropped. Written into --out, one tree per line in bracket notation, the same formula on the
    same line: gold.txt (the trees the brackets give), induced.txt, formulas.txt, operators.txt, and gold.K.txt /
    induced.K.txt for the formulas of K operators. Score them with `onlstm parsing compare-trees OUT/gold.txt
    OUT/induced.txt`.
    """
    from .trees import check_distances, distinct_formulas, formula_trees  # here: its trees need nltk, an extra

    reads = (args.checkpoint, args.data)
    check_output_owner(args.out, TREES_KIND, overwrite=args.overwrite, reads=reads)  # before any work
    opts, _, model, _, examples = _model_and_pairs(args)
    check_distances(model, args.checkpoint)
    formulas = distinct_formulas(examples)
    if not formulas:
        raise InputError(f"the pairs read from {args.data} have no formula of 3 or more tokens besides brackets")
    found = formula_trees(model, formulas, opts.batch_size, args.gate)
    publish_folder(args.out, TREES_KIND, found.write)  # all files at once, or none
    counts = Counter(found.operators)
    shown = ", ".join(f"{k}: {counts[k]}" for k in sorted(counts))
    print(f"wrote the trees of {len(formulas)} formulas to {args.out} (by operators, {shown})")
    print(f"score them with: onlstm parsing compare-trees {args.out / 'gold.txt'} {args.out / 'induced.txt'}")
    return 0


def _cmd_curves(args: argparse.Namespace) -> int:
    """plot validation accuracy against training step, overall and by number of operators

    Read the history.json of each run directory and write OUT/training_curves.png (validation and training
    accuracy against step) and OUT/curves_by_ops.png (validation accuracy against step, one panel per operator
    count; runs of the same cell share a colour).
    """
    from .plots import plot_curves_by_ops, plot_training_curves

    check_output_folder(args.out)  # a file there is bad input, found before any run is read
    check_new_files([args.out / name for name in CURVE_FILES], "--out", args.overwrite)
    runs, seeds, max_ops = [], [], []
    try:
        example = "positive step numbers separated by commas, e.g. 2000,8000"
        steps = _numbers(args.at_steps, "--at-steps", example, ranges=False) if args.at_steps else []
        for run in args.runs:
            header = RunDir(run).read_config(KIND, "a run of `onlstm logic train`")
            runs.append((header["model"]["cell"], read_history(run, f"leave {run} out, or train it again")))
            seeds.append(header["train"]["seed"])
            max_ops.append(header["train"].get("max_train_ops"))
        # the two figures appear together or not at all
        paths = add_files(
            args.out,
            lambda tmp: (
                plot_training_curves(runs, tmp / CURVE_FILES[0]),
                plot_curves_by_ops(runs, tmp / CURVE_FILES[1], max_ops[0]),
            ),
        )
    except ValueError as exc:
        raise command_error(exc) from None
    if steps:
        names = [f"{cell} seed {seed}" for (cell, _), seed in zip(runs, seeds)]
        if len(set(names)) < len(names):  # runs of one cell and seed with other settings: name them by folder
            names = [run.name for run in args.runs]
        named = [(name, h) for name, (_, h) in zip(names, runs)]
        if _without_figures(named, args.table) < len(named):  # a table of headers alone says nothing
            print(history_table(named, steps, args.table))
    print("wrote " + " and ".join(map(str, paths)))
    return 0


def _without_figures(runs: list[tuple[str, list[dict]]], table: str) -> int:
    """How many of ``runs`` recorded none of the figures of the ``--table`` asked for, said on stderr, naming them
    and why: a run has no row of its own in the table (no test scores: trained without --score-test)."""
    key = HISTORY_KEYS[table]
    missing = [name for name, history in runs if not any(r.get(key) for r in history)]
    if missing:
        why = (
            "recorded no test scores (--score-test records the test accuracy by length at every check)"
            if table == "test"
            else "recorded no validation accuracy by operator count (a run of an earlier version)"
        )
        print(f"onlstm logic curves: --table {table}: {', '.join(missing)} {why}", file=sys.stderr)
    return len(missing)


def _cmd_compare(args: argparse.Namespace) -> int:
    """train ON-LSTM and LSTM with the same data, budget and seeds; table and plot by length

    For each seed and each cell: train into OUT/<cell>-seed<seed> (a finished run with the same settings and
    training files is reused), evaluate its best checkpoint on the test files (or, with --split valid, on its own
    validation hold-out), then print one row per cell (mean ± sample std over seeds) and write OUT/compare.json,
    OUT/table.md, OUT/accuracy_by_length.png, OUT/training_curves.png and OUT/curves_by_ops.png. OUT is new, empty or a comparison's.
    """
    from .compare import compare

    model_cfg, train_cfg, data, out, what = resolve_settings(args, compare=True)
    lengths = parse_buckets(what.lengths)
    res = compare(
        model_cfg, train_cfg, data, out, what.cells, what.seeds, lengths, split=what.split,
        finished_only=what.finished_only, test_data=what.test_data, jobs=what.jobs,
        go_on=compare_command(args, data, out),
    )  # fmt: skip
    if res.table:
        print(res.table)
        plots = [res.plot, res.curves] + ([res.curves_by_ops] if res.curves_by_ops else [])
        print(f"wrote {out / 'compare.json'}, {out / 'table.md'}, " + ", ".join(map(str, plots)))
    elif res.unfinished:
        print(f"no run is finished yet ({len(res.unfinished)} listed above); wrote {out / 'compare.json'}")
    for ended in res.failed:  # trained with --jobs: each run that failed, why, its log beside it
        print(f"onlstm logic compare: {ended.name}: {ended.why}", file=sys.stderr)
    if res.interrupted:  # the runs caught the Ctrl-C and saved (the command to go on is in the log): as any command
        print("onlstm logic compare: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED if res.interrupted else (res.failed[0].code if res.failed else 0)


def compare_command(args: argparse.Namespace, data: Path, out: Path) -> str:
    """The ``onlstm logic compare`` command that goes on after an interruption: the same ``--config``, ``--data``
    and ``--out``, and every flag typed (a typed default too: it overrides the file's value). Rebuilt from what was
    typed, not from the resolved settings, whose encoder fields a flag could not give for every cell."""
    words = ["onlstm", "logic", "compare", *(["--config", str(args.config)] if args.config else [])]
    words += ["--data", str(data), "--out", str(out)]
    for name, cls in SECTIONS.items():
        words += command_flags(cls, flags_given(args, name), defaults=True)
    return shlex.join(words)
