"""Model-free baseline trees (left- and right-branching, balanced, random) and their scores, built with
the same tree type as the model's parses; their shapes are described in docs/parsing.md ("Baselines")."""

from __future__ import annotations

import functools
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
    return functools.reduce(lambda tree, w: (tree, w), words[1:], words[0])


def right_branching(words: Sequence[str]) -> Tree:
    """``(w1 (w2 (w3 w4)))``: every constituent ends at the last word."""
    words = _words(words, "right_branching")
    return functools.reduce(lambda tree, w: (w, tree), reversed(words[:-1]), words[-1])


def balanced(words: Sequence[str]) -> Tree:
    """Split at ``n // 2`` recursively, so for odd n the right part is one word longer (``(a (b c))``)."""
    return _split(_words(words, "balanced"), lambda n: n // 2)


def _split(words: list[str], pick: Callable[[int], int]) -> Tree:
    """Split ``words`` at ``pick(len(words))``, recursively, the left part first."""
    if len(words) == 1:
        return words[0]
    k = pick(len(words))
    return (_split(words[:k], pick), _split(words[k:], pick))


def random_tree(words: Sequence[str], rng: random.Random | int | None = None) -> Tree:
    """Split at a gap drawn uniformly from the ``n - 1`` gaps, recursively (left part first). ``rng``: a
    ``random.Random`` (consumed), an int seed, or ``None`` for seed 0."""
    words = _words(words, "random_tree")
    gen = rng if isinstance(rng, random.Random) else random.Random(0 if rng is None else rng)
    return _split(words, lambda n: gen.randint(1, n - 1))


BASELINES: dict[str, Callable[..., Tree]] = {
    "left-branching": left_branching,
    "right-branching": right_branching,
    "balanced": balanced,
    "random": random_tree,
}


def baseline_trees(name: str, sentences: Sequence[Sequence[str]], seed: int = 0) -> list[Tree]:
    """The baseline ``name`` (a key of :data:`BASELINES`) for every sentence (``'random'``: one
    ``random.Random(seed)`` for the sentences in order)."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; choose one of {sorted(BASELINES)}")
    build = functools.partial(random_tree, rng=random.Random(seed)) if name == "random" else BASELINES[name]
    return [build(s) for s in sentences]


def random_baseline_scores(gold: Sequence[object], draws: int = 5, seed: int = 0) -> dict[str, dict[str, float]]:
    """``{metric: {"mean", "std", "min", "max", "draws"}}`` of the random baseline's sentence, corpus and
    EVALB-style F1 over ``draws`` draws from one ``random.Random(seed)`` (``std``: sample, 0 for one draw)."""
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    gold = list(gold)
    sentences = [leaves(g) for g in gold]
    rng = random.Random(seed)
    scores = [f1_scores(gold, [random_tree(s, rng) for s in sentences]) for _ in range(draws)]
    values = {k: [sc[k].f1 for sc in scores] for k in scores[0]}  # sentence, corpus, EVALB-style
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
            out[name] = {k: v["mean"] for k, v in random_baseline_scores(gold, draws=draws, seed=seed).items()}
        else:
            out[name] = {k: sc.f1 for k, sc in f1_scores(gold, baseline_trees(name, sentences)).items()}
    return out
