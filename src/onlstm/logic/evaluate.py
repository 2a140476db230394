"""Accuracy of a trained classifier by length (file number ``k``), pooled over ``<=6``, ``7-12`` and ``all``;
Markdown tables (docs/logic.md, "Evaluation").
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..studies.stats import mean_std
from .data import Example, LogicDataError, read_examples
from .model import (
    LogicClassifier,  # load_classifier, once defined here, is in .model (and the package)
    encode_examples,
    predict_encoded,
)
from .relations import RELATIONS

#: The lengths of the paper's figure.
DEFAULT_BUCKETS: tuple[int, ...] = tuple(range(1, 13))
SEEN: tuple[int, ...] = tuple(range(0, 7))
UNSEEN: tuple[int, ...] = tuple(range(7, 13))


@dataclass
class LengthAccuracy:
    """Correct and total counts per length; every accuracy is a fraction in [0, 1] (NaN when empty)."""

    correct: dict[int, int] = field(default_factory=dict)
    total: dict[int, int] = field(default_factory=dict)

    @property
    def lengths(self) -> list[int]:
        return sorted(self.total)

    def accuracy(self, length: int) -> float:
        n = self.total.get(length, 0)
        return self.correct.get(length, 0) / n if n else math.nan

    def pooled(self, lengths: Iterable[int] | None = None) -> float:
        """Accuracy over all pairs of ``lengths`` (None = every length); NaN when there are none."""
        keys = self.lengths if lengths is None else [k for k in lengths if k in self.total]
        n = sum(self.total[k] for k in keys)
        return sum(self.correct.get(k, 0) for k in keys) / n if n else math.nan

    def summary(self) -> dict[str, float]:
        """``{'<=6': …, '7-12': …, 'all': …}``."""
        return {"<=6": self.pooled(SEEN), "7-12": self.pooled(UNSEEN), "all": self.pooled()}

    @classmethod
    def from_dict(cls, d: dict) -> LengthAccuracy:
        """The counts of a :meth:`to_dict` record."""
        rows = d["by_length"]
        return cls(
            {int(k): int(v["correct"]) for k, v in rows.items()}, {int(k): int(v["total"]) for k, v in rows.items()}
        )

    def to_dict(self) -> dict:
        return {
            "by_length": {
                str(k): {"correct": self.correct.get(k, 0), "total": self.total[k], "accuracy": self.accuracy(k)}
                for k in self.lengths
            },
            **self.summary(),
        }


def count_by_length(examples: list[Example], predictions: Iterable[int | str]) -> LengthAccuracy:
    """Tally predictions (class indices or labels) against the examples' labels, per length."""
    predictions = list(predictions)
    if len(predictions) != len(examples):
        raise ValueError(f"{len(predictions)} predictions for {len(examples)} examples")
    labels = [RELATIONS[p] if isinstance(p, int) else p for p in predictions]
    right = Counter(ex.length for ex, label in zip(examples, labels) if label == ex.label)
    total = Counter(ex.length for ex in examples)
    return LengthAccuracy({k: right[k] for k in total}, dict(total))


def majority_baseline(examples: list[Example]) -> LengthAccuracy:
    """Accuracy per length of always answering that length's most frequent label (the best constant answer)."""
    by_len: dict[int, Counter] = {}
    for ex in examples:
        by_len.setdefault(ex.length, Counter())[ex.label] += 1
    return LengthAccuracy(
        {k: c.most_common(1)[0][1] for k, c in by_len.items()}, {k: sum(c.values()) for k, c in by_len.items()}
    )


def predict(model: LogicClassifier, examples: list[Example], batch_size: int = 512) -> list[int]:
    """Class index (into :data:`RELATIONS`) predicted for each example, in eval mode."""
    return predict_encoded(model, encode_examples(examples), batch_size)


def evaluate_examples(model: LogicClassifier, examples: list[Example], batch_size: int = 512) -> LengthAccuracy:
    return count_by_length(examples, predict(model, examples, batch_size))


