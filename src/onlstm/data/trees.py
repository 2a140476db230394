"""Trees as plain data: unlabelled trees (nested tuples of words), labelled ``nltk.Tree`` trees, bracket
strings, leaves and spans; read by the treebank reader and by parsing (docs/parsing.md, "Trees and
metrics"), and the distance -> tree builder :func:`build_tree` (parsing and
:meth:`onlstm.models.LanguageModel.parse` use it)."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import OnlstmError

if TYPE_CHECKING:
    from nltk.tree import Tree as LabelledTree

Tree = str | tuple
"""An unlabelled tree: a word (``str``) or a tuple of two or more sub-trees."""
Span = tuple[int, int]
LabelledSpan = tuple[int, int, str]

FORMATS = ("auto", "labelled", "unlabelled")
#: The deepest bracket nesting a labelled tree may have. A sentence's tree nests far less (the Penn Treebank's
#: deepest, a few dozen levels); nltk's trees recurse once or twice a level, and Python stops at 1,000 frames.
#: Unlabelled trees are read and scored without recursion, to any depth: a model's tree of a long line (`parsing
#: parse` of 250 words) nests deeper than this.
MAX_DEPTH = 200


def too_deep(where: str) -> str:
    """The message for a tree nested deeper than :data:`MAX_DEPTH` (``where``: e.g. ``at character 812``)."""
    return f"brackets nested deeper than {MAX_DEPTH} levels {where}: no sentence's tree nests so deep"


def labelled_tree_class() -> type[LabelledTree]:
    """``nltk.Tree``, imported at its first use: nltk takes most of a second to import, which every command
    would pay at start-up though most never meet a labelled tree."""
    from nltk.tree import Tree as Labelled

    return Labelled


def is_labelled(node: object) -> bool:
    """Whether ``node`` is an ``nltk.Tree``, asked without importing nltk: there is none before nltk is imported."""
    module = sys.modules.get("nltk.tree")
    return module is not None and isinstance(node, module.Tree)


def lazy_labelled_tree(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` under which ``LabelledTree`` (``nltk.Tree``) stays a name of ``module``, imported
    when it is asked for (this module and the parsing package that re-exports it use one)."""

    def module_getattr(name: str) -> Any:
        if name == "LabelledTree":
            return labelled_tree_class()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return module_getattr


__getattr__ = lazy_labelled_tree(__name__)


class TreeFormatError(OnlstmError, ValueError):
    """A bracket string or tree object that cannot be read as a tree; the message says where and why."""


def _check_words(words: Sequence[object]) -> None:
    for k, w in enumerate(words):
        if not isinstance(w, str):
            raise TypeError(f"words must be strings; word {k} is {type(w).__name__} {w!r}")


_NODE_TYPES = (tuple, list)  # nltk.Tree is a list subclass


def _not_a_tree(node: object) -> TypeError:
    return TypeError(
        f"a tree is made of str words and tuple/list/nltk.Tree nodes, found {type(node).__name__} {node!r}"
    )


def _nodes(tree: object) -> tuple[list[str], list[tuple[int, int, object]]]:
    """The words, and ``(start, end, node)`` for every constituent, children before parents."""
    words: list[str] = []
    out: list[tuple[int, int, object]] = []
    stack: list[tuple[object, int, bool]] = [(tree, 0, False)]  # no recursion: depth is not limited
    while stack:
        n, begin, done = stack.pop()
        if done:
            if len(words) == begin:
                raise TreeFormatError(f"a constituent without words at word position {begin}: {n!r}")
            out.append((begin, len(words), n))
        elif isinstance(n, str):
            words.append(n)
        elif isinstance(n, _NODE_TYPES):
            stack += [(n, len(words), True), *((c, 0, False) for c in reversed(list(n)))]
        else:
            raise _not_a_tree(n)
    return words, out


def span_info(tree: object) -> tuple[int, set[Span]]:
    """``(number of words, spans of >= 2 words including the whole sentence)`` in one walk."""
    words, nodes = _nodes(tree)
    return len(words), {(s, e) for s, e, _ in nodes if e - s >= 2}


def leaves(tree: object) -> list[str]:
    """The words of a tree from left to right (works for unlabelled trees and ``nltk.Tree``); a constituent
    without words is a :class:`TreeFormatError`, as in :func:`spans`."""
    return _nodes(tree)[0]


