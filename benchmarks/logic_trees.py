"""Do an ON-LSTM classifier's master gates recover the structure of the formulas it reads? For each run, the
sentence-level F1 (the ON-LSTM paper's convention) of the trees it induces against the trees of the formulas'
brackets, by the formula's own operator count, beside the same network before training (seeded as its training
seeded it) and the model-free baselines (docs/results.md, issue #32).

    python benchmarks/logic_trees.py RUN [RUN ...] --data DIR [--lengths 1-12] [--split test] [--gate forget]

The trees are those of ``onlstm logic trees`` (:mod:`onlstm.logic.trees`): both formulas of every pair read, each
once, those of 3 or more tokens besides brackets; the scores those of ``onlstm parsing compare-trees``.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

from bench_cli import command, parser
from onlstm.logic.cli import parse_buckets
from onlstm.logic.config import LogicModelConfig
from onlstm.logic.evaluate import read_test_examples
from onlstm.logic.model import LogicClassifier, load_classifier
from onlstm.logic.trees import GATES, FormulaTrees, distinct_formulas, formula_trees
from onlstm.parsing.baselines import score_baselines
from onlstm.parsing.metrics import sentence_f1


def grouped(trees: FormulaTrees) -> dict[int, list[tuple]]:
    """The (gold, induced) pairs of trees, by operator count of the formula, in increasing count."""
    groups = defaultdict(list)
    for k, gold, induced in zip(trees.operators, trees.gold, trees.induced):
        groups[k].append((gold, induced))
    return dict(sorted(groups.items()))


def by_operators(trees: FormulaTrees) -> dict[int, float]:
    """Sentence-level F1 (%) of the induced trees, per operator count of the formula."""
    return {k: 100 * sentence_f1(*zip(*pairs)).f1 for k, pairs in grouped(trees).items()}


def untrained(header: dict) -> LogicClassifier:
    """The run's network before its first update: its training seeded torch with its seed, then built it."""
    torch.manual_seed(header["train"]["seed"])
    return LogicClassifier(LogicModelConfig.from_dict(header["model"])).eval()


def row(name: str, figures: list[dict[int, float]], ks: list[int]) -> str:
    cells = []
    for k in ks:
        values = [f[k] for f in figures if k in f]
        sd = f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else ""
        cells.append(f"{statistics.fmean(values):.1f}{sd}" if values else "–")
    return f"| {name} | " + " | ".join(cells) + " |"


@command
def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of `onlstm logic train --cell onlstm`")
    ap.add_argument("--data", type=Path, required=True, help="directory of test{k} files")
    ap.add_argument("--lengths", default="1-12", help="file numbers whose pairs are read (default 1-12)")
    ap.add_argument("--split", default="test", choices=("test", "train"))
    ap.add_argument("--gate", default="forget", choices=GATES, help="whose distances split (default forget)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    formulas = distinct_formulas(read_test_examples(args.data, args.split, parse_buckets(args.lengths)))
    trained, before, gold = [], [], None
    for run in args.runs:
        model, header = load_classifier(run)
        found = formula_trees(model, formulas, gate=args.gate)
        trained.append(by_operators(found))
        before.append(by_operators(formula_trees(untrained(header), formulas, gate=args.gate)))
        gold = found
    assert gold is not None
    golds = {k: [tree for tree, _ in pairs] for k, pairs in grouped(gold).items()}
    ks = list(golds)
    baselines = {k: score_baselines(golds[k], draws=5, seed=0) for k in ks}
    shown = f"{len(formulas)} formulas of {args.data} ({args.split}, files {args.lengths}), master {args.gate} gate"
    print(f"{shown}; sentence F1 %, by operators")
    print("| trees | " + " | ".join(map(str, ks)) + " |")
    print("|---|" + "---:|" * len(ks))
    print(row(f"ON-LSTM, trained ({len(args.runs)} runs)", trained, ks))
    print(row("the same networks before training", before, ks))
    for name in next(iter(baselines.values())):
        print(row(name, [{k: 100 * baselines[k][name]["sentence_f1"] for k in ks}], ks))
    print("| formulas | " + " | ".join(f"{len(golds[k]):,}" for k in ks) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
