"""``onlstm logic …``: sub-commands of the logical-inference experiment.

Each sub-command has a ``_register_<name>(sub)`` function listed in :func:`register`:
``generate``, ``check``, ``train``, ``eval`` and ``compare``.

``train`` and ``compare`` take their settings from, in increasing priority: the dataclass defaults
(:class:`~onlstm.logic.model.LogicModelConfig`, :class:`~onlstm.logic.train.LogicTrainConfig`), a
YAML file given with ``--config`` (sections ``model:``, ``train:``, ``compare:`` and the keys
``data:``/``out:``; see ``configs/logic/``), and the command-line flags.
"""
from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from ..errors import EXIT_FINDING, EXIT_INTERRUPTED, OnlstmError, command_error
from .generate import GenerateConfig, format_label_counts, generate_dataset


def register(subparsers) -> None:
    """Add ``onlstm logic`` with its own sub-commands to the top-level ``subparsers``."""
    p = subparsers.add_parser("logic", help="logical inference (Bowman et al. 2015): data, train, eval, compare",
                              description="Propositional-logic relation classification: the data and the experiment.")
    sub = p.add_subparsers(dest="logic_command", required=True, metavar="{generate,check,train,eval,compare}")
    _register_generate(sub)
    _register_check(sub)
    _register_train(sub)
    _register_eval(sub)
    _register_compare(sub)


# --------------------------------------------------------------------------- generate


def _register_generate(sub) -> None:
    d = GenerateConfig()
    p = sub.add_parser(
        "generate", help="write random labelled formula pairs as train0..train12 / test0..test12",
        description="Random formula pairs over a-f with not/and/or, labelled with their relation from the "
                    "truth sets, written as LABEL<TAB>A<TAB>B into train{k}/test{k} (k = larger operator "
                    "count; file 12 holds 12 or more).")
    p.add_argument("--out", required=True, type=Path, help="output directory (created if missing)")
    p.add_argument("--per-length", type=int, default=d.per_length,
                   help=f"pairs per length bucket k, train+test together (default {d.per_length})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"random seed; same seed, same files (default {d.seed})")
    p.add_argument("--max-ops", type=int, default=d.max_ops,
                   help=f"largest operator count of a formula (default {d.max_ops}); above 12 all go to file 12")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--test-fraction", type=float, default=d.test_fraction,
                   help=f"share of each bucket written to test{{k}} (default {d.test_fraction})")
    g.add_argument("--test-count", type=int, default=None, help="pairs per bucket written to test{k} instead")
    p.add_argument("--balance-labels", action="store_true",
                   help="draw --pool-factor times more distinct pairs and keep label counts as equal as possible")
    p.add_argument("--pool-factor", type=int, default=d.pool_factor,
                   help=f"with --balance-labels: candidates per wanted pair (default {d.pool_factor})")
    p.add_argument("--not-prob", type=float, default=d.not_prob,
                   help=f"probability that an operator node is 'not' (default {d.not_prob})")
    p.add_argument("--allow-degenerate", action="store_true",
                   help="keep formulas that are always true or always false (the original data has none)")
    p.add_argument("--allow-duplicates", action="store_true", help="allow the same pair twice in a bucket")
    p.add_argument("--quiet", action="store_true", help="print only the final summary")
    p.set_defaults(func=_cmd_generate)


def _cmd_generate(args: argparse.Namespace) -> int:
    cfg = GenerateConfig(
        per_length=args.per_length, seed=args.seed, max_ops=args.max_ops, test_fraction=args.test_fraction,
        test_count=args.test_count, balance_labels=args.balance_labels, pool_factor=args.pool_factor,
        not_prob=args.not_prob, allow_degenerate=args.allow_degenerate, allow_duplicates=args.allow_duplicates)
    try:
        cfg.validate()
    except ValueError as exc:
        raise command_error(exc) from None
    report = generate_dataset(args.out, cfg, log=None if args.quiet else print)
    rate = report.n_pairs / report.seconds if report.seconds > 0 else float("inf")
    print(f"wrote {report.n_pairs} pairs to {report.out_dir} in {report.seconds:.1f} s ({rate:,.0f} pairs/s)")
    for split in ("train", "test"):
        counts = report.label_counts(split)
        print(f"{split:>5} labels ({sum(counts.values())}): {format_label_counts(counts)}")
    return 0


# --------------------------------------------------------------------------- check


def _register_check(sub) -> None:
    p = sub.add_parser(
        "check", help="read a data directory or file, recompute every label and the file-number rule",
        description="Read train{k}/test{k} files (or one file), recompute each label from the truth sets and "
                    "check that file k holds pairs whose larger operator count is k (12: 12 or more).")
    p.add_argument("path", type=Path, help="a directory of train{k}/test{k} files, or one file")
    p.add_argument("--show", type=int, default=5, help="how many disagreements to print (default 5)")
    p.set_defaults(func=_cmd_check)


