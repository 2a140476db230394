"""Structural statistics of pair files, to compare generated data with Bowman et al.'s (docs/logic.md, "The bowman
mix"): :func:`file_statistics` per file, :func:`stats_table` for one data set or two side by side.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .data import Example
from .formulas import Binary, Formula, Not, Var
from .relations import RELATIONS


def shape_of(f: Formula) -> tuple[set[str], int, int, int]:
    """In one walk: the variables ``f`` uses, how deeply its ``and``/``or`` nodes nest (a variable or negated
    variable: 0), its ``not`` count and its tokens in the notation (``( not X )``: 3 more, ``( X ( op Y ) )``: 5)."""
    if isinstance(f, Var):
        return {f.name}, 0, 0, 1
    if isinstance(f, Not):
        used, depth, nots, tokens = shape_of(f.arg)
        return used, depth, nots + 1, tokens + 3
    assert isinstance(f, Binary)
    (lu, ld, ln, lt), (ru, rd, rn, rt) = shape_of(f.left), shape_of(f.right)
    return lu | ru, 1 + max(ld, rd), ln + rn, 5 + lt + rt


#: The statistics :func:`file_statistics` returns, with how each is printed (all are means or shares in %).
STATISTICS: dict[str, str] = {
    "pairs": "pairs in the file",
    "vars": "distinct variables per pair (both sides)",
    "over4": "% of pairs using more than 4 variables",
    "depth": "and/or nesting depth of a formula",
    "not": "% of operators that are 'not'",
    "tokens": "tokens per pair (both sides)",
    "smaller": "operator count of the smaller side",
    **{f"label{lab}": f"% label {lab}" for lab in RELATIONS},
}


@dataclass
class FileStats:
    """Sums over the pairs of one file; :meth:`values` turns them into the :data:`STATISTICS`."""

    pairs: int = 0
    vars: int = 0
    over4: int = 0
    depth: int = 0
    nots: int = 0
    ops: int = 0
    tokens: int = 0
    smaller: int = 0
    labels: Counter | None = None

    def add(self, ex: Example) -> None:
        (used_a, depth_a, nots_a, tokens_a), (used_b, depth_b, nots_b, tokens_b) = shape_of(ex.a), shape_of(ex.b)
        used = used_a | used_b
        self.pairs += 1
        self.vars += len(used)
        self.over4 += len(used) > 4
        self.depth += depth_a + depth_b
        self.nots += nots_a + nots_b
        self.ops += ex.ops_a + ex.ops_b
        self.tokens += tokens_a + tokens_b
        self.smaller += min(ex.ops_a, ex.ops_b)
        self.labels = (self.labels or Counter()) + Counter([ex.label])

    def values(self) -> dict[str, float]:
        n = max(self.pairs, 1)
        out = {"pairs": float(self.pairs), "vars": self.vars / n, "over4": 100 * self.over4 / n}
        out.update(depth=self.depth / (2 * n), tokens=self.tokens / n, smaller=self.smaller / n)
        out["not"] = 100 * self.nots / max(self.ops, 1)
        labels = self.labels or Counter()
        out.update({f"label{lab}": 100 * labels[lab] / n for lab in RELATIONS})
        return out


def file_statistics(examples: Iterable[Example]) -> dict[str, dict[str, float]]:
    """The :data:`STATISTICS` of each file (by file name, in the order read)."""
    sums: dict[str, FileStats] = defaultdict(FileStats)
    for ex in examples:
        sums[Path(ex.source).name].add(ex)
    return {name: s.values() for name, s in sums.items()}


def stats_table(ours: dict[str, dict[str, float]], theirs: dict[str, dict[str, float]] | None = None) -> str:
    """A Markdown table of the :data:`STATISTICS` per file: ``ours``, or ``ours / theirs`` for the files of both."""
    files = [f for f in ours if theirs is None or f in theirs]
    head = "| statistic | " + " | ".join(map(_cell, files)) + " |\n|---|" + "---|" * len(files) + "\n"
    rows = []
    for key, label in STATISTICS.items():
        cells = [_fmt(key, ours[f][key]) + ("" if theirs is None else f" / {_fmt(key, theirs[f][key])}") for f in files]
        rows.append(f"| {_cell(label)} | " + " | ".join(cells) + " |")
    return head + "\n".join(rows)


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: a ``|`` in it (the label of alternation, a file name) escaped, which
    would otherwise end the cell and shift the row's figures one column."""
    return text.replace("|", "\\|")


def _fmt(key: str, v: float) -> str:
    return (
        f"{v:,.0f}"
        if key == "pairs"
        else f"{v:.1f}"
        if key in ("over4", "not") or key.startswith("label")
        else f"{v:.2f}"
    )
