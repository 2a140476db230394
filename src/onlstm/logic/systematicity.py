r"""The systematicity splits of the Ordered Memory paper (Shen et al. 2019b) that ``logic holdout`` makes: which
training pairs a split holds out (docs/logic.md, "Systematicity splits").

A split names a pattern ``( OP ( not X ) )``: an ``and`` (or, for C, an ``and`` or an ``or``) whose right operand
is a negation. The paper writes the negated part as ``a`` (split A) or ``*``, any sub-formula (B and C); the variants
``B-var`` and ``C-var`` are the reading this project used before issue #50, which holds out only negated variables.
A pair is held out when either of its formulas contains the pattern.

**Why this is the published definition.** The public re-implementation that later papers report on
(JRC1995/Continuous-RvNN, ``inference/preprocess/process_PNLI_{A,B,C}.py``) holds out a pair when one side's text
matches ``.*\( and \( not a \) \).*`` (A), ``.*\( and \( not .* \) \).*`` (B) or ``.*\( (and|or) \( not .* \) \).*``
(C), with ``re.match`` (the leading and trailing ``.*`` make it a search). In Bowman et al.'s notation
(docs/logic.md, "Formulas and relations"):

* The tokens ``and``/``or`` occur only as ``( OP R )``, the second half of a binary formula ``( L ( OP R ) )``,
  so the text ``( OP ( not`` occurs exactly where a binary node with operator OP has a right operand that starts
  with ``( not``, i.e. that is a negation ``( not X )``.
* Such a node always writes ``( OP ( not X ) )``: the negation's ``)`` and then the ``)`` of ``( OP R )`` follow X.
  So B's and C's regexes match exactly when the text holds ``( OP ( not`` (the middle ``.*`` takes X, and X can be
  any sub-formula), which is :func:`contains_pattern` with any X.
* For A the regex asks for ``( and ( not a ) )``: the negated part is then a formula that starts with ``a`` and is
  followed by ``)``, which is the variable ``a`` alone (a formula that starts with a variable is that variable).

Negations on the left, ``( ( not X ) ( and Y ) )``, are not held out, in the published regexes as here: the
pattern is written with the negation on the right. ``tests/logic/test_systematicity.py`` checks the equivalence on
generated formulas and on Bowman et al.'s training files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .formulas import Binary, Formula, Not, Var


@dataclass(frozen=True)
class Split:
    """A systematicity split: hold out a formula with an ``OP`` in ``operators`` whose right operand is a negation
    ``( not X )`` with ``negated(X)`` true."""

    pattern: str  # as the paper writes it (``*``: any sub-formula, ``X``: any variable)
    operators: frozenset[str]
    negated: Callable[[Formula], bool]


def _any_formula(f: Formula) -> bool:
    return True


def _variable(f: Formula) -> bool:
    return isinstance(f, Var)


def _variable_a(f: Formula) -> bool:
    return f == Var("a")


AND, AND_OR = frozenset({"and"}), frozenset({"and", "or"})

#: The splits of ``logic holdout --split``: A, B and C as the Ordered Memory paper defines them, and B-var and C-var,
#: the reading this project used before issue #50 (only negated variables held out).
SPLITS: dict[str, Split] = {
    "A": Split("( and ( not a ) )", AND, _variable_a),
    "B": Split("( and ( not * ) )", AND, _any_formula),
    "C": Split("( and|or ( not * ) )", AND_OR, _any_formula),
    "B-var": Split("( and ( not X ) ), X a variable", AND, _variable),
    "C-var": Split("( and|or ( not X ) ), X a variable", AND_OR, _variable),
}


def contains_pattern(split: str, f: Formula) -> bool:
    """Whether ``f`` or one of its sub-formulas is ``( L ( OP ( not X ) ) )`` as the split ``split`` names it."""
    rule = SPLITS[split]
    stack = [f]
    while stack:  # a loop, not recursion: it is called twice per training pair
        node = stack.pop()
        if isinstance(node, Not):
            stack.append(node.arg)
        elif isinstance(node, Binary):
            right = node.right
            if node.op in rule.operators and isinstance(right, Not) and rule.negated(right.arg):
                return True
            stack += (node.left, right)
    return False


def held_out(split: str, a: Formula, b: Formula) -> bool:
    """Whether the split ``split`` holds out the pair ``(a, b)``: either side contains its pattern."""
    return contains_pattern(split, a) or contains_pattern(split, b)
