"""Plot of accuracy against number of operators (the paper's logical-inference figure)."""
from __future__ import annotations

import math
from pathlib import Path

from .evaluate import LengthAccuracy


def plot_accuracy_by_length(rows: list[tuple[str, list[LengthAccuracy]]], path: str | Path,
                            train_max_ops: int | None = 6, title: str | None = None) -> Path:
    """Write a PNG (or any format matplotlib knows from the suffix) with one line per model.

    Several results per model: the line is the mean, the band ± one sample standard deviation,
    and each run is drawn faintly. A dashed vertical line marks the longest length trained on.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - matplotlib is a dependency
        raise RuntimeError(f"plotting needs matplotlib ({exc}); pip install matplotlib") from exc

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, results in rows:
        lengths = sorted({k for r in results for k in r.lengths})
        per_run = [[100 * r.accuracy(k) for k in lengths] for r in results]
        mean = [_mean([run[i] for run in per_run]) for i in range(len(lengths))]
        (line,) = ax.plot(lengths, mean, marker="o", label=f"{name} (n={len(results)})")
        if len(results) > 1:
            std = [_std([run[i] for run in per_run]) for i in range(len(lengths))]
            ax.fill_between(lengths, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                            color=line.get_color(), alpha=0.2)
            for run in per_run:
                ax.plot(lengths, run, color=line.get_color(), alpha=0.25, linewidth=0.8)
    if train_max_ops is not None:
        ax.axvline(train_max_ops + 0.5, color="grey", linestyle="--", linewidth=1)
        ax.text(train_max_ops + 0.6, ax.get_ylim()[0], " unseen lengths", va="bottom", color="grey", fontsize=8)
    ax.set_xlabel("number of operators")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def _std(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
