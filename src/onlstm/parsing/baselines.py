"""Model-free baseline trees, built with the same tree type as the model's parses.

Each baseline takes the words of one sentence and returns an unlabelled binary tree (nested tuples; a
one-word sentence is the word).  Zero words raise ``ValueError``.

* :func:`left_branching`  ``(((w1 w2) w3) w4)``
* :func:`right_branching` ``(w1 (w2 (w3 w4)))`` -- the strong baseline for English.
* :func:`balanced`        split at ``n // 2`` (the left half gets the *smaller* part when n is odd:
  ``(w1 (w2 w3))`` for three words, ``((w1 w2) (w3 (w4 w5)))`` for five), recursively.
* :func:`random_tree`     recursively pick the split point uniformly among the ``n - 1`` gaps.  This is
  *not* uniform over binary trees (balanced-ish shapes are less likely than under the Catalan-uniform
  distribution; e.g. for 3 words each of the two trees has probability 1/2, for 4 words the balanced
  tree has 1/3 and each of the four others 1/6).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence

from .metrics import f1_scores
from .trees import Tree, _check_words, leaves


def _words(words: Sequence[str], name: str) -> list[str]:
    words = list(words)
    if not words:
        raise ValueError(f"{name} got zero words; a tree needs at least one word")
    _check_words(words)
    return words


def left_branching(words: Sequence[str]) -> Tree:
    """``(((w1 w2) w3) w4)``: every constituent starts at the first word."""
    words = _words(words, "left_branching")
    tree: Tree = words[0]
    for w in words[1:]:
        tree = (tree, w)
    return tree


def right_branching(words: Sequence[str]) -> Tree:
    """``(w1 (w2 (w3 w4)))``: every constituent ends at the last word."""
    words = _words(words, "right_branching")
    tree: Tree = words[-1]
    for w in reversed(words[:-1]):
        tree = (w, tree)
    return tree


def balanced(words: Sequence[str]) -> Tree:
    """Split at ``n // 2`` recursively: left part ``words[:n // 2]``, right part the rest, so for odd n
    the right part is one word longer (``(a (b c))``, ``((a b) (c (d e)))``)."""
    return _balanced(_words(words, "balanced"))


def _balanced(words: list[str]) -> Tree:
    if len(words) == 1:
        return words[0]
    mid = len(words) // 2
    return (_balanced(words[:mid]), _balanced(words[mid:]))


def random_tree(words: Sequence[str], rng: random.Random | int | None = None) -> Tree:
    """A random binary tree: split at a gap drawn uniformly from the ``n - 1`` gaps, recursively
    (left part first).  ``rng``: a ``random.Random`` (consumed), an int seed, or ``None`` for seed 0, so
    the result is reproducible unless you pass your own generator."""
    words = _words(words, "random_tree")
    if not isinstance(rng, random.Random):
        rng = random.Random(0 if rng is None else rng)
    return _random(words, rng)


def _random(words: list[str], rng: random.Random) -> Tree:
    if len(words) == 1:
        return words[0]
    k = rng.randint(1, len(words) - 1)
    return (_random(words[:k], rng), _random(words[k:], rng))


BASELINES: dict[str, Callable[..., Tree]] = {
    "left-branching": left_branching,
    "right-branching": right_branching,
    "balanced": balanced,
    "random": random_tree,
}


def baseline_trees(name: str, sentences: Sequence[Sequence[str]], seed: int = 0) -> list[Tree]:
    """The baseline ``name`` (a key of :data:`BASELINES`) for every sentence.  For ``'random'`` one
    ``random.Random(seed)`` is used for the sentences in order, so a call is reproducible."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; choose one of {sorted(BASELINES)}")
    if name == "random":
        rng = random.Random(seed)
        return [random_tree(s, rng) for s in sentences]
    return [BASELINES[name](s) for s in sentences]


_METRICS = ("sentence_f1", "corpus_f1", "evalb_f1")


def random_baseline_scores(gold: Sequence[object], draws: int = 5, seed: int = 0) -> dict[str, dict[str, float]]:
    """Mean and standard deviation of the random baseline's F1 over ``draws`` independent draws.

    One ``random.Random(seed)`` feeds all draws in turn (draw 1 of ``draws=5`` equals draw 1 of
    ``draws=10``).  Returns ``{metric: {"mean", "std", "min", "max"}}`` for sentence, corpus and
    EVALB-style F1 (fractions; ``std`` is the sample standard deviation, 0 for one draw).
    """
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    gold = list(gold)
    sentences = [leaves(g) for g in gold]
    rng = random.Random(seed)
    values: dict[str, list[float]] = {k: [] for k in _METRICS}
    for _ in range(draws):
        scores = f1_scores(gold, [random_tree(s, rng) for s in sentences])
        for k in _METRICS:
            values[k].append(scores[k].f1)
    return {
        k: {
            "mean": statistics.fmean(v),
            "std": statistics.stdev(v) if len(v) > 1 else 0.0,
            "min": min(v),
            "max": max(v),
            "draws": draws,
        }
        for k, v in values.items()
    }


def score_baselines(gold: Sequence[object], draws: int = 5, seed: int = 0) -> dict[str, dict[str, float]]:
    """Sentence, corpus and EVALB-style F1 (fractions) of every baseline against ``gold``; the random
    baseline is the mean over ``draws`` draws (:func:`random_baseline_scores`)."""
    gold = list(gold)
    sentences = [leaves(g) for g in gold]
    out: dict[str, dict[str, float]] = {}
    for name in BASELINES:
        if name == "random":
            rnd = random_baseline_scores(gold, draws=draws, seed=seed)
            out[name] = {k: v["mean"] for k, v in rnd.items()}
        else:
            scores = f1_scores(gold, baseline_trees(name, sentences))
            out[name] = {k: scores[k].f1 for k in _METRICS}
    return out
