"""Scoring a language model's induced trees against a treebank (what ``onlstm parsing eval-parse`` prints):
per layer, next to the trivial baselines on the same sentences. The metrics themselves are in
:mod:`onlstm.parsing.metrics`."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..runs import LoadedRun
from .baselines import score_baselines
from .induce import sentence_distances, trees_from_distances
from .metrics import ParseEvaluation, evaluate


@dataclass
class TreebankScores:
    rows: dict[str, ParseEvaluation]  # "layer N" -> scores of that layer's trees
    trees: dict[int, list]  # 0-based layer -> predicted trees, in treebank order
    baselines: dict[str, dict]
    sentences: int
    words: int
    unknown_words: int
    seconds: float  # time spent computing distances


def score_treebank(
    lm: LoadedRun, bank, layers: list[int], batch_size: int = 128, random_draws: int = 5
) -> TreebankScores:
    """Distances of every treebank sentence (batched), the trees of each of ``layers`` (0-based), their
    scores against the labelled gold trees, and the baselines' scores."""
    sentences = [list(w) for w in bank.words]
    gold = bank.labelled_trees
    t0 = time.perf_counter()
    forget, _, unknown = sentence_distances(lm.model, lm.vocab, sentences, batch_size)
    seconds = time.perf_counter() - t0
    rows, trees = {}, {}
    for layer in layers:
        trees[layer] = trees_from_distances(sentences, forget, layer)
        rows[f"layer {layer + 1}"] = evaluate(gold, trees[layer])
    baselines = score_baselines(gold, draws=random_draws)
    return TreebankScores(rows, trees, baselines, len(sentences), sum(len(s) for s in sentences), unknown, seconds)
