"""How a model reads English (:class:`TextReader`): the convention of its training text (case, numbers,
punctuation, the unknown word, the end of a sentence), saved with the model (``config.json``, key ``text``) and
used by every entry that takes sentences, so that "The" reaches a lower-cased model as ``the`` and "1,200" a PTB
model as ``N`` (docs/lm.md, "How a model reads English")."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, fields

from ..errors import InputError, UserNote
from .vocab import EOS, UNK

#: The key of a run's ``config.json`` that holds its reader; ``text_normalisation`` ("ptb" or "lower") is the
#: older form, still read.
HEADER_KEY, LEGACY_KEY = "text", "text_normalisation"
SPLITS = ("ptb", "wikitext", "spaces")

_PUNCT = re.compile(r"^[^\w]+$")  # a token of punctuation only: ".", ",", "--", "``"
_NUMBER = re.compile(r"[\d.,/\\]*\d[\d.,/\\]*")  # 1987, 1,200, 3.5, 1\/2 (PTB escapes the slash)
_CLITICS = "n't|'s|'re|'ve|'ll|'d|'m"
_CLITIC = re.compile(rf"^(.+?)({_CLITICS})$", re.IGNORECASE)
_CLITIC_ALONE = re.compile(_CLITICS, re.IGNORECASE)
_LEAD = re.compile(r"^[^\w<]+")  # "<" starts the special tokens (<unk>), which are never split
_TRAIL = re.compile(r"[^\w>]+$")
# WikiText's marks inside a word (Merity et al. 2016): a hyphen between letters or digits, a comma or a point
# between digits, each a token of its own written with @ on both sides (``well @-@ known``, ``1 @,@ 200``)
_AT_MARK = re.compile(r"(?<=\w)-(?=\w)|(?<=\d)[.,](?=\d)")
#: Marks that end a sentence: a region of nothing else asks whether the sentence may end there (syntaxgym.py).
SENTENCE_END = frozenset(".?!")


class TextConventionNote(UserNote):
    """A model that does not say how its training text was written (a run older than the reader): it reads
    English as Mikolov's PTB text. ``onlstm`` commands print it as one line."""


