"""Plots of the logical-inference experiment: accuracy against number of operators (the paper's figure)
and validation accuracy against training step (where the plateau shows)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ..errors import counted
from ..files import save_figure
from ..studies.stats import mean_std
from .evaluate import LengthAccuracy


def plot_accuracy_by_length(
    rows: list[tuple[str, list[LengthAccuracy]]], path: str | Path, train_max_ops: int | None = 6
) -> Path:
    """Write a PNG (or any format matplotlib knows from the suffix) with one line per model: with several results
    the mean, a band of ± one sample std and each run faintly; a dashed line after ``train_max_ops``, the longest
    length trained on (the runs' ``max_train_ops``)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, results in rows:
        lengths = sorted({k for r in results for k in r.lengths})
        per_run = [[100 * r.accuracy(k) for k in lengths] for r in results]
        mean, std = zip(*(mean_std([x for x in at_length if x == x]) for at_length in zip(*per_run)))
        (line,) = ax.plot(lengths, mean, marker="o", label=f"{name} (n={len(results)})")
        if len(results) > 1:
            std = [0.0 if math.isnan(s) else s for s in std]  # fewer than two runs with pairs of that length
            low, high = [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)]
            ax.fill_between(lengths, low, high, color=line.get_color(), alpha=0.2)
            for run in per_run:
                ax.plot(lengths, run, color=line.get_color(), alpha=0.25, linewidth=0.8)
    if train_max_ops is not None:
        ax.axvline(train_max_ops + 0.5, color="grey", linestyle="--", linewidth=1)
        ax.text(train_max_ops + 0.6, ax.get_ylim()[0], " unseen lengths", va="bottom", color="grey", fontsize=8)
    return _save(fig, ax, path, "number of operators", "test accuracy (%)")


def plot_training_curves(runs: list[tuple[str, list[dict]]], path: str | Path) -> Path:
    """Validation accuracy (and training accuracy, dotted) against step; ``runs``: ``(model name, history
    records)`` per run, runs of the same model share a colour."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colours: dict[str, str] = {}
    for name, history in runs:
        if not history:
            continue
        steps, first = [r["step"] for r in history], name not in colours
        kw = {"label": f"{name} validation"} if first else {"color": colours[name]}
        (line,) = ax.plot(steps, [100 * r["valid_accuracy"] for r in history], **kw)
        colour = colours.setdefault(name, line.get_color())
        kw = {"label": f"{name} training (running, with dropout)"} if first else {}
        ax.plot(steps, [100 * r["train_accuracy"] for r in history], color=colour, linestyle=":", linewidth=1, **kw)
    return _save(fig, ax, path, "training step", "accuracy (%)", legend_size=8)


def plot_curves_by_ops(runs: list[tuple[str, list[dict]]], path: str | Path, max_train_ops: int | None = None) -> Path:
    """Validation accuracy against step, one panel per operator count, one colour per model (runs of the same
    model share it); from the ``valid_by_ops`` of each history record (runs without it are left out).
    Shaded spans mark the steps a curriculum trained on shorter pairs than ``max_train_ops`` (the runs'
    setting; when not given, the longest the first run reached)."""
    runs = [(name, [r for r in h if r.get("valid_by_ops")]) for name, h in runs]
    runs = [(name, h) for name, h in runs if h]
    if not runs:
        raise ValueError(
            "no run's history.json records validation accuracy by operator count (older runs do not); retrain them"
        )
    counts = sorted({int(k) for _, h in runs for r in h for k in r["valid_by_ops"]})
    cols = min(len(counts), 4)
    rows = math.ceil(len(counts) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), sharex=True, squeeze=False)
    colours: dict[str, str] = {}
    for ax, k in zip(axes.flat, counts):
        for name, history in runs:
            pts = [(r["step"], 100 * r["valid_by_ops"][str(k)]) for r in history if str(k) in r["valid_by_ops"]]
            kw = {"color": colours[name]} if name in colours else {"label": name}
            (line,) = ax.plot([x for x, _ in pts], [y for _, y in pts], linewidth=1, **kw)
            colours.setdefault(name, line.get_color())
        ax.set_title(counted(k, "operator"), fontsize=9)
        ax.grid(alpha=0.3)
    _shade_curriculum(list(axes.flat)[: len(counts)], runs[0][1], max_train_ops)
    for ax in list(axes.flat)[len(counts) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.supxlabel("training step", fontsize=9)
    fig.supylabel("validation accuracy (%)", fontsize=9)
    return _write(fig, path)


def _shade_curriculum(axes, history: list[dict], max_train_ops: int | None = None) -> None:
    """Shade, on every panel, the steps up to the last check made while the curriculum still held training to
    fewer than ``max_train_ops`` operators (the first run's curriculum: the runs of a comparison share their
    settings). A run stopped before its curriculum ended is shaded to its end; without ``max_train_ops``
    (unknown) the longest count the run reached stands for it."""
    bounds = [r["train_ops"] for r in history if r.get("train_ops") is not None]
    end = max_train_ops if max_train_ops is not None else max(bounds, default=0)
    short = [r["step"] for r in history if r.get("train_ops") is not None and r["train_ops"] < end]
    if short:
        for ax in axes:
            ax.axvspan(0, max(short), color="grey", alpha=0.12, linewidth=0)


def _save(fig, ax, path: str | Path, xlabel: str, ylabel: str, legend_size=None) -> Path:
    """Labels, grid and legend on ``ax``; write ``fig`` to ``path`` and close it."""
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)
    return _write(fig, path)


def _write(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (its folder created; the format from the suffix) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path
