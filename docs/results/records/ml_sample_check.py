"""Marvin & Linzen's suite as `onlstm data marvin-linzen` generates it, checked against the published suite through a
trained model: the shared sample (rows drawn from the published suite, stratified over each case's conditions)
against the whole generated suite, on the same model's outcomes.

    python docs/results/records/ml_sample_check.py --suite ml/marvin_linzen.tsv \
        --sample ../shared/data/syneval-sample/syneval_sample.tsv --checkpoint RUN [RUN ...] [--threads 1]

Each sample row is one generated item (tests/data/test_marvin_linzen.py), so the model scores the generated suite
once and the sample's outcomes are those of its items. If the generated suite were the published one, the
sample's accuracy would differ from the generated suite's (weighted as the sample weights the conditions) by
sampling alone; a generator that added, dropped or mis-built sentences that the model finds easier or harder would
show as a difference beyond it. Per case and comparison: the difference, its z (binomial standard error of the
sample's count at the generated accuracy) and, pooled over the rows, sum z^2 against chi-square. Levels are not
printed: the #45 study reports its models' accuracies only when its six runs have ended (docs/results/lm.md).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path

import torch

from onlstm.errors import EXIT_BAD_INPUT, OnlstmError
from onlstm.models.language_model import load_language_model_run
from onlstm.syneval.data import read_items
from onlstm.syneval.evaluate import score_items


def chi2_sf(x: float, k: int) -> float:
    """P(chi-square with k degrees of freedom > x), by the regularised upper incomplete gamma's series."""
    if x <= 0:
        return 1.0
    a, term, total = k / 2, 1.0 / (k / 2), 1.0 / (k / 2)
    for n in range(1, 1000):
        term *= (x / 2) / (a + n)
        total += term
    return max(0.0, 1.0 - math.exp(a * math.log(x / 2) - x / 2 - math.lgamma(a)) * total)


def rows_of(outcomes, key_of_sample: set, covered_only: bool) -> dict:
    """(case, comparison) -> (sample correct, sample n, generated accuracy weighted by the sample's conditions)."""
    by_cond: dict[tuple, list[bool]] = defaultdict(list)
    sample: dict[tuple, list[bool]] = defaultdict(list)
    weights: dict[tuple, Counter] = defaultdict(Counter)
    seen = set()  # a sample item counts once, should the generated suite repeat it
    for o in outcomes:
        if covered_only and not o.covered:
            continue
        it = o.item
        by_cond[it.case, o.comparison, it.condition].append(o.correct)
        key = (it.case, it.grammatical, it.ungrammatical, it.intrusive, o.comparison)
        if key[:4] in key_of_sample and key not in seen:
            seen.add(key)
            sample[it.case, o.comparison].append(o.correct)
            weights[it.case, o.comparison][it.condition] += 1
    out = {}
    for key, marks in sample.items():
        n = len(marks)
        weighted = sum(c * sum(by_cond[(*key, cond)]) / len(by_cond[(*key, cond)]) for cond, c in weights[key].items())
        out[key] = (sum(marks), n, weighted / n)
    return out


def report(name: str, rows: dict) -> list[str]:
    lines = [name, "| case | comparison | sample n | sample - generated | z |", "|---|---|---:|---:|---:|"]
    chi, k = 0.0, 0
    for (case, comparison), (correct, n, p) in sorted(rows.items()):
        diff = correct / n - p
        se = math.sqrt(p * (1 - p) / n)
        z = diff / se if se > 0 else (0.0 if diff == 0 else math.inf)
        if se > 0:
            chi, k = chi + z * z, k + 1
        lines.append(f"| {case} | {comparison} | {n} | {100 * diff:+.1f} | {z:+.2f} |")
    lines.append(f"pooled: sum z^2 = {chi:.1f} over {k} rows, p = {chi2_sf(chi, k):.3f}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, required=True)
    ap.add_argument("--sample", type=Path, required=True)
    ap.add_argument("--checkpoint", type=Path, nargs="+", required=True)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    try:
        check(args.suite, args.sample, args.checkpoint)
    except OnlstmError as exc:  # a file or run that cannot be read: the reader's one line names it
        print(f"ml_sample_check: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def check(suite: Path, sample_path: Path, checkpoints: list[Path]) -> None:
    items = read_items(suite)
    sample = {(i.case, i.grammatical, i.ungrammatical, i.intrusive) for i in read_items(sample_path)}
    found = {(i.case, i.grammatical, i.ungrammatical, i.intrusive) for i in items} & sample
    print(f"{len(items):,} generated items; {len(found)} of the sample's {len(sample)} items among them")
    for path in checkpoints:
        run = load_language_model_run(path, "best", torch.device("cpu"), reads_sentences=True)
        outcomes, _ = score_items(run.model, run.vocab, items, batch_size=2048)
        for covered_only in (False, True):
            what = "covered pairs only" if covered_only else "all pairs (unknown words as <unk>)"
            rows = rows_of(outcomes, found, covered_only)
            print("\n".join(report(f"\n{path} ({run.model.config.cell}), {what}", rows)))


if __name__ == "__main__":
    sys.exit(main())