def _cmd_check(args: argparse.Namespace) -> int:
    from .data import read_examples, relabel_mismatches

    t0 = time.perf_counter()
    examples = read_examples(args.path)  # a LogicDataError (bad input) exits with status 2 (see onlstm.errors)
    by_file: dict[str, Counter] = {}
    misfiled = []
    for ex in examples:
        by_file.setdefault(Path(ex.source).name, Counter())[ex.label] += 1
        if ex.file_number is not None and ex.file_number != ex.bucket:
            misfiled.append(ex)
    for name, counts in by_file.items():
        print(f"{name:>16} {sum(counts.values()):>7}  {format_label_counts(counts)}")
    wrong = relabel_mismatches(examples)
    for ex, computed in wrong[: args.show]:
        print(f"label differs at {ex.where}: file says {ex.label!r}, truth sets give {computed!r}")
    for ex in misfiled[: args.show]:
        print(f"misfiled at {ex.where}: larger operator count {ex.max_ops} but file number {ex.file_number}")
    print(f"{len(examples) - len(wrong)}/{len(examples)} labels agree, {len(misfiled)} lines break the "
          f"file-number rule ({time.perf_counter() - t0:.1f} s)")
    return 0 if not wrong and not misfiled else EXIT_FINDING  # a finding, not bad input


# --------------------------------------------------------------------------- train / eval / compare: settings

_CONFIG_KEYS = ("data", "out", "model", "train", "compare")

# (flag, section, field, type, help); the default shown in --help is the dataclass default.
_MODEL_FLAGS = [
    ("--emb-size", "emb_size", int, "embedding size (paper: 128)"),
    ("--hidden-size", "hidden_size", int, "encoder units (paper: 400)"),
    ("--chunk-size", "chunk_size", int, "ON-LSTM chunk size (default 10: 40 chunks of 10 units)"),
    ("--master-input", "master_input", str, "ON-LSTM master input gate: paper (default, the layer's) or reverse"),
    ("--dropout", "dropout", float, "dropout on embeddings, features and MLP hidden layer (paper: 0.2)"),
    ("--dropconnect", "dropconnect", float, "DropConnect on hidden-to-hidden weights (default 0)"),
    ("--mlp-hidden", "mlp_hidden", int, "MLP hidden width (default 400; 0 = linear)"),
    ("--mlp-activation", "mlp_activation", str, "MLP hidden activation: relu (default) or elu (the authors')"),
]
_TRAIN_FLAGS = [
    ("--max-train-ops", "max_train_ops", int, "train on pairs with at most this many operators (default 6)"),
    ("--valid-fraction", "valid_fraction", float, "share held out for validation (default 0.1)"),
    ("--max-train-examples", "max_train_examples", int, "random subset of the training pairs (default all)"),
    ("--seed", "seed", int, "seed of subset, split, init, dropout and batch order (default 0)"),
    ("--epochs", "epochs", int, "maximum epochs (default 30)"),
    ("--batch-size", "batch_size", int, "pairs per step (default 128)"),
    ("--lr", "lr", float, "Adam learning rate (default 1e-3)"),
    ("--lr-decay", "lr_decay", float, "learning-rate factor on a validation plateau, 1 = constant (default 0.5)"),
    ("--lr-patience", "lr_patience", int, "checks in a row without improvement before each decay (default 3)"),
    ("--min-lr", "min_lr", float, "never decay the learning rate below this (default 1e-5)"),
    ("--weight-decay", "weight_decay", float, "Adam weight decay (default 0)"),
    ("--adam-eps", "adam_eps", float, "Adam epsilon (default 1e-8)"),
    ("--clip", "clip", float, "gradient norm clipping, 0 = none (default 1)"),
    ("--patience", "patience", int, "stop after this many validation checks without improvement (default 8)"),
    ("--valid-every", "valid_every", int, "steps between validation checks, 0 = each epoch (default 0)"),
    ("--time-limit", "time_limit", float, "stop training after this many minutes (default none)"),
    ("--eval-batch-size", "eval_batch_size", int, "pairs per evaluation batch (default 512)"),
    ("--device", "device", str, "auto (default: cuda if available), cpu, cuda or cuda:N"),
    ("--threads", "threads", int, "torch threads (default: torch's choice)"),
]


_METAVAR = {int: "N", float: "X", str: "NAME"}


