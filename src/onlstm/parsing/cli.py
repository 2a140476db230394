"""``onlstm parsing {parse,eval-parse,compare-trees,plot}``: parse with a trained language model, score trees
(docs/parsing.md)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config import option
from ..device import runtime_device
from ..errors import InputError, command_error, counted
from ..files import (
    add_files,
    check_new_files,
    check_output_file,
    json_text,
    read_input,
    read_lines,
    split_lines,
    write_text,
)
from ..flags import add_command, add_group, add_runtime_flags, runtime_settings
from ..models.language_model import default_parse_layer
from .evaluate import PAPER_F1, PAPER_SOURCE, paper_set, score_treebank
from .induce import (
    check_layer,
    load_language_model,
    sentence_distances,
    trees_from_distances,
)
from .trees import (
    FORMATS,
    TreeFormatError,
    draw_tree,
    is_labelled,
    leaves,
    parse_brackets,
    parse_tree_lines,
    to_brackets,
    unlabel,
)

LAYER_HELP = (
    "1-based layer whose distances build the tree (default: the layer saved in the run, e.g. the one `onlstm demo` "
    "chose on its dev sentences; else 2, the paper's, or the last layer of a smaller model)"
)


@dataclass(kw_only=True)
class ModelArgs:
    checkpoint: Path = option(help="language-model run directory or .safetensors file")


@dataclass(kw_only=True)
class ParseArgs(ModelArgs):
    input: Path | None = option(None, "text file, one sentence per line (default: standard input)", positional=True)
    layer: int | None = option(None, LAYER_HELP)
    format: str = option(
        "brackets",
        "brackets: one tree per input line, an empty line for a line with nothing to parse (blank or only "
        "punctuation); json: one object per input line (tree null for those); pretty: drawn trees",
        choices=("brackets", "pretty", "json"),
    )
    batch_size: int = option(128, "sentences per batch", ge=1)


@dataclass(kw_only=True)
class EvalParseArgs(ModelArgs):
    treebank: Path = option(help="directory of .mrg files (searched recursively)")
    wsj10: bool = option(False, "only sentences of at most 10 words after normalisation")
    sections: list[str] | None = option(None, "WSJ sections to use, e.g. 23 (default: all found)")
    layers: str = option("all", "'all' or comma-separated 1-based layers")
    out_trees: Path | None = option(
        None, "write predicted trees here, one per line (one layer: PATH; several: STEM.layerN.txt each)"
    )
    overwrite: bool = option(False, "replace --out-trees files already there")
    random_draws: int = option(5, "random-baseline draws", ge=1)
    batch_size: int = option(128, "sentences per batch", ge=1)
    json: bool = option(False, "print one JSON object with every number")


@dataclass(kw_only=True)
class PlotArgs(ModelArgs):
    sentence: str = option(help="the sentence, in quotes", positional=True)
    layer: int | None = option(None, "1-based layer for the tree (default as parse)")
    gold: str | None = option(None, "gold tree in bracket notation, drawn beside the induced one")
    out: Path = option(Path("parse_plot"), "output prefix (writes .png and .svg)")
    overwrite: bool = option(False, "replace the .png and .svg already there")


@dataclass(kw_only=True)
class CompareTreesArgs:
    gold: Path = option(help="gold trees, one per line", positional=True)
    pred: Path = option(help="predicted trees, one per line", positional=True)
    json: bool = option(False, "print one JSON object instead of a table")
    gold_format: str = option("auto", "how to read GOLD (auto: detected)", choices=FORMATS)
    pred_format: str = option("auto", "how to read PRED (auto: detected)", choices=FORMATS)
    normalise_gold: bool = option(
        False,
        "apply the treebank normalisation (POS filter, lowercase, digits -> N, unary collapse) to labelled GOLD "
        "trees first, e.g. for raw PTB trees with punctuation and traces",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``onlstm parsing {parse,eval-parse,compare-trees,plot}``."""
    sub = add_group(
        subparsers,
        "parsing",
        "unsupervised parsing: parse, eval-parse, compare-trees, plot",
        "Trees from a trained ON-LSTM language model, and tree scoring.",
    )
    parse = add_command(sub, "parse", _cmd_parse, ParseArgs)
    parse.set_defaults(prog=parse.prog)  # its notes on stderr name the command as it was typed
    evaluate = add_command(sub, "eval-parse", _cmd_eval_parse, EvalParseArgs)
    plot = add_command(sub, "plot", _cmd_plot, PlotArgs)
    for p in (parse, evaluate, plot):
        add_runtime_flags(p, skip=("progress",))  # no bar: sentences are scored in a few batches
    add_command(sub, "compare-trees", _cmd_compare_trees, CompareTreesArgs)  # after plot: the names keep their order