def read_test_examples(
    data: str | Path, split: str = "test", buckets: Iterable[int] = DEFAULT_BUCKETS
) -> list[Example]:
    path = Path(data)
    if not path.exists():
        raise LogicDataError(
            f"data directory {path} does not exist; give the directory of test{{k}} files "
            "(from `onlstm logic generate` or the original data)"
        )
    return read_examples(path, split=split, buckets=list(buckets))


def _pct_std(xs: list[float]) -> str:
    mean, std = mean_std([x for x in xs if x == x])  # NaN: no pairs of that length
    return "–" if math.isnan(mean) else f"{100 * mean:.1f}" + ("" if math.isnan(std) else f" ± {100 * std:.1f}")


SUMMARY_COLUMNS = ("<=6", "7-12", "all")


def format_table(
    rows: list[tuple[str, list[LengthAccuracy]]],
    lengths: Iterable[int] | None = None,
    counts: LengthAccuracy | None = None,
) -> str:
    """A Markdown table of accuracies (%): one row per ``(name, results)`` (several: mean ± sample std), columns
    each length, then ``<=6``, ``7-12``, ``all`` pooled; ``counts`` adds a row of pairs per length."""
    lengths = sorted({k for _, rs in rows for r in rs for k in r.lengths}) if lengths is None else list(lengths)
    head = ["model"] + [str(k) for k in lengths] + list(SUMMARY_COLUMNS)
    body = []
    for name, results in rows:
        cells = [_pct_std([r.accuracy(k) for r in results]) for k in lengths]
        cells += [_pct_std([r.summary()[c] for r in results]) for c in SUMMARY_COLUMNS]
        body.append([name] + cells)
    if counts is not None:
        body.append(
            ["pairs"]
            + [str(counts.total.get(k, 0)) for k in lengths]
            + [str(sum(counts.total.get(k, 0) for k in ks)) for ks in (SEEN, UNSEEN, counts.lengths)]
        )
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    line = lambda r: (
        "| " + " | ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |"
    )
    sep = "|" + "|".join("-" * (w + 1) + ":" if i else "-" * (w + 2) for i, w in enumerate(widths)) + "|"
    return "\n".join([line(head), sep] + [line(r) for r in body])


#: The figures :func:`history_table` reads of each check, by split: ``valid_by_ops`` (recorded at every check since
#: a run of an earlier version) and ``test_by_length`` (recorded only by a run trained with ``--score-test``).
HISTORY_KEYS = {"valid": "valid_by_ops", "test": "test_by_length"}


def history_table(runs: list[tuple[str, list[dict]]], steps: Iterable[int], split: str = "valid") -> str:
    """Markdown table of accuracy (%) by operator count at given training steps: per run (its history records)
    and step, the last check at or before that step that has the split's figures: ``valid`` (``valid_by_ops``,
    then the whole validation accuracy) or ``test`` (``test_by_length``, recorded with ``score_test``, then the
    mean over 7-12 operators)."""
    key = HISTORY_KEYS[split]
    steps = sorted(set(steps))
    counts = sorted({int(k) for _, h in runs for r in h for k in r.get(key, {})})
    head = ["run", "step", "checked at"] + [str(k) for k in counts] + ["all" if split == "valid" else "mean 7-12"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(counts) + 1)) + "|"]
    for name, history in runs:
        for step in steps:
            done = [r for r in history if r["step"] <= step and r.get(key)]
            if not done:
                continue
            rec = done[-1]
            accs = [rec[key].get(str(k)) for k in counts]
            cells = ["–" if a is None else f"{100 * a:.1f}" for a in accs] + [_last_cell(rec, key)]
            lines.append("| " + " | ".join([name, f"{step:,}", f"{rec['step']:,}", *cells]) + " |")
    return "\n".join(lines)


def _last_cell(rec: dict, key: str) -> str:
    if key == "valid_by_ops":
        return f"{100 * rec['valid_accuracy']:.1f}"
    unseen = [v for k, v in rec[key].items() if int(k) in UNSEEN]
    return f"{100 * statistics.fmean(unseen):.1f}" if unseen else "–"
