"""A probabilistic grammar that writes sentences with their gold trees (``nltk.Tree`` in treebank form):
:class:`Grammar`, the treebank of ``onlstm demo``; why its rules look so, docs/parsing.md."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .trees import labelled_tree_class

if TYPE_CHECKING:
    from nltk.tree import Tree

# Each rule: (weight, right-hand side). The first rule of every non-terminal must not recurse: it is
# the only one used once the maximum depth is reached.
DEFAULT_RULES: dict[str, list[tuple[float, tuple[str, ...]]]] = {
    "S": [(0.85, ("NP", "VP")), (0.15, ("S", "CONJ", "S"))],
    "NP": [(0.45, ("DET", "N")), (0.2, ("DET", "ADJ", "N")), (0.15, ("NAME",)), (0.2, ("NP", "PP"))],
    "VP": [(0.2, ("VI",)), (0.35, ("VT", "NP")), (0.15, ("VP", "PP")), (0.15, ("VS", "SBAR")), (0.15, ("VP", "ADV"))],
    "PP": [(1.0, ("P", "NP"))],
    "SBAR": [(1.0, ("COMP", "S"))],
}

DEFAULT_LEXICON: dict[str, list[str]] = {
    "DET": ["the", "a", "every", "some", "no"],
    "N": ["dog", "cat", "bird", "teacher", "child", "farmer", "park", "house", "river", "garden", "book", "song"],
    "ADJ": ["old", "small", "happy", "green", "quiet", "clever"],
    "NAME": ["alice", "bob", "carol", "dave"],
    "VI": ["slept", "laughed", "ran", "waited"],
    "VT": ["saw", "liked", "chased", "found", "helped"],
    "VS": ["said", "thought", "knew", "heard"],
    "P": ["in", "on", "near", "with", "behind"],
    "COMP": ["that"],
    "CONJ": ["and", "but"],
    "ADV": ["quickly", "often", "again", "today"],
}


@dataclass
class Grammar:
    rules: dict[str, list[tuple[float, tuple[str, ...]]]] = field(default_factory=lambda: dict(DEFAULT_RULES))
    lexicon: dict[str, list[str]] = field(default_factory=lambda: dict(DEFAULT_LEXICON))
    start: str = "S"
    max_depth: int = 6
    min_words: int = 3
    max_words: int = 20

    def __post_init__(self):
        if self.start not in self.rules:
            raise ValueError(f"start symbol {self.start!r} has no rule")
        for lhs, options in self.rules.items():
            for _, rhs in options:
                for sym in rhs:
                    if sym not in self.rules and sym not in self.lexicon:
                        raise ValueError(
                            f"grammar rule {lhs} -> {' '.join(rhs)}: {sym!r} is neither a rule nor in the lexicon"
                        )
            if lhs in options[0][1]:
                raise ValueError(f"the first rule of {lhs} must not recurse (it ends the recursion at max_depth)")
        if not 1 <= self.min_words <= self.max_words:
            raise ValueError("need 1 <= min_words <= max_words")

    def _expand(self, sym: str, rng: random.Random, depth: int) -> Tree:
        if sym in self.lexicon:
            return labelled_tree_class()(sym, [rng.choice(self.lexicon[sym])])
        options = self.rules[sym]
        if depth >= self.max_depth:
            options = options[:1]
        r = rng.random() * sum(w for w, _ in options)
        for weight, rhs in options:  # noqa: B007 (the rhs where r runs out is the one chosen)
            r -= weight
            if r <= 0:
                break
        return labelled_tree_class()(sym, [self._expand(s, rng, depth + 1) for s in rhs])

    def sample(self, rng: random.Random, tries: int = 1000) -> Tree:
        """One tree whose sentence has between ``min_words`` and ``max_words`` words."""
        for _ in range(tries):
            tree = self._expand(self.start, rng, 0)
            if self.min_words <= len(tree.leaves()) <= self.max_words:
                return tree
        raise RuntimeError(
            f"no sentence of {self.min_words}-{self.max_words} words in {tries} draws; "
            "loosen the length limits or the rule weights"
        )

    def corpus(self, n: int, seed: int = 0) -> list[Tree]:
        rng = random.Random(seed)
        return [self.sample(rng) for _ in range(n)]