def _add_settings(p: argparse.ArgumentParser, cell: bool) -> None:
    p.add_argument("--config", type=Path, help="YAML file with data/out/model/train/compare settings (configs/logic/)")
    p.add_argument("--data", type=Path, help="directory of train{k}/test{k} files (generated or the original data)")
    p.add_argument("--out", type=Path, help="output directory")
    if cell:
        p.add_argument("--cell", help="encoder: onlstm (default), lstm or gru")
    g = p.add_argument_group("model")
    for flag, name, typ, hlp in _MODEL_FLAGS:
        g.add_argument(flag, dest=f"model.{name}", type=typ, metavar=_METAVAR[typ], help=hlp)
    g = p.add_argument_group("training")
    for flag, name, typ, hlp in _TRAIN_FLAGS:
        g.add_argument(flag, dest=f"train.{name}", type=typ, metavar=_METAVAR[typ], help=hlp)
    g.add_argument("--no-progress", dest="train.progress", action="store_const", const=False,
                   help="no progress bar (it is shown on a terminal only anyway)")


class SettingsError(OnlstmError, ValueError):
    """Bad --config file or option values; printed on stderr, exit status 2."""


def load_yaml(path: Path) -> dict:
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - pyyaml is a dependency
        raise SettingsError(f"--config needs PyYAML ({exc}); pip install pyyaml") from None
    if not path.is_file():
        raise SettingsError(f"config file {path} does not exist")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise SettingsError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise SettingsError(f"config file {path}: expected a mapping with keys {', '.join(_CONFIG_KEYS)}")
    unknown = sorted(set(doc) - set(_CONFIG_KEYS))
    if unknown:
        raise SettingsError(f"config file {path}: unknown keys {unknown}; allowed: {', '.join(_CONFIG_KEYS)}")
    for section in ("model", "train", "compare"):
        if not isinstance(doc.get(section) or {}, dict):
            raise SettingsError(f"config file {path}: '{section}' must be a mapping")
    return doc


def resolve_settings(args: argparse.Namespace):
    """``(model config, train config, data, out, compare section)`` from defaults < YAML < flags."""
    from .model import LogicModelConfig
    from ..runs import resolve_device
    from .train import LogicTrainConfig

    doc = load_yaml(args.config) if args.config else {}
    model = dict(doc.get("model") or {})
    train = dict(doc.get("train") or {})
    for key, value in vars(args).items():
        if value is None:
            continue
        if key.startswith("model."):
            model[key[6:]] = value
        elif key.startswith("train."):
            train[key[6:]] = value
    if getattr(args, "cell", None):
        model["cell"] = args.cell
    try:
        model_cfg, train_cfg = LogicModelConfig.from_dict(model), LogicTrainConfig.from_dict(train)
        resolve_device(train_cfg.device)  # cuda asked for on a machine without it: say so before any work
    except (TypeError, ValueError) as exc:
        raise SettingsError(str(exc)) from None
    data = args.data or doc.get("data")
    out = args.out or doc.get("out")
    if data is None:
        raise SettingsError("no data directory: pass --data DIR (or data: in the --config file); "
                            "create one with `onlstm logic generate --out DIR`")
    if out is None:
        raise SettingsError("no output directory: pass --out DIR (or out: in the --config file)")
    return model_cfg, train_cfg, Path(data), Path(out), dict(doc.get("compare") or {})


def parse_buckets(text: str | list) -> list[int]:
    """``'1-12'``, ``'7,8,9'``, ``'0-3,12'`` or a list of ints -> sorted list of lengths."""
    if isinstance(text, list):
        items = [str(x) for x in text]
    else:
        items = [t for t in str(text).split(",") if t.strip()]
    out: set[int] = set()
    try:
        for item in items:
            if "-" in item.strip()[1:]:
                lo, hi = item.split("-", 1)
                out.update(range(int(lo), int(hi) + 1))
            else:
                out.add(int(item))
    except ValueError:
        raise SettingsError(f"bad lengths {text!r}: write e.g. 1-12 or 7,8,9") from None
    if not out or min(out) < 0:
        raise SettingsError(f"bad lengths {text!r}: give non-negative operator counts, e.g. 1-12")
    return sorted(out)


# --------------------------------------------------------------------------- train


def _register_train(sub) -> None:
    p = sub.add_parser(
        "train", help="train a relation classifier (ON-LSTM, LSTM or GRU encoder) on <= 6 operators",
        description="Train the paper's classifier (shared one-layer encoder, features [h1, h2, h1*h2, |h1-h2|], "
                    "MLP over the 7 relations) on the train{k} files with k <= --max-train-ops, 10%% held out "
                    "for validation and early stopping. Writes config.json, vocab.json, history.json, "
                    "model.best.safetensors and model.last.safetensors into --out. Ctrl-C stops after the current "
                    "step, keeps the best checkpoint and writes resume.safetensors (exit status 130); run the same "
                    "command with --resume to go on exactly where it stopped.")
    _add_settings(p, cell=True)
    p.add_argument("--resume", action="store_true",
                   help="go on from --out/resume.safetensors (same settings; written at every validation check "
                        "and on Ctrl-C)")
    p.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    from .train import train

    model_cfg, train_cfg, data, out, _ = resolve_settings(args)
    result = train(model_cfg, train_cfg, data, out, resume=args.resume)
    if result.interrupted:
        return EXIT_INTERRUPTED
    print(f"evaluate with: onlstm logic eval --checkpoint {out} --data {data}")
    return 0


