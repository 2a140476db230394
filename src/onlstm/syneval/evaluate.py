"""Scoring minimal pairs with a language model (:func:`score_items`) and the tables of the outcome
(:func:`summarize`); the convention: docs/syneval.md, "The scoring convention"."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from ..data.reader import PTB, TextReader
from ..data.vocab import EOS, UNK
from ..errors import OnlstmError
from ..models.prefix_tree import padded_token_logprobs as token_logprobs
from ..models.prefix_tree import prefix_token_logprobs
from .data import PAPER_ROWS, Item


class SynevalError(OnlstmError, ValueError):
    """An evaluation that cannot be done as asked (a model without ``<unk>``, a pair without a difference)."""


#: comparison name -> (first sentence, second sentence) of an item; "a>b" is correct when a scores higher.
COMPARISONS = {
    "g>u": ("grammatical", "ungrammatical"),
    "g>i": ("grammatical", "intrusive"),
    "i>u": ("intrusive", "ungrammatical"),
}
COMPARISON_NAMES = {name: " vs ".join(roles) for name, roles in COMPARISONS.items()}


def frame(sentence: str, period: bool, reader: TextReader = PTB, vocab: Collection[str] = ()) -> list[str]:
    """``<eos> w1 ... wn [.] <eos>`` for a sentence as ``reader`` (the model's) reads it with ``vocab``
    (:class:`~onlstm.data.reader.TextReader`: for PTB lower case, numbers as ``N``, punctuation not read); the
    ``.`` appended when ``period`` (a final ``.`` already read is kept once)."""
    words = reader.read(sentence, vocab)[0]
    if period and (not words or words[-1] != "."):
        words.append(".")
    return [EOS, *words, EOS]


class Encoder:
    """Maps framed sentences to ids with the model's vocabulary (an :class:`onlstm.data.vocab.Vocab`)."""

    def __init__(self, vocab, reader: TextReader = PTB):
        self.vocab, self.reader, self.period = vocab, reader, "." in vocab

    def unknown(self, tokens: Sequence[str]) -> list[str]:
        return [w for w in tokens if w not in self.vocab]

    def ids(self, tokens: Sequence[str]) -> list[int]:
        unknown = self.unknown(tokens)
        if unknown and self.vocab.unk_id is None:
            raise SynevalError(
                f"the model's vocabulary has no {UNK} token, so it cannot score {unknown[0]!r}; "
                "use a model trained with <unk> (any PTB model has one)"
            )
        return self.vocab.encode(tokens)[0]


@dataclass
class Outcome:
    """One comparison of one item."""

    item: Item
    comparison: str  # "g>u", "g>i" or "i>u"
    first: float  # score of the sentence that should win
    second: float
    covered: bool  # every word of both sentences is in the vocabulary
    position: int | None = None  # word_only: index (in the framed tokens) of the first differing token

    @property
    def correct(self) -> bool:
        return self.first > self.second


def comparisons(item: Item) -> list[str]:
    return ["g>i", "i>u", "g>u"] if item.intrusive is not None else ["g>u"]


def first_difference(a: Sequence[str], b: Sequence[str], where: str) -> int:
    """The first index ``k >= 1`` with ``a[k] != b[k]`` (framed tokens before ``<unk>`` mapping)."""
    for k in range(1, min(len(a), len(b))):
        if a[k] != b[k]:
            return k
    raise SynevalError(
        f"{where}: the two sentences are the same ({' '.join(a[1:-1])!r}), so --word-only has no "
        "word to compare; fix or remove the item"
    )


def score_items(
    model,
    vocab,
    items: Sequence[Item],
    *,
    word_only: bool = False,
    batch_size: int = 512,
    share_prefixes: bool = True,
    progress: Callable[[int], None] | None = None,
    reader: TextReader | None = None,
) -> tuple[list[Outcome], dict]:
    """Every comparison of every item, and facts about the run (``period``, ``oov`` word counts, ``sentences``
    scored, ``unique`` ones run). ``share_prefixes``: through prefix trees, else right-padded batches (the
    same scores). ``reader``: how the model reads English (default: ``model.reader``, else PTB's)."""
    enc = Encoder(vocab, reader if reader is not None else getattr(model, "reader", PTB))
    said = [s for item in items for s in item.sentences]
    # each distinct sentence once, in the order first said
    tokens = {s: frame(s, enc.period, enc.reader, vocab) for s in said}
    score = prefix_token_logprobs if share_prefixes else token_logprobs
    logprobs = dict(zip(tokens, score(model, [enc.ids(t) for t in tokens.values()], batch_size, progress)))
    outcomes = [_outcome(item, c, tokens, logprobs, enc, word_only) for item in items for c in comparisons(item)]
    oov = Counter(w for s in said for w in enc.unknown(tokens[s]))
    return outcomes, dict(period=enc.period, oov=dict(oov.most_common()), sentences=len(said), unique=len(tokens))


def _outcome(item: Item, comparison: str, tokens: dict, logprobs: dict, enc: Encoder, word_only: bool) -> Outcome:
    a, b = (getattr(item, role) or "" for role in COMPARISONS[comparison])
    covered = not enc.unknown(tokens[a]) and not enc.unknown(tokens[b])
    if not word_only:
        return Outcome(item, comparison, float(logprobs[a].sum()), float(logprobs[b].sum()), covered)
    k = first_difference(tokens[a], tokens[b], item.where)
    return Outcome(item, comparison, float(logprobs[a][k - 1]), float(logprobs[b][k - 1]), covered, k)


def tally(outcomes: Iterable[Outcome]) -> dict:
    """pairs, correct, accuracy; covered pairs, their correct count and accuracy (None when there are none)."""
    outcomes = list(outcomes)
    n, correct, covered = len(outcomes), sum(o.correct for o in outcomes), sum(o.covered for o in outcomes)
    covered_correct = sum(o.correct and o.covered for o in outcomes)
    return {
        "pairs": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
        "covered": covered,
        "covered_correct": covered_correct,
        "covered_accuracy": covered_correct / covered if covered else None,
    }


def summarize(outcomes: Sequence[Outcome]) -> dict:
    """Per case (and per condition within it) and per comparison, and the paper's rows."""
    by_case: dict = defaultdict(lambda: defaultdict(list))  # case -> comparison -> outcomes
    by_condition: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))  # case -> condition -> (same)
    for o in outcomes:
        by_case[o.item.case][o.comparison].append(o)
        by_condition[o.item.case][o.item.condition][o.comparison].append(o)
    cases = {
        case: {
            "comparisons": {c: tally(os) for c, os in comps.items()},
            "conditions": {
                cond: {c: tally(os) for c, os in by_cond.items()} for cond, by_cond in by_condition[case].items()
            },
        }
        for case, comps in by_case.items()
    }
    return {"cases": cases, "rows": paper_rows(by_case), "all": tally(outcomes)}


def paper_rows(by_case: dict) -> list[dict]:
    """The paper's rows that the data has at least one case of, pooled over the row's cases."""
    rows = []
    for group, name, cases, comparison, onlstm, lstm in PAPER_ROWS:
        present = [c for c in cases if comparison in by_case.get(c, {})]
        if present:
            pooled = [o for c in present for o in by_case[c][comparison]]
            rows.append(
                {
                    "group": group,
                    "row": name,
                    "cases": present,
                    "missing_cases": [c for c in cases if c not in present],
                    "comparison": comparison,
                    "paper_onlstm": onlstm,
                    "paper_lstm": lstm,
                    **tally(pooled),
                }
            )
    return rows


def outcome_record(o: Outcome) -> dict:
    """One comparison as JSON (what ``--out`` saves per pair)."""
    first, second = COMPARISONS[o.comparison]
    return {
        "case": o.item.case,
        "condition": o.item.condition,
        "comparison": o.comparison,
        "where": o.item.where,
        first: getattr(o.item, first) or "",
        second: getattr(o.item, second) or "",
        "score_first": o.first,
        "score_second": o.second,
        "correct": o.correct,
        "covered": o.covered,
        **({"position": o.position} if o.position is not None else {}),
    }
