"""Scoring a language model's induced trees against a treebank (what ``onlstm parsing eval-parse`` prints):
per layer, next to the trivial baselines on the same sentences. The metrics themselves are in
:mod:`onlstm.parsing.metrics`."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..data.reader import TextReader
from ..data.treebank import normalise_word
from ..saved import LoadedRun
from .baselines import score_baselines
from .induce import sentence_distances, trees_from_distances
from .metrics import ParseEvaluation, evaluate

#: The paper's unsupervised-parsing figures (sentence-level F1, %), for the table's reference line.
PAPER_SOURCE = "Shen et al. 2019, Table 2: layer 2 of the 1150-unit PTB model, 5 seeds, full WSJ"
PAPER_F1 = {
    "WSJ10": {"ON-LSTM mean": 65.1, "ON-LSTM max": 66.8, "right-branching": 56.6},
    "WSJ test (section 23)": {"ON-LSTM mean": 47.7, "ON-LSTM max": 49.4, "right-branching": 39.8},
}


def paper_set(wsj10: bool, sections: list[str] | None) -> str | None:
    """The paper's set that an eval-parse selection matches: WSJ10 (``--wsj10``), the WSJ test set (``--sections
    23``, all lengths), else None."""
    if wsj10:
        return "WSJ10"
    if sections is not None and [str(int(s)) for s in sections] == ["23"]:
        return "WSJ test (section 23)"
    return None


@dataclass
class TreebankScores:
    rows: dict[str, ParseEvaluation]  # "layer N" -> scores of that layer's trees
    trees: dict[int, list]  # 0-based layer -> predicted trees, in treebank order
    baselines: dict[str, dict]
    sentences: int
    words: int
    unknown_words: int
    seconds: float  # time spent computing distances


def model_words(sentence, reader: TextReader) -> list[str]:
    """A gold sentence's words as the model reads them (docs/parsing.md, "eval-parse"): the treebank's own words
    in the case of the model's training text and with each run of digits as its number token, or kept when it
    has none. Mikolov's PTB reader gives the paper's normalisation (``The`` -> ``the``, ``3.5`` -> ``N.N``); a cased
    model with digits reads ``Paris`` and ``1,200`` as written, not ``paris`` and ``N,N`` (its ``<unk>``)."""
    if not sentence.raw_words:  # a sentence built without them: the normalised words
        return list(sentence.words)
    return [normalise_word(w, reader.lowercase, reader.number) for w in sentence.raw_words]


def score_treebank(
    lm: LoadedRun, bank, layers: list[int], batch_size: int = 128, random_draws: int = 5
) -> TreebankScores:
    """Distances of every treebank sentence (batched), the trees of each of ``layers`` (0-based), their
    scores against the labelled gold trees, and the baselines' scores."""
    sentences = [list(w) for w in bank.words]
    gold = bank.labelled_trees
    t0 = time.perf_counter()
    read = [model_words(s, lm.model.reader) for s in bank.sentences]
    forget, _, unknown = sentence_distances(lm.model, lm.vocab, read, batch_size)
    seconds = time.perf_counter() - t0
    rows, trees = {}, {}
    for layer in layers:
        trees[layer] = trees_from_distances(sentences, forget, layer)
        rows[f"layer {layer + 1}"] = evaluate(gold, trees[layer])
    baselines = score_baselines(gold, draws=random_draws)
    return TreebankScores(rows, trees, baselines, len(sentences), sum(len(s) for s in sentences), unknown, seconds)
