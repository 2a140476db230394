"""The 7 relations ``= < > ^ | v #`` of a formula pair, from their truth sets (docs/logic.md, "Formulas and
relations", also for degenerate formulas).
"""

from __future__ import annotations

from .formulas import FULL_SET, Formula, truth_set

#: The 7 labels in a fixed order (the order of the class indices a classifier should use).
RELATIONS: tuple[str, ...] = ("=", "<", ">", "^", "|", "v", "#")

#: Human-readable names of the labels.
RELATION_NAMES: dict[str, str] = {
    "=": "equivalence",
    "<": "forward entailment",
    ">": "reverse entailment",
    "^": "negation",
    "|": "alternation",
    "v": "cover",
    "#": "independence",
}

#: The relation of ``(B, A)`` given the relation of ``(A, B)``.
REVERSE: dict[str, str] = {"=": "=", "<": ">", ">": "<", "^": "^", "|": "|", "v": "v", "#": "#"}


def relation_of_sets(sa: int, sb: int, full: int = FULL_SET) -> str:
    """The relation label of two truth sets given as bitmasks (``full`` = the set of all assignments)."""
    if sa == sb:
        return "="
    inter = sa & sb
    if inter == sa:
        return "<"
    if inter == sb:
        return ">"
    covering = (sa | sb) == full
    if inter == 0:
        return "^" if covering else "|"
    return "v" if covering else "#"


def relation(a: Formula, b: Formula) -> str:
    """The relation label of formula ``a`` to formula ``b`` (docs/logic.md, "Formulas and relations")."""
    return relation_of_sets(truth_set(a), truth_set(b))
