"""Unsupervised-parsing metrics: sentence/corpus/EVALB-style F1, label recall, average depth, the metrics
registered with :func:`register_metric`, and :func:`evaluate` for all of them. The conventions (spans, root,
averaging, the empty-set rule of the PRPN/ON-LSTM code) are tabulated in docs/parsing.md ("Trees and metrics")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from .trees import is_labelled, labelled_spans, span_info, word_depths

if TYPE_CHECKING:
    from .trees import LabelledTree


@dataclass(frozen=True)
class F1Score:
    """Precision, recall and F1 (fractions) with the counts behind them (for :func:`sentence_f1` the values
    are means over sentences and the counts totals; for the pooled metrics they come from the counts)."""

    precision: float
    recall: float
    f1: float
    sentences: int
    matched: int
    gold: int
    predicted: int
    convention: str = ""


@dataclass(frozen=True)
class LabelRecall:
    """Of ``gold`` gold constituents with this label, ``found`` are spans of the prediction."""

    label: str
    gold: int
    found: int
    recall: float


#: The metrics beyond the built-in ones, ``name -> metric(gold_trees, predicted_trees) -> float``: :func:`evaluate`
#: computes each (so ``onlstm parsing eval-parse`` and ``compare-trees`` report it, under ``more`` in JSON).
METRICS: dict[str, Callable[[list, list], float]] = {}


def register_metric(name: str, metric: Callable[[list, list], float], *, replace: bool = False) -> None:
    """Make ``metric`` part of every :func:`evaluate` (a name already there is an error unless ``replace``)."""
    if name in METRICS and not replace:
        raise ValueError(f"a metric named {name!r} is already registered; pass replace=True to replace it")
    METRICS[name] = metric


def unregister_metric(name: str) -> None:
    METRICS.pop(name, None)


def prf_from_counts(matched: int, predicted: int, gold: int) -> tuple[float, float, float]:
    """``(precision, recall, f1)`` with the PRPN/ON-LSTM empty-set rule: recall is 1 when ``gold == 0``;
    precision is 1 when both are 0 and 0 when only ``predicted`` is 0."""
    if matched > min(predicted, gold) or min(matched, predicted, gold) < 0:
        raise ValueError(f"inconsistent counts: matched={matched}, predicted={predicted}, gold={gold}")
    recall = 1.0 if gold == 0 else matched / gold
    precision = matched / predicted if predicted else float(gold == 0)
    f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return precision, recall, f1


_Info = tuple[int, set, set]  # (words, gold spans >= 2 words with root, predicted spans likewise)


def _infos(gold: Sequence[object], pred: Sequence[object]) -> list[_Info]:
    gold, pred = list(gold), list(pred)
    if len(gold) != len(pred):
        raise ValueError(
            f"got {len(gold)} gold trees and {len(pred)} predicted trees; they must be the same sentences in the same order"
        )
    if not gold:
        raise ValueError("no sentences to score (the gold list is empty)")
    out = []
    for k, (g, p) in enumerate(zip(gold, pred)):
        ng, gs = span_info(g)
        np_, ps = span_info(p)
        if ng != np_:
            raise ValueError(f"sentence {k}: the gold tree has {ng} words but the predicted tree has {np_}")
        out.append((ng, gs, ps))
    return out


def _counts(infos: list[_Info], include_root: bool) -> list[tuple[int, int, int]]:
    roots = [set() if include_root else {(0, n)} for n, _, _ in infos]
    return [(len((gs & ps) - r), len(ps - r), len(gs - r)) for (_, gs, ps), r in zip(infos, roots)]


def sentence_prf(gold_tree: object, pred_tree: object) -> tuple[float, float, float]:
    """``(precision, recall, f1)`` of one sentence under the :func:`sentence_f1` convention."""
    return prf_from_counts(*_counts(_infos([gold_tree], [pred_tree]), include_root=False)[0])


_CONVENTIONS = {
    "sentence_f1": "sentence-level mean; spans >= 2 words; root excluded",
    "corpus_f1": "corpus-level pooled; spans >= 2 words; root excluded",
    "evalb_f1": "EVALB-style corpus-level; spans >= 2 words; root counted",
}


def sentence_f1(gold: Sequence[object], pred: Sequence[object]) -> F1Score:
    """Sentence-level unlabelled F1, the PRPN/ON-LSTM/Kim et al. convention (the paper's WSJ10 number):
    per sentence, spans of >= 2 words without the whole-sentence span, then the mean over sentences."""
    return _score("sentence_f1", _counts(_infos(gold, pred), include_root=False))


def corpus_f1(gold: Sequence[object], pred: Sequence[object]) -> F1Score:
    """Corpus-level unlabelled F1: the spans of :func:`sentence_f1`, counts pooled over sentences."""
    return _score("corpus_f1", _counts(_infos(gold, pred), include_root=False))


def evalb_f1(gold: Sequence[object], pred: Sequence[object]) -> F1Score:
    """EVALB-style unlabelled F1: pooled counts over spans of >= 2 words, the root bracket counted."""
    return _score("evalb_f1", _counts(_infos(gold, pred), include_root=True))


def f1_scores(gold: Sequence[object], pred: Sequence[object]) -> dict[str, F1Score]:
    """``{"sentence_f1", "corpus_f1", "evalb_f1"}`` from one walk of the trees."""
    return _f1_scores(_infos(gold, pred))


def _f1_scores(infos: list[_Info]) -> dict[str, F1Score]:
    excluded = _counts(infos, include_root=False)  # sentence and corpus F1 count the same spans
    counted = _counts(infos, include_root=True)
    return {name: _score(name, counted if name == "evalb_f1" else excluded) for name in _CONVENTIONS}


def _score(name: str, counts: list[tuple[int, int, int]]) -> F1Score:
    """Convention ``name`` over per-sentence ``(matched, predicted, gold)`` counts."""
    m, p, g = (sum(c[i] for c in counts) for i in range(3))
    per = [prf_from_counts(*c) for c in counts] if name == "sentence_f1" else [prf_from_counts(m, p, g)]
    prf = [sum(x[i] for x in per) / len(per) for i in range(3)]  # sentence F1: the mean per sentence
    return F1Score(*prf, sentences=len(counts), matched=m, gold=g, predicted=p, convention=_CONVENTIONS[name])


def label_recall(gold: Sequence[LabelledTree], pred: Sequence[object]) -> dict[str, LabelRecall]:
    """Per gold label, the fraction of gold constituents (:func:`~onlstm.parsing.trees.labelled_spans`,
    spans as in :func:`sentence_f1`) whose span the prediction has; prediction labels are ignored.
    Ordered by gold count (largest first, then label name)."""
    gold = list(gold)
    return _label_recall(gold, _infos(gold, pred))


def _label_recall(gold: list, infos: list[_Info]) -> dict[str, LabelRecall]:
    found: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for k, (g, (_, _, ps)) in enumerate(zip(gold, infos)):
        if not is_labelled(g):
            raise TypeError(f"label_recall needs labelled (nltk.Tree) gold trees; gold tree {k} is {type(g).__name__}")
        for s, e, lab in labelled_spans(g):  # whole sentence already excluded there, so `ps` may keep it
            total[lab] += 1
            found[lab] += (s, e) in ps
    order = sorted(total, key=lambda lab: (-total[lab], lab))
    return {lab: LabelRecall(lab, total[lab], found[lab], found[lab] / total[lab]) for lab in order}


def average_depth(trees: Sequence[object], per_sentence: bool = False) -> float:
    """Mean :func:`~onlstm.parsing.trees.word_depths` over all words, or with ``per_sentence`` the mean of
    each sentence's mean (the ON-LSTM ``parse_comparison.py`` number)."""
    trees = list(trees)
    if not trees:
        raise ValueError("average_depth got no trees")
    depths = [word_depths(t) for t in trees]
    if per_sentence:
        return sum(sum(d) / len(d) for d in depths) / len(depths)
    return sum(sum(d) for d in depths) / sum(len(d) for d in depths)


@dataclass
class ParseEvaluation:
    """Every metric for one pairing (``label_recall`` is ``None`` for unlabelled gold trees; ``more``: the
    registered metrics, :data:`METRICS`)."""

    sentence: F1Score
    corpus: F1Score
    evalb: F1Score
    depth_gold: float
    depth_pred: float
    label_recall: dict[str, LabelRecall] | None = field(default=None)
    more: dict[str, float] = field(default_factory=dict)

    @property
    def sentences(self) -> int:
        return self.sentence.sentences

    def to_dict(self) -> dict:
        return {
            "sentences": self.sentences,
            **{name: asdict(sc) for name, sc in zip(_CONVENTIONS, (self.sentence, self.corpus, self.evalb))},
            "average_depth": {"gold": self.depth_gold, "predicted": self.depth_pred},
            "label_recall": None if self.label_recall is None else {k: asdict(v) for k, v in self.label_recall.items()},
            **({"more": dict(self.more)} if self.more else {}),
        }

    def format_table(self) -> str:
        lines = [
            f"sentences: {self.sentences}",
            "",
            f"{'metric':<14}{'P (%)':>8}{'R (%)':>8}{'F1 (%)':>8}   convention",
        ]
        for name, sc in (("sentence F1", self.sentence), ("corpus F1", self.corpus), ("EVALB-style", self.evalb)):
            lines.append(
                f"{name:<14}{100 * sc.precision:8.1f}{100 * sc.recall:8.1f}{100 * sc.f1:8.1f}   {sc.convention}"
            )
        lines += ["", f"average word depth: gold {self.depth_gold:.2f}, predicted {self.depth_pred:.2f}"]
        lines += [f"{name}: {value:.4g}" for name, value in self.more.items()]
        if self.label_recall is not None:
            lines += ["", f"{'label':<8}{'gold':>7}{'found':>7}{'recall (%)':>12}"]
            lines += [f"{r.label:<8}{r.gold:>7}{r.found:>7}{100 * r.recall:12.1f}" for r in self.label_recall.values()]
        return "\n".join(lines)


def evaluate(gold: Sequence[object], pred: Sequence[object]) -> ParseEvaluation:
    """All metrics at once.  Label recall is computed when every gold tree is an ``nltk.Tree``."""
    gold, pred = list(gold), list(pred)
    infos = _infos(gold, pred)
    scores = _f1_scores(infos).values()  # sentence, corpus, EVALB-style
    recall = _label_recall(gold, infos) if all(map(is_labelled, gold)) else None
    more = {name: float(metric(gold, pred)) for name, metric in METRICS.items()}
    return ParseEvaluation(*scores, average_depth(gold), average_depth(pred), recall, more)