def spans(tree: object, *, include_root: bool = False, min_length: int = 2) -> set[Span]:
    """Set of ``(start, end)`` spans of the constituents of at least ``min_length`` words, the
    whole-sentence span ``(0, n)`` only with ``include_root`` (the defaults are the convention of
    :func:`onlstm.parsing.metrics.sentence_f1`)."""
    words, nodes = _nodes(tree)
    return {(s, e) for s, e, _ in nodes if e - s >= min_length and (include_root or (s, e) != (0, len(words)))}


def strip_function_tags(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``, ``ADVP|PRT`` -> ``ADVP``; labels starting with ``-``
    (``-NONE-``, ``-LRB-``) are returned unchanged."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=|]", label, maxsplit=1)[0] or label


def _is_preterminal(node: object) -> bool:
    return len(node) == 1 and isinstance(node[0], str)  # type: ignore[arg-type]


def labelled_spans(tree: LabelledTree, *, include_root: bool = False, min_length: int = 2) -> set[LabelledSpan]:
    """Set of ``(start, end, label)`` for the phrases (not pre-terminals) of a labelled tree, labels
    without function tags; a ``+``-joined label (a collapsed unary chain, ``SBAR+S``) gives one entry
    per part, an empty label none. ``include_root``/``min_length`` as in :func:`spans`."""
    if not is_labelled(tree):
        raise TypeError(f"labelled_spans needs an nltk.Tree with labels, got {type(tree).__name__}")
    words, nodes = _nodes(tree)
    return {
        (s, e, strip_function_tags(part))
        for s, e, node in nodes
        if is_labelled(node) and not _is_preterminal(node)
        if e - s >= min_length and (include_root or (s, e) != (0, len(words)))
        for part in node.label().split("+")
        if part
    }


def word_depths(tree: object) -> list[int]:
    """For each word, how many distinct constituents of two or more words (the root included) contain it."""
    n, multi = span_info(tree)
    depth = [0] * n
    for s, e in multi:
        for k in range(s, e):
            depth[k] += 1
    return depth


def unlabel(tree: object) -> Tree:
    """Nested tuples from an ``nltk.Tree`` or nested lists: labels dropped, a one-child node replaced
    by its child (so pre-terminals become words and unary chains collapse). Built without recursion."""
    if isinstance(tree, str):
        return tree
    if not isinstance(tree, _NODE_TYPES):
        raise _not_a_tree(tree)
    stack, done = [(tree, iter(tree))], [[], []]  # the open nodes; the result, and the finished children of each
    while stack:
        node, children = stack[-1]
        child = next(children, None)
        if child is None:  # the node's children are done (no child of a tree is None)
            stack.pop()
            kids = done.pop()
            if not kids:
                raise TreeFormatError(f"a constituent without words: {node!r}")
            done[-1].append(kids[0] if len(kids) == 1 else tuple(kids))
        elif isinstance(child, str):
            done[-1].append(child)
        elif isinstance(child, _NODE_TYPES):
            stack.append((child, iter(child)))
            done.append([])
        else:
            raise _not_a_tree(child)
    return done[0][0]


_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_WORD = re.compile(r"[^\s()]+")


def to_nltk(tree: object) -> LabelledTree:
    """An unlabelled tree as an ``nltk.Tree`` with blank labels, every word under its own blank pre-terminal
    (nltk's pretty printer misplaces words that stand beside constituents). Built without recursion."""
    labelled, top = labelled_tree_class(), []
    stack: list[tuple[object, list]] = [(tree, top)]
    while stack:  # depth first, left to right: each node is appended to its parent in order
        node, parent = stack.pop()
        if isinstance(node, str):
            parent.append(labelled("", [node]))
            continue
        made = labelled("", [])
        parent.append(made)
        stack.extend((child, made) for child in reversed(list(node)))  # type: ignore[call-overload]
    return top[0]


#: Box-drawing characters whose line leaves a cell downwards, and those whose line enters it from above.
_DOWN, _UP = set("│┌┐┬┼├┤"), set("│└┘┴┼├┤")