# --------------------------------------------------------------------------- eval


def _register_eval(sub) -> None:
    p = sub.add_parser(
        "eval", help="accuracy of a trained classifier for each number of operators",
        description="Accuracy on the test{k} files of --data for each length k (the larger operator count of "
                    "a pair; file 12 holds 12 or more), then pooled over <= 6, 7-12 and all. Percent. "
                    "Also prints the majority-label accuracy of the same pairs for reference.")
    p.add_argument("--checkpoint", required=True, type=Path,
                   help="run directory of `onlstm logic train` (uses model.best) or a .safetensors file in one")
    p.add_argument("--data", required=True, type=Path, help="directory of test{k} files (or one file)")
    p.add_argument("--split", choices=("test", "train"), default="test", help="which files to read (default test)")
    p.add_argument("--lengths", default="1-12", help="file numbers to evaluate, e.g. 1-12 (default) or 0-12")
    p.add_argument("--tag", default="best", help="weights file model.<tag>.safetensors (default best)")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--device", default="auto", help="auto (default: cuda if available), cpu, cuda or cuda:N")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=_cmd_eval)


def _cmd_eval(args: argparse.Namespace) -> int:
    import json

    from ..runs import resolve_device
    from .evaluate import evaluate_examples, format_table, load_classifier, majority_baseline, read_test_examples

    try:
        lengths = parse_buckets(args.lengths)
        device = resolve_device(args.device)
        model, header = load_classifier(args.checkpoint, args.tag, device)
        examples = read_test_examples(args.data, args.split, lengths)
    except ValueError as exc:  # bad input reported by library code as a plain ValueError
        raise command_error(exc) from None
    result = evaluate_examples(model, examples, args.batch_size)
    baseline = majority_baseline(examples)
    if args.json:
        print(json.dumps({"checkpoint": str(args.checkpoint), "cell": header["model"]["cell"],
                          "data": str(args.data), "split": args.split, **result.to_dict(),
                          "majority_baseline": baseline.to_dict()}, indent=2))
        return 0
    name = header["model"]["cell"]
    print(format_table([(name, [result]), ("majority label", [baseline])], lengths, counts=baseline))
    return 0


# --------------------------------------------------------------------------- compare


def _register_compare(sub) -> None:
    p = sub.add_parser(
        "compare", help="train ON-LSTM and LSTM with the same data, budget and seeds; table and plot by length",
        description="For each seed and each cell: train into OUT/<cell>-seed<seed> (a finished run with the same "
                    "settings is reused), evaluate its best checkpoint on the test files, then print one row per "
                    "cell (mean ± sample std over seeds) and write OUT/compare.json, OUT/table.md, "
                    "OUT/accuracy_by_length.png and OUT/training_curves.png.")
    _add_settings(p, cell=False)
    p.add_argument("--cells", nargs="+", help="encoders to compare (default: onlstm lstm)")
    p.add_argument("--seeds", nargs="+", type=int, help="seeds (default: 0)")
    p.add_argument("--lengths", help="test file numbers, e.g. 1-12 (default)")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    from ..encoders import ENCODERS
    from .compare import compare

    model_cfg, train_cfg, data, out, section = resolve_settings(args)
    unknown = sorted(set(section) - {"cells", "seeds", "lengths"})
    if unknown:
        raise SettingsError(f"unknown keys {unknown} in the compare: section; allowed: cells, seeds, lengths")
    cells = args.cells or section.get("cells") or ["onlstm", "lstm"]
    bad = [c for c in cells if c not in ENCODERS]
    if bad:
        raise SettingsError(f"unknown cells {bad}; choose from {sorted(ENCODERS)}")
    seeds = args.seeds or section.get("seeds") or [0]
    lengths = parse_buckets(args.lengths or section.get("lengths") or "1-12")
    res = compare(model_cfg, train_cfg, data, out, cells, seeds, lengths)
    if res.table:
        print(res.table)
        print(f"wrote {out / 'compare.json'}, {out / 'table.md'}, {res.plot} and {res.curves}")
    return EXIT_INTERRUPTED if res.interrupted else 0
