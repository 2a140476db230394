"""Hu et al. (2020)'s SyntaxGym score of their own models, from their published item results, by the aggregation
`onlstm syneval --suite` prints (`onlstm.syneval.syntaxgym.sg_score`): the context figures of docs/results/lm.md,
and a check that the rule gives what their analysis gives.

    python docs/results/records/sg_published.py DIR [--models ordered-neurons vanilla] [--corpus bllip-xs]
        [--unscored npz_ambig npz_ambig_mod npz_obj npz_obj_mod]

DIR is `data/raw/sg_results` of github.com/cpllab/syntactic-generalization (commit 43f1f86, the suites' own):
`syntaxgym_results_<model>_<corpus>.csv`, one row per seed, suite and item (`model,suite,item,correct`, the model
column `<model>_<corpus>_<seed>`). `--unscored` counts those suites as not scored, so that the figure averages the
suites a model of ours scores (a model trained on Mikolov's PTB reads no commas: the comma conditions of npz*).
Prints, per model, the score of each seed, their mean and standard deviation, the mean over every suite scored
(the left-out ones too), and the mean of each circuit.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from onlstm.syneval.syntaxgym import sg_score


def suite_accuracies(path: Path) -> dict[str, dict[str, float]]:
    """Seed -> suite -> the share of its items marked correct, from one results file."""
    items: dict[tuple[str, str], list[bool]] = defaultdict(list)
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            items[row["model"].rsplit("_", 1)[-1], row["suite"]].append(row["correct"] == "True")
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (seed, suite), marks in items.items():
        out[seed][suite] = sum(marks) / len(marks)
    return dict(out)


def report(name: str, per_seed: dict[str, dict[str, float]], unscored: set[str]) -> list[str]:
    scores = {
        seed: sg_score({s: (None if s in unscored else a) for s, a in acc.items()}) for seed, acc in per_seed.items()
    }
    values = [100 * sg["score"] for sg in scores.values()]
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    first = next(iter(scores.values()))
    every = statistics.fmean(100 * sg["mean_all"] for sg in scores.values())
    lines = [
        f"{name}: SG score {statistics.fmean(values):.1f} ± {std:.1f} over {len(values)} seeds "
        f"({', '.join(f'{v:.1f}' for v in values)}); {first['suites']} of {first['of']} suites; "
        f"mean over every suite scored {every:.1f}"
    ]
    for circuit in first["by_circuit"]:
        mean = statistics.fmean(100 * sg["by_circuit"][circuit]["score"] for sg in scores.values())
        lines.append(f"  {circuit}: {mean:.1f} ({first['by_circuit'][circuit]['suites']} suites)")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--models", nargs="+", default=["ordered-neurons", "vanilla"])
    p.add_argument("--corpus", default="bllip-xs")
    p.add_argument("--unscored", nargs="*", default=[])
    args = p.parse_args(argv)
    for model in args.models:
        path = args.dir / f"syntaxgym_results_{model}_{args.corpus}.csv"
        if not path.is_file():
            print(
                f"sg_published.py: no {path}; give data/raw/sg_results of cpllab/syntactic-generalization",
                file=sys.stderr,
            )
            return 2
        print("\n".join(report(f"{model} {args.corpus}", suite_accuracies(path), set(args.unscored))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
