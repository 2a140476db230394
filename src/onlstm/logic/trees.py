"""Trees of formulas: the tree a formula's brackets give (:func:`formula_tree`) and the tree an ON-LSTM
classifier's master gates induce for it (:func:`induced_trees`), both over the formula's tokens without
brackets, so that ``onlstm parsing compare-trees`` scores one against the other (docs/logic.md, "Induced trees").

The induced tree follows the Ordered Memory authors' protocol for this task: the encoder reads the formula with
its brackets, the greedy builder of :func:`onlstm.data.trees.build_tree` splits every token by its distance,
then the brackets are dropped from the tree. The distance is one of the two :class:`onlstm.nn.Distances`:
``forget`` (``1 - mean(master forget)``, the one ON-LSTM parsing uses) or ``input`` (``mean(master input)``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_packed_sequence

from ..checkpoint import CheckpointError
from ..data.trees import Tree, build_tree, leaves, parse_brackets, to_brackets
from ..device import evaluating
from ..encoders import has_distances
from ..errors import InputError
from ..files import write_text
from ..nn import Distances
from .data import Example
from .formulas import FormulaSyntaxError, count_operators_text, parse
from .model import TOKENS, LogicClassifier, check_batch_size, pad_batch, token_ids

BRACKETS = ("(", ")")
GATES = Distances._fields  # ("forget", "input"): which master gate's distances split a formula


def _group(parts: list[Tree]) -> Tree | None:
    """A constituent of ``parts``: none when empty, the part itself when alone (a tree never has one child)."""
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else tuple(parts)


def formula_tree(tokens: Sequence[str]) -> Tree:
    """The tree that a formula's brackets give, over its other tokens (unlabelled bracket notation,
    :func:`onlstm.data.trees.parse_brackets`): ``( a ( and b ) )`` -> ``('a', ('and', 'b'))``, ``( not a )`` ->
    ``('not', 'a')``; unbalanced brackets or no token are a ``ValueError``."""
    return parse_brackets(" ".join(tokens), labelled=False)  # type: ignore[return-value]


def without_brackets(tree: Tree) -> Tree | None:
    """``tree`` with its bracket tokens dropped, groups left with one part unwrapped; None when nothing is left."""
    if isinstance(tree, str):
        return None if tree in BRACKETS else tree
    return _group([t for t in map(without_brackets, tree) if t is not None])


def check_distances(model: LogicClassifier, where: object) -> None:
    """Refuse a classifier whose encoder has no master gates (the LSTMs): it induces no trees."""
    if not has_distances(model.config.cell):
        raise CheckpointError(
            f"{where}: a {model.config.cell!r} classifier has no master gates, so it induces no trees; "
            "use a run of an ON-LSTM encoder (cell onlstm)"
        )


def formula_list(formulas: Iterable[str]) -> list[str]:
    """``formulas`` (a list, a tuple, any iterable of texts) as a list; one text alone is refused: it would be read
    as formulas of one character each."""
    if isinstance(formulas, (str, bytes)) or not isinstance(formulas, Iterable):
        raise InputError(
            f"formulas must be a list of formulas (texts in the notation), got {type(formulas).__name__}; "
            "put one formula in a list: [text]"
        )
    return list(formulas)


@torch.no_grad()
def formula_distances(
    model: LogicClassifier, formulas: Sequence[str], batch_size: int = 512, gate: str = "forget"
) -> list[list[float]]:
    """Per formula (text in the notation), the ``gate`` distance (:data:`GATES`) of each of its tokens, brackets
    included, from the last ON-LSTM layer of ``model``'s encoder, in eval mode (the model's mode is restored)."""
    check_distances(model, "formula_distances")
    formulas = formula_list(formulas)
    check_batch_size(batch_size)
    if gate not in GATES:
        raise InputError(f"gate must be one of {', '.join(GATES)}, not {gate!r}")
    device, out = next(model.parameters()).device, []
    with evaluating(model):
        for i in range(0, len(formulas), batch_size):
            tokens, lengths = pad_batch([token_ids(f) for f in formulas[i : i + batch_size]])
            _, _, dist = model.encoder(model.embed(tokens.to(device), lengths), return_distances=True)
            padded, _ = pad_packed_sequence(getattr(dist, gate))  # (T, N, layers * directions)
            out += [padded[: int(n), k, -1].tolist() for k, n in enumerate(lengths)]
    return out


def induced_trees(
    model: LogicClassifier, formulas: Sequence[str], batch_size: int = 512, gate: str = "forget"
) -> list[Tree]:
    """The tree ``model``'s ``gate`` distances induce for each formula (text in the notation), over its tokens
    without brackets (see the module's docstring); a formula of one token is that token."""
    formulas, trees = formula_list(formulas), []
    for text, dist in zip(formulas, formula_distances(model, formulas, batch_size, gate), strict=True):
        tree = without_brackets(build_tree(text.split(" "), dist))
        assert tree is not None, f"{text!r} has no token but brackets"  # token_ids accepted it: it has variables
        trees.append(tree)
    return trees


@dataclass(frozen=True)
class FormulaTrees:
    """Formulas (text in the notation), their operator counts, the trees their brackets give and the trees a
    model induces, in the same order."""

    formulas: list[str]
    operators: list[int]
    gold: list[Tree]
    induced: list[Tree]

    def write(self, folder: Path) -> list[str]:
        """``gold.txt``, ``induced.txt`` (one tree per line, unlabelled bracket notation, the same formula on the
        same line), ``formulas.txt`` and ``operators.txt``, and the same trees by operator count,
        ``gold.K.txt``/``induced.K.txt``; returns the names written."""
        files = {"formulas.txt": self.formulas, "operators.txt": list(map(str, self.operators))}
        for k in [None, *sorted(set(self.operators))]:
            keep = [i for i, n in enumerate(self.operators) if k is None or n == k]
            tag = "" if k is None else f".{k}"
            files[f"gold{tag}.txt"] = [to_brackets(self.gold[i]) for i in keep]
            files[f"induced{tag}.txt"] = [to_brackets(self.induced[i]) for i in keep]
        for name, lines in files.items():
            write_text(folder / name, "".join(f"{line}\n" for line in lines))
        return list(files)


def distinct_formulas(examples: Iterable[Example], min_words: int = 3) -> list[str]:
    """Both sides of every pair, each formula once (in order of first appearance), keeping those of at least
    ``min_words`` tokens besides brackets: a tree of fewer has no constituent to score but the whole formula."""
    seen: dict[str, None] = {}
    for ex in examples:
        for text in (ex.text_a, ex.text_b):
            if text not in seen and sum(t not in BRACKETS for t in text.split(" ")) >= min_words:
                seen[text] = None
    return list(seen)


def formula_trees(
    model: LogicClassifier, formulas: Sequence[str], batch_size: int = 512, gate: str = "forget"
) -> FormulaTrees:
    """:class:`FormulaTrees` of ``formulas`` (written in the notation, docs/logic.md) under ``model``, induced from
    its ``gate`` distances; a text that is no formula is a :class:`FormulaSyntaxError` naming it."""
    formulas = formula_list(formulas)
    for k, text in enumerate(formulas):
        if not isinstance(text, str):
            raise FormulaSyntaxError(f"formula {k} is a {type(text).__name__}, not a text in the notation")
        try:
            parse(text)
        except FormulaSyntaxError as exc:
            raise FormulaSyntaxError(f"formula {k} ({text!r}) is not in the notation: {exc}") from None
    gold = [formula_tree(f.split(" ")) for f in formulas]
    induced = induced_trees(model, formulas, batch_size, gate)
    for text, g, p in zip(formulas, gold, induced, strict=True):
        assert leaves(g) == leaves(p), f"{text!r}: the two trees have other tokens"  # both drop the brackets only
    return FormulaTrees(list(formulas), [count_operators_text(f) for f in formulas], gold, induced)


assert set(BRACKETS) <= set(TOKENS)  # the notation's brackets are tokens the encoder reads
