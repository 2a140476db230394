"""The language-model study's figure: validation perplexity against epoch, one colour per cell, each run faintly,
the mean over seeds with a band of ± one sample std (``onlstm lm compare`` writes it as ``curves.png``)."""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ..files import save_figure
from ..studies.stats import mean_std


def read_curve(log_csv: Path) -> list[tuple[int, float]]:
    """``(epoch, validation perplexity)`` per epoch from a run's ``log.csv`` (empty when it has none yet); a row
    without both numbers (a file cut short by a full disk, or edited) is left out: the curve is a view."""
    if not log_csv.is_file():
        return []
    with open(log_csv, newline="", encoding="utf-8", errors="replace") as f:
        rows = list(csv.DictReader(f))
    curve = []
    for row in rows:
        try:
            curve.append((int(row["epoch"]), float(row["valid_ppl"])))
        except (KeyError, TypeError, ValueError):
            continue
    return curve


def band(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float, float, int]]:
    """``(epoch, mean, std, runs)`` at every epoch some run reached, over the runs that reached it: a run still
    training adds nothing past its last epoch (nothing is projected); std is NaN where one run reached it."""
    by_epoch: dict[int, list[float]] = {}
    for curve in curves:
        for epoch, ppl in curve:
            by_epoch.setdefault(epoch, []).append(ppl)
    return [(e, *mean_std(v), len(v)) for e, v in sorted(by_epoch.items())]


def plot_validation_curves(cells: dict[str, list[tuple[list[tuple[int, float]], bool]]], path: Path) -> Path:
    """Write the figure; ``cells``: per cell, each run's curve and whether it finished."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for cell, runs in cells.items():
        curves = [c for c, _ in runs if c]
        if not curves:
            continue
        rows = band(curves)
        running = sum(1 for c, done in runs if c and not done)
        seeds = f"{len(curves)} seed" + ("s" if len(curves) > 1 else "")
        label = f"{cell} ({seeds}" + (f", {running} still training)" if running else ")")
        epochs, mean = [r[0] for r in rows], [r[1] for r in rows]
        (line,) = ax.plot(epochs, mean, marker="o", markersize=3, label=label)
        spread = [(r[0], r[1] - r[2], r[1] + r[2]) for r in rows if r[2] == r[2]]
        if spread:
            ax.fill_between([s[0] for s in spread], [s[1] for s in spread], [s[2] for s in spread],
                            color=line.get_color(), alpha=0.2)  # fmt: skip
        for curve in curves:
            ax.plot(*zip(*curve), color=line.get_color(), alpha=0.3, linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation perplexity (log scale)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        return save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)
