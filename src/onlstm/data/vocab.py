"""A word vocabulary with ``<unk>`` handling, stored as a JSON list of words."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ..checkpoint import CheckpointError, read_json, write_json

EOS, UNK = "<eos>", "<unk>"


class Vocab:
    def __init__(self, words: Iterable[str]):
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            dup = [w for w, n in Counter(self.words).items() if n > 1][:5]
            raise ValueError(f"vocabulary has duplicate words: {dup}")

    @classmethod
    def build(cls, sentences: Iterable[Iterable[str]], specials=(EOS, UNK)) -> Vocab:
        """Specials first, then words in order of first appearance (deterministic)."""
        seen = dict.fromkeys(specials)
        for s in sentences:
            for w in s:
                seen.setdefault(w)
        return cls(seen)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, w: str) -> bool:
        return w in self.index

    @property
    def unk_id(self) -> int | None:
        return self.index.get(UNK)

    def encode(self, words: Iterable[str]) -> tuple[list[int], int]:
        """Ids of ``words``, with unknown words mapped to ``<unk>``; returns ``(ids, n_unknown)``.

        Raises ``ValueError`` if a word is unknown and the vocabulary has no ``<unk>``.
        """
        ids, unknown = [], 0
        for w in words:
            i = self.index.get(w)
            if i is None:
                if self.unk_id is None:
                    raise ValueError(f"word {w!r} is not in the vocabulary, which has no {UNK} token")
                i, unknown = self.unk_id, unknown + 1
            ids.append(i)
        return ids, unknown

    def save(self, path: Path) -> None:
        write_json(Path(path), self.words)

    @classmethod
    def load(cls, path: Path) -> Vocab:
        words = read_json(Path(path))
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise CheckpointError(f"{path} must hold a JSON list of words")
        return cls(words)
