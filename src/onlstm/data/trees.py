"""Trees as plain data: bracket strings, leaves and spans (read by the treebank reader and by parsing;
the distance -> tree builder is :func:`onlstm.parsing.trees.build_tree`).

* **Unlabelled tree** (:data:`Tree`): a word is a ``str``; a constituent is a ``tuple`` of two or more
  sub-trees; a one-word sentence is just the word. ``(("the", "cat"), "sat")`` is written
  ``((the cat) sat)``. Readers also accept ``list`` for ``tuple`` (the reference code builds lists);
  every tree returned is made of tuples.
* **Labelled tree**: an :class:`nltk.Tree` whose words sit in pre-terminals ``(TAG word)``, e.g.
  ``(S (NP (DT the) (NN cat)) (VP (VBD sat)))``: gold trees, so label recall can be measured.

Spans are half-open word intervals ``(start, end)``: in ``((the cat) sat)``, ``(the cat)`` is ``(0, 2)``.
Span sets are ``set``\\ s, so a unary chain (two nodes over the same words) counts once. Building,
printing, leaves and spans walk trees without recursion (a sentence of thousands of words may nest as deep
as it is long); :func:`unlabel` and the bracket reader recurse (treebank trees are shallow).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from nltk.tree import Tree as LabelledTree

from ..errors import OnlstmError

Tree = str | tuple
"""An unlabelled tree: a word (``str``) or a tuple of two or more sub-trees."""
Span = tuple[int, int]
LabelledSpan = tuple[int, int, str]

FORMATS = ("auto", "labelled", "unlabelled")


class TreeFormatError(OnlstmError, ValueError):
    """A bracket string or tree object that cannot be read as a tree; the message says where and why."""


def _check_words(words: Sequence[object]) -> None:
    for k, w in enumerate(words):
        if not isinstance(w, str):
            raise TypeError(f"words must be strings; word {k} is {type(w).__name__} {w!r}")


# ----------------------------------------------------------------------------------------------------
# walking trees


_NODE_TYPES = (tuple, list)  # nltk.Tree is a list subclass


def _is_node(node: object) -> bool:
    return isinstance(node, _NODE_TYPES)


def _not_a_tree(node: object) -> TypeError:
    return TypeError(
        f"a tree is made of str words and tuple/list/nltk.Tree nodes, found {type(node).__name__} {node!r}"
    )


def _nodes(tree: object) -> tuple[int, list[tuple[int, int, object]]]:
    """Number of words, and ``(start, end, node)`` for every constituent (non-word node), children
    before parents (so the root comes last)."""
    out: list[tuple[int, int, object]] = []
    n = _collect(tree, 0, out)
    return n, out


def _collect(node: object, start: int, out: list) -> int:
    # Iterative, like to_brackets: the depth of a tree is not limited by Python's recursion limit.
    stack: list[tuple[object, int, bool]] = [(node, start, False)]
    pos = start
    while stack:
        n, begin, done = stack.pop()
        if done:
            if pos == begin:
                raise TreeFormatError(f"a constituent without words at word position {begin}: {n!r}")
            out.append((begin, pos, n))
            continue
        if isinstance(n, str):
            pos += 1
            continue
        if not isinstance(n, _NODE_TYPES):
            raise _not_a_tree(n)
        stack.append((n, pos, True))
        stack.extend((c, 0, False) for c in reversed(list(n)))
    return pos


def span_info(tree: object) -> tuple[int, set[Span]]:
    """``(number of words, spans of >= 2 words including the whole sentence)`` in one walk of the tree;
    the metrics derive every span convention from this."""
    n, nodes = _nodes(tree)
    return n, {(s, e) for s, e, _ in nodes if e - s >= 2}


def leaves(tree: object) -> list[str]:
    """The words of a tree from left to right (works for unlabelled trees and ``nltk.Tree``)."""
    if isinstance(tree, str):
        return [tree]
    out: list[str] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            out.append(node)
        elif _is_node(node):
            stack.extend(reversed(node))
        else:
            raise _not_a_tree(node)
    return out


def spans(tree: object, *, include_root: bool = False, min_length: int = 2) -> set[Span]:
    """Set of ``(start, end)`` word spans of the tree's constituents.

    ``include_root=False`` (default) drops the whole-sentence span ``(0, n)``; ``min_length=2`` (default)
    keeps only spans of at least two words.  The defaults are the PRPN/ON-LSTM convention of
    :func:`onlstm.parsing.metrics.sentence_f1`; EVALB-style scoring uses ``include_root=True``.
    For an ``nltk.Tree`` the pre-terminals ``(TAG word)`` are one-word spans, so ``min_length >= 2``
    leaves only phrases.
    """
    n, nodes = _nodes(tree)
    return {(s, e) for s, e, _ in nodes if e - s >= min_length and (include_root or (s, e) != (0, n))}


def strip_function_tags(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``, ``ADVP|PRT`` -> ``ADVP``; labels starting with ``-``
    (``-NONE-``, ``-LRB-``) are returned unchanged."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=|]", label, maxsplit=1)[0] or label


def _is_preterminal(node: object) -> bool:
    return len(node) == 1 and isinstance(node[0], str)  # type: ignore[arg-type]


def labelled_spans(tree: LabelledTree, *, include_root: bool = False, min_length: int = 2) -> set[LabelledSpan]:
    """Set of ``(start, end, label)`` for the phrases (not pre-terminals) of a labelled tree.

    Labels lose their function tags (:func:`strip_function_tags`).  A label joined with ``+`` (how
    :mod:`onlstm.data.treebank` records a collapsed unary chain, e.g. ``SBAR+S``) yields one entry per
    part, so every category of the chain is counted; in a tree that still has its unary chains, each
    node of the chain gives its own entry.  The empty label of a PTB root wrapper ``( (S ...) )`` is
    skipped.  ``include_root``/``min_length`` mean what they mean in :func:`spans`.
    """
    if not isinstance(tree, LabelledTree):
        raise TypeError(f"labelled_spans needs an nltk.Tree with labels, got {type(tree).__name__}")
    n, nodes = _nodes(tree)
    out: set[LabelledSpan] = set()
    for s, e, node in nodes:
        if not isinstance(node, LabelledTree) or _is_preterminal(node):
            continue
        if e - s < min_length or (not include_root and (s, e) == (0, n)):
            continue
        for part in node.label().split("+"):
            if part:
                out.add((s, e, strip_function_tags(part)))
    return out


def word_depths(tree: object) -> list[int]:
    """For each word, how many distinct constituents of two or more words contain it (the root included).

    For a binary tree this is the number of internal nodes above the word; unary chains and
    pre-terminals do not add depth.  A one-word sentence has depth ``[0]``.
    """
    n, multi = span_info(tree)
    depth = [0] * n
    for s, e in multi:
        for k in range(s, e):
            depth[k] += 1
    return depth


def unlabel(tree: object) -> Tree:
    """An unlabelled tree (nested tuples) from an ``nltk.Tree`` or nested lists/tuples.

    Pre-terminals ``(TAG word)`` become the word, labels are dropped, and a node with one child is
    replaced by that child (unary chains collapse), so the result has only words and tuples of >= 2.
    """
    if isinstance(tree, str):
        return tree
    if not _is_node(tree):
        raise _not_a_tree(tree)
    kids = [unlabel(c) for c in tree]
    if not kids:
        raise TreeFormatError(f"a constituent without words: {tree!r}")
    return kids[0] if len(kids) == 1 else tuple(kids)


# ----------------------------------------------------------------------------------------------------
# bracket strings

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_WORD = re.compile(r"[^\s()]+")


def to_brackets(tree: object) -> str:
    """One-line bracket string: ``((the cat) sat)`` for an unlabelled tree, a bare word for a one-word
    sentence, ``(S (NP (DT the) (NN cat)) (VP (VBD sat)))`` for an ``nltk.Tree``.

    Words containing whitespace or parentheses cannot be written unambiguously and raise ``ValueError``.
    Written without recursion, so a tree of any depth can be printed.
    """
    pieces: list[str] = []
    space = False  # whether the next piece is separated from the previous one
    stack: list[object] = [tree]
    while stack:
        node = stack.pop()
        if node is _CLOSE:
            pieces.append(")")
            space = True
            continue
        if isinstance(node, str):
            if _WORD.fullmatch(node) is None:
                raise ValueError(
                    f"cannot write the word {node!r} in bracket notation (empty, or has spaces or parentheses)"
                )
            pieces.append(" " + node if space else node)
            space = True
            continue
        if not _is_node(node):
            raise _not_a_tree(node)
        label = isinstance(node, LabelledTree)
        pieces.append((" (" if space else "(") + (str(node.label()) if label else ""))
        space = label
        stack.append(_CLOSE)
        stack.extend(reversed(list(node)))
    return "".join(pieces)


_CLOSE = object()  # the end of a constituent on to_brackets' stack


def _generic(text: str) -> object:
    """Bracket string -> nested lists of str (no interpretation yet).  Outer single-child wrappers such
    as the PTB's ``( (S ...) )`` are removed."""
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