def _read_trees(path: Path, fmt: str, what: str) -> list:
    try:
        trees = parse_tree_lines(read_lines(path), fmt, f"{what} file {path}")
    except FileNotFoundError:
        raise InputError(f"{what} file {path} does not exist") from None
    except TreeFormatError as err:
        raise InputError(str(err)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read the {what} file {path}: {err}") from None
    if not trees:
        raise InputError(f"{what} file {path} holds no trees; write one tree per line")
    return trees


def _normalise_gold(trees: list, path: Path) -> list:
    from ..data.treebank import normalise_tree

    out = []
    for k, tree in enumerate(trees, 1):
        if not is_labelled(tree):
            raise InputError(
                f"--normalise-gold needs labelled gold trees, but line {k} of {path} reads as unlabelled; "
                "pass --gold-format labelled if it is labelled"
            )
        try:
            norm = normalise_tree(tree)
        except ValueError as err:
            raise InputError(f"gold file {path} line {k}: {err}") from None
        if norm is None:
            raise InputError(
                f"gold file {path} line {k}: no word is left after normalisation; remove the line from both files"
            )
        out.append(norm)
    return out


def check_pairs(gold: list, pred: list, gold_path: object = "GOLD", pred_path: object = "PRED") -> None:
    """Same number of trees, and the same words on every line; else :class:`InputError` naming the line."""
    if len(gold) != len(pred):
        raise InputError(
            f"{gold_path} has {len(gold)} trees but {pred_path} has {len(pred)}; "
            "the files must hold the same sentences, one per line, in the same order"
        )
    for k, (g, p) in enumerate(zip(gold, pred), 1):
        gw, pw = leaves(g), leaves(p)
        if len(gw) != len(pw):
            raise InputError(
                f"line {k}: the gold tree has {len(gw)} words but the predicted tree has {len(pw)} "
                f"(gold: {' '.join(gw)!r}; predicted: {' '.join(pw)!r})"
            )
        i = next((i for i, (a, b) in enumerate(zip(gw, pw)) if a != b), None)
        if i is not None:
            raise InputError(
                f"line {k}: the trees have different words: word {i + 1} is {gw[i]!r} in gold but {pw[i]!r} "
                "in the prediction"
            )


def compare_tree_files(
    gold_path: Path, pred_path: Path, gold_format: str = "auto", pred_format: str = "auto", normalise_gold: bool = False
):
    """Read both files, check them line by line, and return :class:`~onlstm.parsing.metrics.ParseEvaluation`."""
    from .metrics import evaluate

    gold = _read_trees(Path(gold_path), gold_format, "gold")
    pred = _read_trees(Path(pred_path), pred_format, "prediction")
    if normalise_gold:
        gold = _normalise_gold(gold, Path(gold_path))
    try:
        check_pairs(gold, pred, gold_path, pred_path)
    except InputError as exc:  # a file read as labelled by detection may be unlabelled trees of that shape
        sides = (("gold", gold_format, gold), ("pred", pred_format, pred))
        guessed = [name for name, fmt, trees in sides if fmt == "auto" and is_labelled(trees[0])]
        if not guessed or "words" not in str(exc):
            raise
        flags = " ".join(f"--{name}-format unlabelled" for name in guessed)
        raise InputError(
            f"{exc}; {' and '.join(guessed)} read as labelled trees (the first word in each bracket taken as its "
            f"label): if they are unlabelled, pass {flags}"
        ) from None
    return evaluate(gold, pred)


def _cmd_compare_trees(args: argparse.Namespace) -> int:
    """score predicted trees against gold trees (sentence/corpus/EVALB-style F1, label recall, depth)

    GOLD and PRED hold one tree per line, in bracket notation: unlabelled '((the cat) sat)' or labelled
    '(S (NP (DT the) (NN cat)) (VP (VBD sat)))'; line k of PRED must have the same words as line k of GOLD.
    Label recall needs labelled gold trees. P/R/F1 are printed in percent (fractions with --json). Exit status 2
    on bad input. --gold-format and --pred-format apply to the whole file.
    """
    result = compare_tree_files(args.gold, args.pred, args.gold_format, args.pred_format, args.normalise_gold)
    print(json_text(result.to_dict()) if args.json else result.format_table())
    return 0


# --------------------------------------------------------------------------- commands that read a model


def choose_layer(given: int | None, lm) -> int:
    """The 0-based layer to build trees from (:func:`onlstm.models.language_model.default_parse_layer`): ``--layer``
    when given (checked: 1..layers, so 0 is an error, not the default), else the run's or the paper's."""
    try:
        return default_parse_layer(lm.config, len(lm.model.layers), given)
    except InputError as err:  # the Python API names its argument, layer; here it is the flag
        raise InputError(f"--{err}") from None


def _prepare(lines, reader, vocab):
    """Raw lines -> word lists as the model reads them (its :class:`~onlstm.data.reader.TextReader`); returns
    (sentences, line numbers, dropped tokens, empty lines): a blank line and a line of only punctuation are both
    "empty" (listed, nothing parsed)."""
    sentences, numbers, dropped, empty = [], [], 0, []
    for k, line in enumerate(lines, 1):
        words, gone = reader.read(line, vocab) if line.strip() else ([], [])
        dropped += len(gone)
        if words:
            sentences.append(words)
            numbers.append(k)
        else:
            empty.append(k)
    return sentences, numbers, dropped, empty


def _cmd_parse(args) -> int:
    """parse raw sentences (one per line) with a trained ON-LSTM language model"""
    try:
        lm = load_language_model(args.checkpoint, device=runtime_device(runtime_settings(args)))
        layer = choose_layer(args.layer, lm)
    except (ValueError, OSError) as err:
        raise command_error(err) from None
    text = read_input(args.input)
    sentences, numbers, dropped, empty = _prepare(split_lines(text), lm.model.reader, lm.vocab)
    if not sentences and not empty:
        raise InputError(f"{args.input or 'standard input'} is empty: nothing to parse")
    # lines with nothing to parse still get their (empty) output line, so that outputs stay aligned with inputs
    forget, _, unknown = (
        sentence_distances(lm.model, lm.vocab, sentences, args.batch_size) if sentences else ([], [], 0)
    )
    trees = trees_from_distances(sentences, forget, layer)
    parsed = {line: (words, dist, tree) for words, dist, tree, line in zip(sentences, forget, trees, numbers)}
    for line in range(1, max(numbers + empty) + 1):  # one output per input line, in order
        _print_parse(args.format, line, parsed.get(line), lm.vocab)
    words = counted(sum(map(len, sentences)), "word")
    notes = [f"{counted(len(sentences), 'sentence')}, {words}, {unknown} unknown to the model (mapped to <unk>)"]
    if dropped:
        notes.append(f"{counted(dropped, 'punctuation token')} dropped (the model's text has none)")
    if empty:
        shown = ", ".join(map(str, empty[:20])) + (f" and {len(empty) - 20} more" if len(empty) > 20 else "")
        notes.append(f"lines with nothing to parse (blank or only punctuation), written as empty output: {shown}")
    print(f"{args.prog}: " + "; ".join(notes) + f"; layer {layer + 1}", file=sys.stderr)
    return 0


def _print_parse(fmt: str, line: int, item, vocab) -> None:
    """The output for input line ``line``: its tree, or the empty marker when ``item`` is None."""
    if fmt == "json":
        words, dist, tree = item or ([], None, None)
        unknown = [w for w in words if w not in vocab]
        distances = [] if dist is None else [[round(v, 5) for v in r] for r in dist.tolist()]
        tree = None if tree is None else to_brackets(tree)
        print(json_text({"line": line, "words": words, "tree": tree, "unknown": unknown, "distances": distances}, None))
    elif fmt == "pretty" and item is None:
        print(f"(line {line}: nothing to parse)")
    elif fmt == "pretty":
        _pretty(item[2])
    else:
        print("" if item is None else to_brackets(item[2]))


def _pretty(tree) -> None:
    """Draw ``tree`` with nltk, which recurses: a tree deeper than 200 levels is printed in brackets."""
    depth, stack = 0, [(tree, 0)]
    while stack:
        node, d = stack.pop()
        depth = max(depth, d)
        if not isinstance(node, str):
            stack.extend((c, d + 1) for c in node)
    print(to_brackets(tree) if depth > 200 else draw_tree(tree))


def _parse_layers(spec: str, n_layers: int) -> list[int]:
    if spec == "all":
        return list(range(n_layers))
    try:
        return [check_layer(int(v), n_layers) for v in spec.split(",")]
    except ValueError as err:
        raise ValueError(
            f"--layers: {err}" if "layer" in str(err) else f"--layers must be 'all' or numbers like 2,3; got {spec!r}"
        ) from None


def _cmd_eval_parse(args) -> int:
    """induced trees vs a Penn Treebank directory, per layer, with baselines"""
    from ..data.treebank import load_treebank

    try:
        if args.out_trees:
            check_output_file(args.out_trees, "--out-trees")
        lm = load_language_model(args.checkpoint, device=runtime_device(runtime_settings(args)))
        layers = _parse_layers(args.layers, len(lm.model.layers))
        if args.out_trees:  # before the scoring, which may take minutes
            check_new_files(_tree_paths(args.out_trees, layers).values(), "--out-trees", args.overwrite)
        bank = load_treebank(args.treebank, max_length=10 if args.wsj10 else None, sections=args.sections)
    except (ValueError, OSError) as err:
        raise command_error(err) from None
    scores = score_treebank(lm, bank, layers, args.batch_size, args.random_draws)
    written = _write_trees(args.out_trees, scores.trees) if args.out_trees else []
    result = {
        "treebank": bank.name,
        "summary": bank.summary(),
        "sentences": scores.sentences,
        "words": scores.words,
        "unknown_words": scores.unknown_words,
        "sentences_per_second": scores.sentences / scores.seconds,
        "layers": {k: v.to_dict() for k, v in scores.rows.items()},
        "baselines": scores.baselines,
        "trees_written": written,
        "run_layer": choose_layer(None, lm) + 1,  # the layer parse/plot use for this run by default
        "paper_convention": "sentence_f1",
        "paper": {"source": PAPER_SOURCE, "set": paper_set(args.wsj10, args.sections), "sentence_f1": PAPER_F1},
    }
    if args.json:
        print(json_text(result))
    else:
        _print_eval_parse(bank.summary(), scores, args.random_draws, written)
        print(_paper_line(paper_set(args.wsj10, args.sections)))
        print(f"parse and plot use layer {result['run_layer']} of this run by default")
    return 0


def _paper_line(matched: str | None) -> str:
    """The footnote of the table's starred column: the paper's convention and its figures beside it."""
    shown = {matched: PAPER_F1[matched]} if matched else PAPER_F1
    figures = "; ".join(f"{name}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()) for name, row in shown.items())
    note = "" if matched else " (this selection is neither of its sets: compare with care)"
    return (
        f"* sentence: sentence-level F1, the paper's convention (its evaluation code's); the paper ({PAPER_SOURCE}): "
        f"{figures}{note}"
    )


def _tree_paths(out: Path, layers: list[int]) -> dict[int, Path]:
    """The file of each layer's trees (0-based layers): ``out`` itself when a single layer is scored."""
    return {l: out if len(layers) == 1 else out.with_name(f"{out.stem}.layer{l + 1}.txt") for l in layers}


def _write_trees(out: Path, trees: dict) -> list[str]:
    """One file of bracketed trees per layer, written together (all or none)."""
    paths = _tree_paths(out, list(trees))

    def write(tmp: Path) -> None:
        for l, path in paths.items():
            write_text(tmp / path.name, "\n".join(to_brackets(t) for t in trees[l]) + "\n")

    add_files(out.parent, write)
    return [str(p) for p in paths.values()]


def _print_eval_parse(summary: str, scores, random_draws: int, written: list[str]) -> None:
    """The eval-parse table: F1 per layer and baseline, depths, label recall."""
    rows, n_sent = scores.rows, scores.sentences
    print(summary)
    print(
        f"{n_sent} sentences, {scores.words} words ({scores.unknown_words} unknown to the model); "
        f"distances at {n_sent / scores.seconds:.0f} sentences/s"
    )
    print(f"\n{'F1 (%)':<26}{'sentence*':>9}{'corpus':>8}{'EVALB':>8}{'depth':>7}")
    for name, ev in rows.items():
        print(
            f"{'ON-LSTM ' + name:<26}{100 * ev.sentence.f1:9.1f}{100 * ev.corpus.f1:8.1f}{100 * ev.evalb.f1:8.1f}"
            f"{ev.depth_pred:7.2f}"
        )
    for name, sc in scores.baselines.items():
        label = name + (f" ({random_draws} draws)" if name == "random" else "")
        print(f"{label:<26}{100 * sc['sentence_f1']:9.1f}{100 * sc['corpus_f1']:8.1f}{100 * sc['evalb_f1']:8.1f}")
    first = next(iter(rows.values()))
    print(f"{'gold':<26}{'':>25}{first.depth_gold:7.2f}")
    if first.label_recall:
        print("\nlabel recall (%)  " + "  ".join(f"{lab:>6}" for lab in first.label_recall))
        for name, ev in rows.items():
            print(f"{'ON-LSTM ' + name:<18}" + "  ".join(f"{100 * r.recall:6.1f}" for r in ev.label_recall.values()))
        print(f"{'gold count':<18}" + "  ".join(f"{r.gold:6d}" for r in first.label_recall.values()))
    for w in written:
        print(f"trees written to {w}")


def _read_gold(text: str, reader, vocab) -> object:
    """``--gold`` as an unlabelled tree whose words are read as the sentence is (the model's text convention: case,
    numbers, punctuation not read), so that a gold tree of the raw sentence lines up with it."""
    tree = unlabel(parse_brackets(text))  # a labelled tree loses its labels

    def read(node):
        if isinstance(node, str):
            words, _ = reader.read([node], vocab)
            return words[0] if words else None
        kids = [k for k in map(read, node) if k is not None]
        return None if not kids else kids[0] if len(kids) == 1 else tuple(kids)

    try:
        read_tree = read(tree)
    except RecursionError:
        raise ValueError("the gold tree nests too deep to draw (hundreds of levels)") from None
    if read_tree is None:
        raise ValueError(f"the gold tree has no word left after normalisation: {text!r}")
    return read_tree


def _cmd_plot(args) -> int:
    """per-layer distances of a sentence and its induced (and gold) tree, PNG+SVG"""
    from .plots import plot_sentence

    try:
        check_output_file(args.out, "--out")
        check_new_files([args.out.with_suffix(".png"), args.out.with_suffix(".svg")], "--out", args.overwrite)
        lm = load_language_model(args.checkpoint, device=runtime_device(runtime_settings(args)))
        layer = choose_layer(args.layer, lm)
        words, _dropped = lm.model.reader.read(args.sentence, lm.vocab)
        if not words:
            raise ValueError("the sentence has no word left after normalisation")
        gold = _read_gold(args.gold, lm.model.reader, lm.vocab) if args.gold else None
        if gold is not None and leaves(gold) != words:
            raise ValueError(f"the gold tree's words {leaves(gold)} differ from the sentence's {words}")
    except (ValueError, OSError) as err:
        raise command_error(err) from None
    # the two files appear together or not at all
    write = lambda tmp: plot_sentence(lm.model, lm.vocab, words, tmp / args.out.name, gold=gold, layer=layer)
    paths = add_files(args.out.parent, write)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
