"""Propositional formulas over ``a`` … ``f`` in the bracketed notation of Bowman et al. (2015): :func:`parse`,
:func:`to_text`, :func:`count_operators` and :func:`truth_set` (64-bit masks; docs/logic.md, "Formulas and relations").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from ..errors import OnlstmError

VARIABLES: tuple[str, ...] = ("a", "b", "c", "d", "e", "f")
BINARY_OPERATORS: tuple[str, ...] = ("and", "or")
OPERATORS: tuple[str, ...] = ("not",) + BINARY_OPERATORS
VOCABULARY: tuple[str, ...] = VARIABLES + OPERATORS + ("(", ")")

N_ASSIGNMENTS = 2 ** len(VARIABLES)  # 64
FULL_SET = (1 << N_ASSIGNMENTS) - 1  # truth set of a tautology
EMPTY_SET = 0  # truth set of a contradiction


#: Truth set of each variable: the assignments whose bit ``k`` is set, ``k`` the variable's number.
VARIABLE_TRUTH_SETS = {v: sum(1 << i for i in range(N_ASSIGNMENTS) if (i >> k) & 1) for k, v in enumerate(VARIABLES)}


class FormulaSyntaxError(OnlstmError, ValueError):
    """A string is not a formula in the notation (docs/logic.md, "Formulas and relations")."""


@dataclass(frozen=True, slots=True)
class Var:
    """A propositional variable, one of ``a`` … ``f``."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in VARIABLE_TRUTH_SETS:
            raise ValueError(f"unknown variable {self.name!r}: use one of {', '.join(VARIABLES)}")


@dataclass(frozen=True, slots=True)
class Not:
    """Negation ``( not X )``."""

    arg: Formula


@dataclass(frozen=True, slots=True)
class Binary:
    """Conjunction or disjunction ``( left ( op right ) )`` with ``op`` in ``and``/``or``."""

    op: str
    left: Formula
    right: Formula

    def __post_init__(self) -> None:
        if self.op not in BINARY_OPERATORS:
            raise ValueError(f"unknown binary operator {self.op!r}: use 'and' or 'or'")


Formula = Var | Not | Binary
for _kind in (Var, Not, Binary):
    _kind.__str__ = lambda f: to_text(f)  # type: ignore[method-assign,assignment]  # printed in the notation


def to_tokens(f: Formula) -> list[str]:
    """The tokens of ``f`` in the notation, e.g. ``['(', 'not', 'a', ')']``."""
    if isinstance(f, Var):
        return [f.name]
    if isinstance(f, Not):
        return ["(", "not", *to_tokens(f.arg), ")"]
    if isinstance(f, Binary):
        return ["(", *to_tokens(f.left), "(", f.op, *to_tokens(f.right), ")", ")"]
    raise TypeError(f"not a formula: {f!r} (expected Var, Not or Binary)")


def to_text(f: Formula) -> str:
    """``f`` in the notation, tokens joined by single spaces (inverse of :func:`parse`)."""
    return " ".join(to_tokens(f))


class _Parser:
    """Recursive-descent parser over a token list; raises :class:`FormulaSyntaxError`."""

    def __init__(self, tokens: list[str], text: str) -> None:
        self.tokens, self.text, self.pos = tokens, text, 0

    def fail(self, problem: str) -> FormulaSyntaxError:
        """An error naming the problem, the token position and the text."""
        return FormulaSyntaxError(f"{problem} at token {self.pos + 1} of {self.text!r}")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            want = f"{expected!r}" if expected else "a formula"
            raise self.fail(f"unbalanced brackets or truncated formula: expected {want} but the text ended")
        if expected is not None and tok != expected:
            raise self.fail(f"expected {expected!r}, found {tok!r}")
        self.pos += 1
        return tok

    def formula(self) -> Formula:
        tok = self.take()
        if tok in VARIABLE_TRUTH_SETS:
            return Var(tok)
        if tok != "(":
            raise self.fail(f"expected a variable or '(', found {tok!r}")  # tokenize() let only known tokens in
        if self.peek() == "not":
            self.take()
            arg = self.formula()
            self.take(")")
            return Not(arg)
        left = self.formula()
        if self.peek() != "(":
            found = "the end of the text" if self.peek() is None else repr(self.peek())
            raise self.fail(
                f"expected '(' before the operator, found {found}: binary formulas are written "
                f"( X ( and Y ) ) / ( X ( or Y ) ), negation ( not X )"
            )
        self.take("(")
        op = self.take()
        if op not in BINARY_OPERATORS:
            raise self.fail(f"expected 'and' or 'or' after '( X (', found {op!r}")
        right = self.formula()
        self.take(")")
        self.take(")")
        return Binary(op, left, right)


_KNOWN = frozenset(VOCABULARY)


