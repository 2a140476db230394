"""The greedy distance -> tree builder, :func:`build_tree`; re-exports the tree types and helpers of
:mod:`onlstm.data.trees` (the treebank reader needs them, and ``data`` never imports an experiment)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..data.trees import *  # noqa: F403  (the re-export)
from ..data.trees import Tree, _check_words


def build_tree(words: Sequence[str], distances: Sequence[float]) -> Tree:
    """The reference greedy top-down builder (Shen et al. 2019) from per-word syntactic distances.

    Over ``words[lo:hi]`` take ``i``, the largest distance (the **leftmost** on ties, like
    ``numpy.argmax``); the tree is ``(build(words[lo:i]), (words[i], build(words[i+1:hi])))`` with empty
    parts dropped and one-element groups unwrapped (one word: the ``str`` itself). ``distances``: any 1-D
    sequence of numbers. Zero words, a length mismatch, a NaN distance (it would hide a broken model) or
    a non-string word raise ``ValueError``/``TypeError``.
    """
    words = list(words)
    dist = [float(d) for d in distances]
    if len(words) != len(dist):
        raise ValueError(f"build_tree needs one distance per word: got {len(words)} words and {len(dist)} distances")
    if not words:
        raise ValueError(
            "build_tree got zero words; a tree needs at least one word (skip empty sentences before building)"
        )
    bad = [i for i, d in enumerate(dist) if math.isnan(d)]
    if bad:
        raise ValueError(f"build_tree got NaN distances at word positions {bad[:10]}; check the model's output")
    _check_words(words)
    return _build(words, dist, 0, len(words))


def _build(words: list[str], dist: list[float], lo: int, hi: int) -> Tree:
    # An explicit stack, not recursion: a long sentence may nest as deep as it is long. Each frame is a
    # span and its split point; a span is assembled once both of its parts are built.
    built: dict[tuple[int, int], Tree] = {}
    stack: list[tuple[int, int, int]] = [(lo, hi, -1)]
    while stack:
        a, b, i = stack.pop()
        if b - a == 1:
            built[(a, b)] = words[a]
        elif i < 0:  # first visit: choose the split, build the parts first
            i = max(range(a, b), key=dist.__getitem__)  # max() keeps the first maximum: leftmost on ties
            stack.append((a, b, i))
            if i + 1 < b:
                stack.append((i + 1, b, -1))
            if i > a:
                stack.append((a, i, -1))
        else:
            right: Tree = words[i] if i + 1 == b else (words[i], built.pop((i + 1, b)))
            built[(a, b)] = right if i == a else (built.pop((a, i)), right)
    return built[(lo, hi)]
