"""The 7 relations of MacCartney's natural logic, computed from truth sets.

For formulas ``A`` and ``B`` with truth sets ``SA`` and ``SB`` (subsets of the 64 assignments,
see :mod:`onlstm.logic.formulas`), the label is the first of these that holds:

====  ===================  ==========================================
``=``  equivalence          ``SA == SB``
``<``  forward entailment   ``SA`` is a strict subset of ``SB``
``>``  reverse entailment   ``SA`` is a strict superset of ``SB``
``^``  negation             disjoint and covering (``SB`` is the complement of ``SA``)
``|``  alternation          disjoint, not covering
``v``  cover                covering, not disjoint
``#``  independence         none of the above
====  ===================  ==========================================

For formulas that are neither always true nor always false the 7 cases are mutually exclusive,
so the order of the checks does not matter. It matters only for *degenerate* formulas:

* a contradiction (empty truth set) is a strict subset of every other set, so against any
  formula except another contradiction it gets ``<`` (and the other side ``>``) -- even against a
  tautology, where ``^`` would also hold; two contradictions are ``=``;
* a tautology (full truth set) is a strict superset of every other set: ``>`` (``<`` the other
  way round); two tautologies are ``=``.

In other words ``<`` / ``>`` mean exactly "strict subset / superset" in every case. The files of
Bowman et al. (2015) in the shared sample (400 lines) contain no tautology or contradiction,
and random formulas of 2-4 operators are degenerate often enough (a few percent) that the
original generator most likely excluded them; :mod:`onlstm.logic.generate` does the same by
default.
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
    """The relation label of formula ``a`` to formula ``b`` (see the module docstring)."""
    return relation_of_sets(truth_set(a), truth_set(b))


def label_index(label: str) -> int:
    """Class index of ``label`` in :data:`RELATIONS`; raises ``ValueError`` for an unknown label."""
    try:
        return RELATIONS.index(label)
    except ValueError:
        raise ValueError(f"unknown relation label {label!r}: use one of {' '.join(RELATIONS)}") from None
