"""``onlstm compare-trees GOLD PRED``: score one file of trees against another, model-free."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .trees import FORMATS, LabelledTree, TreeFormatError, leaves, parse_tree_lines

EXIT_BAD_INPUT = 2


class InputError(ValueError):
    """Bad command input; the message is printed on stderr and the command exits with status 2."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``compare-trees`` sub-command to the ``onlstm`` command."""
    p = subparsers.add_parser(
        "compare-trees",
        help="score predicted trees against gold trees (sentence/corpus/EVALB-style F1, label recall, depth)",
        description=(
            "GOLD and PRED hold one tree per line, in bracket notation: unlabelled '((the cat) sat)' or "
            "labelled '(S (NP (DT the) (NN cat)) (VP (VBD sat)))'; line k of PRED must have the same words "
            "as line k of GOLD. Label recall needs labelled gold trees. P/R/F1 are printed in percent "
            "(fractions with --json). Exit status 2 on bad input."),
    )
    p.add_argument("gold", type=Path, help="gold trees, one per line")
    p.add_argument("pred", type=Path, help="predicted trees, one per line")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--gold-format", choices=FORMATS, default="auto",
                   help="how to read GOLD (default: auto-detect for the whole file)")
    p.add_argument("--pred-format", choices=FORMATS, default="auto",
                   help="how to read PRED (default: auto-detect for the whole file)")
    p.add_argument("--normalise-gold", action="store_true",
                   help="apply the treebank normalisation (POS filter, lowercase, digits -> N, unary collapse) "
                        "to labelled GOLD trees first, e.g. for raw PTB trees with punctuation and traces")
    p.set_defaults(func=_cmd_compare_trees)


def _read_trees(path: Path, fmt: str, what: str) -> list:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read the {what} file {path}: {err}") from None
    try:
        trees = parse_tree_lines(text.splitlines(), fmt=fmt, source=f"{what} file {path}")
    except TreeFormatError as err:
        raise InputError(str(err)) from None
    if not trees:
        raise InputError(f"{what} file {path} holds no trees; write one tree per line")
    return trees


def _normalise_gold(trees: list, path: Path) -> list:
    from ..data.treebank import normalise_tree
    out = []
    for k, tree in enumerate(trees, 1):
        if not isinstance(tree, LabelledTree):
            raise InputError(f"--normalise-gold needs labelled gold trees, but line {k} of {path} reads as unlabelled; "
                             "pass --gold-format labelled if it is labelled")
        try:
            norm = normalise_tree(tree)
        except ValueError as err:
            raise InputError(f"gold file {path} line {k}: {err}") from None
        if norm is None:
            raise InputError(f"gold file {path} line {k}: no word is left after normalisation; remove the line from both files")
        out.append(norm)
    return out


def check_pairs(gold: list, pred: list, gold_path: object = "GOLD", pred_path: object = "PRED") -> None:
    """Same number of trees, and the same words on every line; else :class:`InputError` naming the line."""
    if len(gold) != len(pred):
        raise InputError(f"{gold_path} has {len(gold)} trees but {pred_path} has {len(pred)}; "
                         "the files must hold the same sentences, one per line, in the same order")
    for k, (g, p) in enumerate(zip(gold, pred), 1):
        gw, pw = leaves(g), leaves(p)
        if gw == pw:
            continue
        if len(gw) != len(pw):
            raise InputError(f"line {k}: the gold tree has {len(gw)} words but the predicted tree has {len(pw)} "
                             f"(gold: {' '.join(gw)!r}; predicted: {' '.join(pw)!r})")
        i = next(i for i, (a, b) in enumerate(zip(gw, pw)) if a != b)
        raise InputError(f"line {k}: the trees have different words: word {i + 1} is {gw[i]!r} in gold but {pw[i]!r} "
                         "in the prediction")


def compare_tree_files(gold_path: Path, pred_path: Path, gold_format: str = "auto", pred_format: str = "auto",
                       normalise_gold: bool = False):
    """Read both files, check them line by line, and return :class:`~onlstm.parsing.metrics.ParseEvaluation`."""
    from .metrics import evaluate
    gold = _read_trees(Path(gold_path), gold_format, "gold")
    pred = _read_trees(Path(pred_path), pred_format, "prediction")
    if normalise_gold:
        gold = _normalise_gold(gold, Path(gold_path))
    check_pairs(gold, pred, gold_path, pred_path)
    return evaluate(gold, pred)


def _cmd_compare_trees(args: argparse.Namespace) -> int:
    try:
        result = compare_tree_files(args.gold, args.pred, args.gold_format, args.pred_format, args.normalise_gold)
    except InputError as err:
        print(f"onlstm compare-trees: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.format_table())
    return 0
