"""A bar chart of the paper's rows: one bar per evaluated model (all pairs) and the paper's two columns."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ..files import save_figure


def plot_rows(report: dict, path: Path) -> None:
    models = report["models"]
    if not models or not models[0]["rows"]:
        return  # no row of the paper in the data: nothing to draw
    rows = models[0]["rows"]
    series = [(f"[{i + 1}] {m['cell']}", [r["accuracy"] or 0.0 for r in m["rows"]]) for i, m in enumerate(models)]
    series += [("paper ON-LSTM", [r["paper_onlstm"] for r in rows]), ("paper LSTM", [r["paper_lstm"] for r in rows])]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) * len(series) / 2 + 1.5))
    for k, (label, values) in enumerate(series):
        ax.barh([i + k * width for i in range(len(rows))], values, height=width, label=label)
    ax.set_yticks([i + 0.4 - width / 2 for i in range(len(rows))])
    ax.set_yticklabels([r["row"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xlim(0, 1)
    ax.set_xlabel("accuracy (all pairs)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
