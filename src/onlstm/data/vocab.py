"""A word vocabulary with ``<unk>`` handling, stored as a JSON list of words."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ..checkpoint import CheckpointError, read_json
from ..errors import quote
from ..files import write_json

EOS, UNK = "<eos>", "<unk>"


class Vocab:
    def __init__(self, words: Iterable[str]):
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            dup = [w for w, n in Counter(self.words).items() if n > 1][:5]
            raise ValueError(f"vocabulary has duplicate words: {quote(dup)}")

    @classmethod
    def build(cls, sentences: Iterable[Iterable[str]], specials=(EOS, UNK)) -> Vocab:
        """Specials first, then words in order of first appearance (deterministic)."""
        return cls(dict.fromkeys([*specials, *(w for s in sentences for w in s)]))

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, w: str) -> bool:
        return w in self.index

    @property
    def unk_id(self) -> int | None:
        return self.index.get(UNK)

    def encode(self, words: Iterable[str]) -> tuple[list[int], int]:
        """``(ids, n_unknown)``: unknown words become ``<unk>``, or ``ValueError`` when there is no ``<unk>``."""
        words = list(words)
        ids = [self.index.get(w, -1) for w in words]
        if -1 in ids and self.unk_id is None:
            raise ValueError(f"word {words[ids.index(-1)]!r} is not in the vocabulary, which has no {UNK} token")
        return [self.unk_id if i == -1 else i for i in ids], ids.count(-1)

    def save(self, path: Path) -> None:
        write_json(Path(path), self.words)

    @classmethod
    def load(cls, path: Path) -> Vocab:
        words = read_json(Path(path))
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise CheckpointError(f"{path} must hold a JSON list of words")
        try:
            return cls(words)
        except ValueError as exc:  # a word twice: the file was edited or damaged
            raise CheckpointError(f"{path}: {exc}; the run's vocabulary is damaged") from None
