"""``onlstm logic …``: sub-commands of the logical-inference experiment.

Each sub-command has a ``_register_<name>(sub)`` function; add ``train`` / ``eval`` the same way
and list them in :func:`register`.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from .generate import GenerateConfig, format_label_counts, generate_dataset


def register(subparsers) -> None:
    """Add ``onlstm logic`` with its own sub-commands to the top-level ``subparsers``."""
    p = subparsers.add_parser("logic", help="logical inference (Bowman et al. 2015): data, and later train/eval",
                              description="Propositional-logic relation classification: the data and the experiment.")
    sub = p.add_subparsers(dest="logic_command", required=True, metavar="{generate,check}")
    _register_generate(sub)
    _register_check(sub)


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
        print(f"onlstm logic generate: {exc}", file=sys.stderr)
        return 2
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
    from .data import LogicDataError, read_examples, relabel_mismatches

    t0 = time.perf_counter()
    try:
        examples = read_examples(args.path)
    except LogicDataError as exc:
        print(f"onlstm logic check: {exc}", file=sys.stderr)
        return 1
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
    return 0 if not wrong and not misfiled else 1