def _labelled_shape(node: object) -> bool:
    """Every bracket starts with a label, and words appear only as ``(TAG word)``."""
    if not isinstance(node, list) or len(node) < 2 or not isinstance(node[0], str):
        return False
    if len(node) == 2 and isinstance(node[1], str):
        return True
    return all(isinstance(c, list) and _labelled_shape(c) for c in node[1:])


def _branches(node: object) -> bool:
    """Read as a labelled tree, does some phrase have two or more children?"""
    if not isinstance(node, list) or (len(node) == 2 and isinstance(node[1], str)):
        return False
    return len(node) > 2 or any(_branches(c) for c in node[1:])


def _as_labelled(node: object) -> LabelledTree:
    if len(node) == 2 and isinstance(node[1], str):  # type: ignore[arg-type]
        return LabelledTree(node[0], [node[1]])  # type: ignore[index]
    return LabelledTree(node[0], [_as_labelled(c) for c in node[1:]])  # type: ignore[index]


def parse_brackets(text: str, labelled: bool | None = None) -> Tree | LabelledTree:
    """Read one tree in bracket notation.

    ``labelled=False``: every token is a word, ``((the cat) sat)`` -> ``(("the", "cat"), "sat")``;
    single-child brackets are unwrapped, a bare word is a one-word sentence.
    ``labelled=True``: ``(S (NP (DT the) (NN cat)) (VP (VBD sat)))`` -> ``nltk.Tree``; every bracket
    must start with a label and words must sit in pre-terminals ``(TAG word)``.
    ``labelled=None`` (auto): labelled when the string has that shape **and** some phrase has two or
    more children.  The second condition is needed because an unlabelled binary tree such as
    ``(the (big cat))`` also has the labelled shape (read as a unary chain over the one word ``cat``);
    a binary unlabelled tree never has a labelled phrase with two children.  Auto therefore reads a
    labelled one-word tree like ``(S (NN yes))`` as unlabelled: pass ``labelled=True`` for such input
    (or use :func:`detect_format` over a whole file).
    In every mode an outer wrapper bracket with no label, as in the PTB's ``( (S ...) )``, is removed.
    Raises :class:`TreeFormatError` for unbalanced or empty brackets and for several trees in one string.
    """
    node = _generic(text)
    if labelled is None:
        labelled = _labelled_shape(node) and _branches(node)
    if labelled:
        if not _labelled_shape(node):
            raise TreeFormatError(
                "not a labelled tree: each bracket must start with a label and each word must sit in a "
                "pre-terminal '(TAG word)'; read it as unlabelled instead"
            )
        return _as_labelled(node)
    return unlabel(node)