def draw_tree(tree) -> str:
    """``tree`` drawn by nltk's printer with its blank label rows bridged: nltk leaves a node's label row
    (every other row) empty where a label would sit, so without labels the vertical lines broke there."""
    from nltk.tree import TreePrettyPrinter  # where nltk keeps it since 3.6 (the old module warns)

    rows = [list(r) for r in TreePrettyPrinter(to_nltk(tree)).text(unicodelines=True).splitlines()]
    width = max(map(len, rows))
    rows = [r + [" "] * (width - len(r)) for r in rows]
    for above, row, below in zip(rows, rows[1:], rows[2:]):  # top down: a bridged cell continues a line below
        for c, cell in enumerate(row):
            if cell == " " and above[c] in _DOWN and below[c] in _UP:
                row[c] = "│"
    lines = ["".join(r).rstrip() for r in rows]
    return "\n".join(line for line in lines if line)  # the root's label row is blank


def to_brackets(tree: object) -> str:
    """One-line bracket string of an unlabelled tree or an ``nltk.Tree``, of any depth; a word that is
    empty or holds spaces or parentheses raises ``ValueError``."""
    pieces: list[str] = []  # "(" + label + " " opens a labelled node, "(" an unlabelled one
    stack: list[object] = [tree]
    while stack:
        node = stack.pop()
        if node is _CLOSE:
            pieces.append(")")
        elif isinstance(node, str):
            if _WORD.fullmatch(node) is None:
                raise ValueError(
                    f"cannot write the word {node!r} in bracket notation (empty, or has spaces or parentheses)"
                )
            pieces.append(node)
        elif isinstance(node, _NODE_TYPES):
            pieces.append(f"({node.label()} " if is_labelled(node) else "(")
            stack += [_CLOSE, *reversed(list(node))]
        else:
            raise _not_a_tree(node)
    return "".join(p if p == ")" or not i or pieces[i - 1][-1] in "( " else " " + p for i, p in enumerate(pieces))


_CLOSE = object()  # the end of a constituent on to_brackets' stack


def _generic(text: str) -> object:
    """Bracket string -> nested lists of str, outer single-child wrappers (``( (S ...) )``) removed."""
    stack: list[list] = [[]]
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise TreeFormatError(f"unbalanced brackets: ')' at character {m.start()} has no matching '('")
            node = stack.pop()
            if not node:
                raise TreeFormatError(f"empty bracket '()' ending at character {m.start()}")
            stack[-1].append(node)
        else:
            stack[-1].append(tok)
    if len(stack) > 1:
        raise TreeFormatError(f"unbalanced brackets: {len(stack) - 1} '(' never closed")
    top = stack[0]
    if not top:
        raise TreeFormatError("empty tree string")
    if len(top) > 1:
        raise TreeFormatError(f"expected one tree, found {len(top)} top-level items; put one bracketed tree per line")
    node = top[0]
    while isinstance(node, list) and len(node) == 1 and isinstance(node[0], list):
        node = node[0]
    return node


def _shape(node: object) -> tuple[bool, bool]:
    """(every bracket starts with a label and words appear only as ``(TAG word)``, and some phrase of
    that reading has two or more children); the second is False where the first is. Without recursion."""
    branches, stack = False, [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, list) or len(n) < 2 or not isinstance(n[0], str):
            return False, False
        if len(n) == 2 and isinstance(n[1], str):  # a pre-terminal (TAG word)
            continue
        branches = branches or len(n) > 2
        stack.extend(n[1:])
    return True, branches


def _depth(node: object) -> int:
    """How deep the brackets of ``node`` (nested lists) nest, counted without recursion."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        if isinstance(n, list):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in n)
    return deepest


def _as_labelled(node: object, labelled: type[LabelledTree]) -> LabelledTree:
    if len(node) == 2 and isinstance(node[1], str):  # type: ignore[arg-type]
        return labelled(node[0], [node[1]])  # type: ignore[index]
    return labelled(node[0], [_as_labelled(c, labelled) for c in node[1:]])  # type: ignore[index]


def parse_brackets(text: str, labelled: bool | None = None) -> Tree | LabelledTree:
    """Read one tree in bracket notation.

    ``labelled=False``: every token is a word (``((the cat) sat)`` -> ``(("the", "cat"), "sat")``).
    ``labelled=True``: an ``nltk.Tree``; every bracket must start with a label and words must sit in
    pre-terminals ``(TAG word)``. ``None`` (auto): labelled when the string has that shape **and** some
    phrase has two or more children (why: docs/parsing.md, "Reading brackets"). Raises
    :class:`TreeFormatError` for unbalanced or empty brackets and for several trees in one string.
    """
    node = _generic(text)
    shape, branches = _shape(node)
    if labelled is None:
        labelled = shape and branches
    if labelled:
        if not shape:
            raise TreeFormatError(
                "not a labelled tree: each bracket must start with a label and each word must sit in a "
                "pre-terminal '(TAG word)'; read it as unlabelled instead"
            )
        if _depth(node) > MAX_DEPTH:  # an nltk tree recurses once a level
            raise TreeFormatError(too_deep("in a labelled tree"))
        return _as_labelled(node, labelled_tree_class())
    return unlabel(node)


def detect_format(texts: Iterable[str]) -> str:
    """``'labelled'`` if the non-blank strings, taken together, pass :func:`parse_brackets`' auto test."""
    shapes = [_shape(_generic(t)) for t in texts if t.strip()]
    if shapes and all(shape for shape, _ in shapes) and any(branches for _, branches in shapes):
        return "labelled"
    return "unlabelled"