def tokenize(text: str) -> list[str]:
    """Split ``text`` on single spaces; reject empty text, double/leading/trailing spaces and tabs."""
    if not text:
        raise FormulaSyntaxError("empty formula")
    tokens = text.split(" ")
    if _KNOWN.issuperset(tokens):  # the empty token (a double space) is not known either
        return tokens
    if "" in tokens:
        raise FormulaSyntaxError(
            f"tokens must be separated by single spaces (found a double, leading or trailing space) in {text!r}"
        )
    unknown = next(tok for tok in tokens if tok not in _KNOWN)
    raise FormulaSyntaxError(f"unknown token {unknown!r} in {text!r} (vocabulary: {' '.join(VOCABULARY)})")


#: One instance per variable: a formula is immutable, so its leaves can be shared (and need no check).
_VARS = {v: Var(v) for v in VARIABLES}


class _Malformed(Exception):
    """The fast reader met a token it does not expect here; :class:`_Parser` then reads the text again and names
    the problem."""


def _read(tokens: list[str], i: int) -> tuple[Formula, int]:
    """The formula that starts at ``tokens[i]`` and the index after it: the fast path of :func:`parse`, for
    well-formed text only (anything else ends in :class:`_Malformed`, ``IndexError`` or ``KeyError``). Reading a
    data directory parses half a million formulas: with this reader train0-6 read in half the time (CHANGELOG)."""
    tok = tokens[i]
    if tok != "(":
        return _VARS[tok], i + 1
    if tokens[i + 1] == "not":
        arg, j = _read(tokens, i + 2)
        if tokens[j] != ")":
            raise _Malformed
        return Not(arg), j + 1
    left, j = _read(tokens, i + 1)
    op = tokens[j + 1]
    if tokens[j] != "(" or op not in BINARY_OPERATORS:
        raise _Malformed
    right, k = _read(tokens, j + 2)
    if tokens[k] != ")" or tokens[k + 1] != ")":
        raise _Malformed
    return Binary(op, left, right), k + 2


def parse(text: str) -> Formula:
    """Parse one formula written in the notation; ``to_text(parse(s)) == s`` for every valid ``s``. Raises
    :class:`FormulaSyntaxError` naming the problem (docs/logic.md, "Formulas and relations")."""
    tokens = tokenize(text)
    try:
        return _parse_tokens(tokens, text)
    except RecursionError:  # both readers recurse once a level: a file line must not end in a traceback
        raise FormulaSyntaxError(
            f"nested too deeply to read (about {sys.getrecursionlimit()} levels or more) in a formula of "
            f"{len(tokens)} tokens"
        ) from None


def _parse_tokens(tokens: list[str], text: str) -> Formula:
    try:
        f, end = _read(tokens, 0)
        if end == len(tokens):
            return f
    except (_Malformed, IndexError, KeyError):
        pass
    p = _Parser(tokens, text)  # not well formed: the careful reader finds the problem and names it
    f = p.formula()
    if p.pos != len(p.tokens):
        raise p.fail(f"unexpected {p.tokens[p.pos]!r} after a complete formula (unbalanced brackets?)")
    return f


def count_operators(f: Formula) -> int:
    """Number of operators (``and`` + ``or`` + ``not``) in ``f``."""
    # walked directly, not through to_tokens: every data line counts two formulas, and building their token
    # lists made reading a data directory about 20% slower
    if isinstance(f, Var):
        return 0
    if isinstance(f, Not):
        return 1 + count_operators(f.arg)
    if isinstance(f, Binary):
        return 1 + count_operators(f.left) + count_operators(f.right)
    raise TypeError(f"not a formula: {f!r} (expected Var, Not or Binary)")


def count_operators_text(text: str) -> int:
    """Operator count of a formula string without parsing it (its operator tokens). Counted as substrings: no
    other token of the vocabulary holds ``not``, ``and`` or ``or``, and the search runs in C (reading a data
    directory counts half a million formulas; walking their trees took a fifth of the time)."""
    return text.count("not") + text.count("and") + text.count("or")


def truth_set(f: Formula) -> int:
    """The truth set of ``f`` over the 64 assignments, as a 64-bit integer mask."""
    if isinstance(f, Var):
        return VARIABLE_TRUTH_SETS[f.name]
    if isinstance(f, Not):
        return FULL_SET ^ truth_set(f.arg)
    left, right = truth_set(f.left), truth_set(f.right)
    return left & right if f.op == "and" else left | right


def evaluate(f: Formula, assignment: dict[str, bool]) -> bool:
    """Truth value of ``f`` under ``assignment`` (a dict variable -> bool; missing variables are False)."""
    if isinstance(f, Var):
        return bool(assignment.get(f.name, False))
    if isinstance(f, Not):
        return not evaluate(f.arg, assignment)
    if f.op == "and":
        return evaluate(f.left, assignment) and evaluate(f.right, assignment)
    return evaluate(f.left, assignment) or evaluate(f.right, assignment)


def assignment_index(assignment: dict[str, bool]) -> int:
    """The bit position of ``assignment`` in a truth set (variable ``k`` true <=> bit ``k`` set)."""
    return sum(1 << k for k, v in enumerate(VARIABLES) if assignment.get(v, False))