def detect_format(texts: Iterable[str]) -> str:
    """``'labelled'`` if every string has the labelled shape and at least one has a branching labelled
    phrase (see :func:`parse_brackets`), else ``'unlabelled'``.  Blank strings are ignored."""
    nodes = [_generic(t) for t in texts if t.strip()]
    if nodes and all(_labelled_shape(n) for n in nodes) and any(_branches(n) for n in nodes):
        return "labelled"
    return "unlabelled"


def is_labelled(tree: object) -> bool:
    """True for an ``nltk.Tree`` (a labelled tree), False for a word or nested tuples/lists."""
    return isinstance(tree, LabelledTree)


def parse_tree_lines(lines: Sequence[str], fmt: str = "auto", source: str = "<input>") -> list[Tree | LabelledTree]:
    """Parse one tree per line.  ``fmt``: ``'labelled'``, ``'unlabelled'`` or ``'auto'`` (decided once
    for all lines with :func:`detect_format`).  Trailing blank lines are ignored; a blank line elsewhere,
    or a line that is not a tree, raises :class:`TreeFormatError` naming ``source`` and the 1-based line."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    lines = list(lines)
    while lines and not lines[-1].strip():
        lines.pop()
    for k, line in enumerate(lines, 1):
        if not line.strip():
            raise TreeFormatError(f"{source} line {k}: empty line; write exactly one tree per line")
    if fmt == "auto":
        try:
            fmt = detect_format(lines)
        except TreeFormatError:
            fmt = "unlabelled"  # the per-line pass below reports the faulty line
    out = []
    for k, line in enumerate(lines, 1):
        try:
            out.append(parse_brackets(line, labelled=(fmt == "labelled")))
        except TreeFormatError as err:
            raise TreeFormatError(f"{source} line {k}: {err}") from None
    return out


def iter_constituents(tree: object) -> Iterator[tuple[int, int, object]]:
    """``(start, end, node)`` for every constituent, children before parents (for custom metrics)."""
    return iter(_nodes(tree)[1])