@dataclass(frozen=True)
class TextReader:
    """The training text's convention. ``lowercase``: words lower-cased; ``number``: the token that stands for a
    number (Mikolov's PTB: ``N``), None to keep digits; ``punctuation``: punctuation tokens read (False: a token
    of punctuation only is dropped unless the vocabulary holds it, as PTB's ``$``, ``&`` and ``'``); ``split``:
    ``ptb`` (punctuation and clitics split off words, ``don't`` -> ``do n't``), ``wikitext`` (as ``ptb``, then
    WikiText's marks inside words: ``well-known`` -> ``well @-@ known``, ``1,200`` -> ``1 @,@ 200``) or
    ``spaces``; ``unknown``: the token a word outside the vocabulary becomes (None: there is none); ``end``: the
    end of a sentence."""

    lowercase: bool = True
    number: str | None = "N"
    punctuation: bool = False
    split: str = "ptb"
    unknown: str | None = UNK
    end: str = EOS

    def __post_init__(self) -> None:
        ok = isinstance(self.lowercase, bool) and isinstance(self.punctuation, bool) and self.split in SPLITS
        ok = ok and all(isinstance(v, str) and v for v in (self.end, self.number or "x", self.unknown or "x"))
        if not ok:
            raise InputError(
                f"a text reader needs lowercase and punctuation true or false, split one of {', '.join(SPLITS)}, "
                f"and number, unknown and end non-empty strings (number and unknown may be null); got {self}"
            )

    # ---------------------------------------------------------------------------------- saved with the model

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data, where: str = "the model's config.json") -> TextReader:
        """The reader saved under ``text``; :class:`~onlstm.errors.InputError` naming ``where`` when malformed."""
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) - names:
            extra = sorted(set(data) - names) if isinstance(data, dict) else type(data).__name__
            raise InputError(f"{where}: {HEADER_KEY!r} must be an object with the fields {sorted(names)}, got {extra}")
        try:
            return cls(**data)
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None

    @classmethod
    def detect(cls, words: Collection[str]) -> TextReader:
        """The convention a training vocabulary shows: lower case when no word has a capital letter; ``N`` for
        numbers when it holds ``N`` and no number written in digits; punctuation read when it holds one of
        ``. , ? !``; PTB's splitting (which keeps whole any word the vocabulary holds, so it suits any), with
        WikiText's marks inside words when it holds ``@-@``."""
        plain = [w for w in words if not (w.startswith("<") and w.endswith(">"))]
        number = "N" if "N" in words and not any(_NUMBER.fullmatch(w) for w in plain) else None
        lowercase = not any(w != w.lower() for w in plain if w != number)
        punctuation = any(p in words for p in (".", ",", "?", "!"))
        split = "wikitext" if "@-@" in words else "ptb"
        return cls(lowercase, number, punctuation, split, UNK if UNK in words else None)

    # ---------------------------------------------------------------------------------- reading

    def read(self, text: str | Sequence[str], vocab: Collection[str] = ()) -> tuple[list[str], list[str]]:
        """``(words, dropped)``: ``text`` (raw English; a list: words already split, normalised one by one) as the
        model reads it, and the punctuation tokens it does not read. ``vocab``: the model's words, which keep
        whole the tokens the training text had (``mr.``, ``u.s.``, ``$``)."""
        tokens = self.tokens(text, vocab) if isinstance(text, str) else [str(w) for w in text]
        kept, dropped = [], []
        for token in tokens:
            word = self.normalise(token)
            if not self.punctuation and _PUNCT.match(word) and word not in vocab:
                dropped.append(token)
            else:
                kept.append(word)
        return kept, dropped

    def normalise(self, word: str) -> str:
        """One token in the training text's case and number form (``N`` stays ``N``: reading twice is reading
        once)."""
        if self.number is not None and (word == self.number or _NUMBER.fullmatch(word)):
            return self.number
        return word.lower() if self.lowercase else word

    def tokens(self, text: str, vocab: Collection[str] = ()) -> list[str]:
        """``text`` split as the training text was: on white space, then (``ptb``) punctuation and clitics split
        off each word unless the vocabulary holds the word as it is."""
        words = text.split()
        if self.split == "spaces":
            return words
        return [piece for word in words for piece in self._split_word(word, vocab)]

    def _split_word(self, word: str, vocab: Collection[str]) -> list[str]:
        if self.normalise(word) in vocab or _CLITIC_ALONE.fullmatch(word):
            return [word]
        lead = _LEAD.match(word)
        head = list(lead.group()) if lead else []
        core = word[len(lead.group()) :] if lead else word
        tail: list[str] = []
        while (m := _TRAIL.search(core)) and self.normalise(core) not in vocab:
            tail = list(m.group()[-1]) + tail  # one mark at a time, so that "u.s." stays whole when known
            core = core[: m.end() - 1]
        clitic = _CLITIC.match(core) if core and self.normalise(core) not in vocab else None
        middle = [clitic.group(1), clitic.group(2)] if clitic else ([core] if core else [])
        if self.split == "wikitext":
            middle = [piece for part in middle for piece in self._at_marks(part, vocab)]
        return head + middle + tail

    def _at_marks(self, word: str, vocab: Collection[str]) -> list[str]:
        """``word`` with WikiText's marks inside it split off as tokens (``well-known`` -> ``well``, ``@-@``,
        ``known``), unless the vocabulary holds it whole."""
        if self.normalise(word) in vocab or not _AT_MARK.search(word):
            return [word]
        pieces, start = [], 0
        for m in _AT_MARK.finditer(word):
            pieces += [word[start : m.start()], f"@{m.group()}@"]
            start = m.end()
        return [*pieces, word[start:]]


#: Mikolov's PTB text: lower case, numbers as ``N``, no punctuation, ``<unk>``, ``<eos>`` at each line's end.
PTB = TextReader()
#: The older ``text_normalisation: lower`` (the demo's grammar text): lower case, words split on spaces.
_LEGACY = {"ptb": PTB, "lower": TextReader(True, None, True, "spaces")}


def reader_of(header: dict, where: str = "the model's config.json") -> tuple[TextReader, str | None]:
    """The reader a model's header (``config.json``) names, and a note when it names none (then PTB's)."""
    header = header if isinstance(header, dict) else {}
    if HEADER_KEY in header:
        return TextReader.from_dict(header[HEADER_KEY], where), None
    legacy = header.get(LEGACY_KEY)
    if legacy in _LEGACY:
        return _LEGACY[legacy], None
    note = (
        "the model does not say how its training text was written (an older run); it reads English as Mikolov's "
        "PTB text: lower case, numbers as N, punctuation not read"
    )
    return PTB, note


def is_sentence_end(text: str) -> bool:
    """Whether ``text`` is only sentence-final punctuation (``.``, ``?!``, ``."``): the end of the sentence."""
    marks = "".join(text.split()).rstrip("\"'’”)")
    return bool(marks) and set(marks) <= SENTENCE_END