def parse_tree_lines(lines: Sequence[str], fmt: str = "auto", source: str = "<input>") -> list[Tree | LabelledTree]:
    """One tree per line, ``fmt`` (one of :data:`FORMATS`; auto: :func:`detect_format`) for all lines.
    Trailing blank lines are ignored; another blank line, or a line that is not a tree, raises
    :class:`TreeFormatError` naming ``source`` and the first such 1-based line."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    lines = list(lines)
    while lines and not lines[-1].strip():
        lines.pop()
    if fmt == "auto":
        try:
            fmt = detect_format(lines)
        except TreeFormatError:
            fmt = "unlabelled"  # the per-line pass below reports the faulty line
    out = []
    for k, line in enumerate(lines, 1):
        try:
            if not line.strip():  # detect_format skipped it
                raise TreeFormatError("empty line; write exactly one tree per line")
            out.append(parse_brackets(line, labelled=(fmt == "labelled")))
        except TreeFormatError as err:
            raise TreeFormatError(f"{source} line {k}: {err}") from None
    return out


def build_tree(words: Sequence[str], distances: Sequence[float]) -> Tree:
    """The reference greedy top-down builder (Shen et al. 2019) from per-word syntactic distances.

    Over ``words[lo:hi]`` take ``i``, the largest distance (the **leftmost** on ties, like
    ``numpy.argmax``); the tree is ``(build(words[lo:i]), (words[i], build(words[i+1:hi])))`` with empty
    parts dropped and one-element groups unwrapped (one word: the ``str`` itself). ``distances``: any 1-D
    sequence of numbers. Zero words, a length mismatch, a NaN distance (it would hide a broken model) or
    a non-string word raise ``ValueError``/``TypeError``.
    """
    words = list(words)
    dist = [float(d) for d in distances]
    if len(words) != len(dist):
        raise ValueError(f"build_tree needs one distance per word: got {len(words)} words and {len(dist)} distances")
    if not words:
        raise ValueError(
            "build_tree got zero words; a tree needs at least one word (skip empty sentences before building)"
        )
    bad = [i for i, d in enumerate(dist) if math.isnan(d)]
    if bad:
        raise ValueError(f"build_tree got NaN distances at word positions {bad[:10]}; check the model's output")
    _check_words(words)
    return _build(words, dist, 0, len(words))


def _build(words: list[str], dist: list[float], lo: int, hi: int) -> Tree:
    # An explicit stack, not recursion: a long sentence may nest as deep as it is long. Each frame is a
    # span and its split point; a span is assembled once both of its parts are built.
    built: dict[tuple[int, int], Tree] = {}
    stack: list[tuple[int, int, int]] = [(lo, hi, -1)]
    while stack:
        a, b, i = stack.pop()
        if b - a == 1:
            built[(a, b)] = words[a]
        elif i < 0:  # first visit: choose the split, build the parts first
            i = max(range(a, b), key=dist.__getitem__)  # max() keeps the first maximum: leftmost on ties
            stack.append((a, b, i))
            if i + 1 < b:
                stack.append((i + 1, b, -1))
            if i > a:
                stack.append((a, i, -1))
        else:
            right: Tree = words[i] if i + 1 == b else (words[i], built.pop((i + 1, b)))
            built[(a, b)] = right if i == a else (built.pop((a, i)), right)
    return built[(lo, hi)]
