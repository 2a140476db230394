"""The one verdict rule of the studies (``logic compare``, ``lm compare``): two cells' seeds compared by the
difference of their means and its standard error."""

from __future__ import annotations

import math


def mean_std(values: list[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (NaN with fewer than 2 values)."""
    mean = sum(values) / len(values) if values else math.nan
    if len(values) < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def seed_difference(first: list[float], other: list[float], higher_is_better: bool = True) -> dict:
    """``first``'s mean minus ``other``'s over seeds, with its standard error ``sqrt(s1²/n1 + s2²/n2)`` (sample
    variances) and the verdict for ``first``: ``ahead`` (better) or ``behind`` when the difference exceeds twice
    that error, else ``level``; ``None`` figures with fewer than 2 seeds on a side."""
    a, b = [x for x in first if x == x], [x for x in other if x == x]  # NaN: nothing scored
    out: dict = {"seeds": [len(a), len(b)], "difference": None, "se": None, "verdict": None}
    if len(a) < 2 or len(b) < 2:
        out["verdict"] = "not decided: fewer than 2 scored seeds on a side"
        return out
    (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
    diff, se = ma - mb, math.sqrt(sa**2 / len(a) + sb**2 / len(b))
    better = diff if higher_is_better else -diff
    verdict = "ahead" if better > 2 * se else "behind" if better < -2 * se else "level"
    return out | {"difference": diff, "se": se, "verdict": verdict}
