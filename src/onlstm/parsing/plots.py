"""Pictures: per-layer master-gate distances of a sentence, and trees (induced, and gold when given)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ..files import save_figure
from .induce import sentence_distances, trees_from_distances
from .trees import Tree


def _layout(tree: Tree, x0: int = 0):
    """``(x, height, segments, next_x)``: leaves at x = 0..n-1, y = 0, a constituent above its children at
    their mean x; ``segments`` are ((x1, y1), (x2, y2)) lines."""
    if isinstance(tree, str):
        return float(x0), 0, [], x0 + 1
    xs, hs, segs, nx = [], [], [], x0
    for child in tree:
        cx, ch, cs, nx = _layout(child, nx)
        xs.append(cx)
        hs.append(ch)
        segs += cs
    x, h = sum(xs) / len(xs), max(hs) + 1
    segs += [((x, h), (cx, ch)) for cx, ch in zip(xs, hs)]
    return x, h, segs, nx


def draw_tree(ax, tree: Tree, words: Sequence[str], title: str) -> None:
    _, height, segs, _ = _layout(tree)
    for (x1, y1), (x2, y2) in segs:
        ax.plot([x1, x2], [y1, y2], color="tab:blue", lw=1.2)
    ax.set_xticks(range(len(words)), words, rotation=45, ha="right")
    ax.set_yticks([])
    ax.set_ylim(-0.3, height + 0.5)
    ax.set_xlim(-0.6, len(words) - 0.4)
    ax.set_title(title, fontsize=10)
    ax.spines[["top", "right", "left"]].set_visible(False)


def plot_sentence(
    model, vocab, words: Sequence[str], prefix: str | Path, gold: Tree | None = None, layer: int = 1
) -> list[Path]:
    """Distances of every layer for ``words`` and the tree induced from ``layer`` (0-based), beside
    ``gold`` when given; saved as ``prefix.png`` and ``prefix.svg``. Returns the two paths."""
    forget, inputs, _ = sentence_distances(model, vocab, [list(words)])
    df, di = forget[0], inputs[0]
    n_layers = df.shape[0]
    tree = trees_from_distances([list(words)], forget, layer)[0]
    cols = 2 if gold is not None else 1
    fig = plt.figure(figsize=(max(6.0, 0.6 * len(words)) * cols, 2.0 * n_layers + 3.2))
    grid = fig.add_gridspec(n_layers + 1, cols, height_ratios=[1] * n_layers + [1.8])
    x = range(len(words))
    for l in range(n_layers):
        ax = fig.add_subplot(grid[l, :])
        ax.bar([i - 0.2 for i in x], df[l].tolist(), width=0.4, label="master forget $d_f$")
        ax.bar([i + 0.2 for i in x], di[l].tolist(), width=0.4, label="master input $d_i$")
        ax.set_xticks(list(x), words if l == n_layers - 1 else [""] * len(words))
        ax.set_ylim(0, 1)
        ax.set_ylabel(f"layer {l + 1}")
        if l == 0:
            ax.legend(loc="upper right", fontsize=8, ncol=2)
            ax.set_title("distances on reading each word", fontsize=10)
    draw_tree(fig.add_subplot(grid[n_layers, 0]), tree, words, f"induced from layer {layer + 1}")
    if gold is not None:
        draw_tree(fig.add_subplot(grid[n_layers, 1]), gold, words, "gold")
    fig.tight_layout()
    paths = [save_figure(fig, Path(prefix).with_suffix(suffix), dpi=110) for suffix in (".png", ".svg")]
    plt.close(fig)
    return paths
