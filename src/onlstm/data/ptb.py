"""Mikolov's Penn Treebank language-modelling text (and any corpus in the same format).

A corpus directory holds three whitespace-tokenised text files, one sentence per line:

    ptb.train.txt  ptb.valid.txt  ptb.test.txt        (or train.txt  valid.txt  test.txt)

Every line becomes its words followed by ``<eos>`` (empty lines give a lone ``<eos>``, as in the
reference code). The vocabulary is built from the training file only: ``<eos>``, ``<unk>``, then the
words in order of first appearance, so the same file always gives the same ids (PTB: 10,000 words).

**Closed vocabulary.** A training text that contains ``<unk>`` says that rare words were already
replaced (Mikolov's PTB does this); a valid/test word outside the training vocabulary then means the
files do not belong together, and loading stops with a message naming the word, file and line.
``oov="unk"`` maps such words to ``<unk>`` instead (counted in :attr:`Split.n_unknown`);
``oov="error"`` always stops; ``oov="auto"`` (default) stops only for a closed-vocabulary corpus
and maps to ``<unk>`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import OnlstmError
from .vocab import EOS, UNK, Vocab

SPLITS = ("train", "valid", "test")
OOV_POLICIES = ("auto", "error", "unk")


class CorpusError(OnlstmError, ValueError):
    """A corpus directory or file that cannot be used; the message says what is wrong and how to fix it."""


def split_file(data_dir: Path, split: str) -> Path:
    """The file of ``split`` in ``data_dir``: ``ptb.<split>.txt`` or ``<split>.txt``."""
    if split not in SPLITS:
        raise CorpusError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise CorpusError(
            f"data directory {data_dir} does not exist; pass --data-dir pointing at a folder "
            "with ptb.train.txt, ptb.valid.txt and ptb.test.txt (`onlstm data download ptb "
            "--to DIR` fetches them)"
        )
    candidates = [data_dir / f"ptb.{split}.txt", data_dir / f"{split}.txt"]
    for c in candidates:
        if c.is_file():
            return c
    raise CorpusError(
        f"{data_dir} has no {split} file (looked for {candidates[0].name} and {candidates[1].name}); "
        "a corpus directory needs ptb.train.txt, ptb.valid.txt and ptb.test.txt "
        "(or train.txt, valid.txt, test.txt)"
    )


def read_lines(path: Path) -> list[list[str]]:
    """Sentences of a text file, each as its words plus ``<eos>``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path} is not UTF-8 text ({e}); convert it, e.g. with iconv") from None
    except OSError as e:
        raise CorpusError(f"cannot read {path}: {e}") from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise CorpusError(f"{path} is empty (no words); a corpus file needs one tokenised sentence per line")
    return [line.split() + [EOS] for line in lines]


@dataclass
class Split:
    """One split as a single stream of ids (``ids`` is a 1-D int64 tensor)."""

    name: str
    path: Path
    ids: torch.Tensor
    n_lines: int
    n_unknown: int = 0

    @property
    def n_tokens(self) -> int:
        return int(self.ids.numel())


@dataclass
class Corpus:
    vocab: Vocab
    closed_vocab: bool  # the training text contains <unk>
    splits: dict[str, Split] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Split:
        return self.splits[name]

    def summary(self) -> str:
        parts = [
            f"{s.name} {s.n_tokens:,} tokens ({s.n_lines:,} lines"
            + (f", {s.n_unknown} mapped to {UNK})" if s.n_unknown else ")")
            for s in self.splits.values()
        ]
        return f"vocabulary {len(self.vocab):,} words ({'closed' if self.closed_vocab else 'open'}); " + "; ".join(
            parts
        )


def encode_split(
    name: str, path: Path, vocab: Vocab, closed_vocab: bool, oov: str = "auto", lines: list[list[str]] | None = None
) -> Split:
    """Read ``path`` (unless its ``lines`` are given) and encode it with ``vocab`` under the ``oov``
    policy (see the module docstring)."""
    if oov not in OOV_POLICIES:
        raise CorpusError(f"oov must be one of {OOV_POLICIES}, got {oov!r}")
    if lines is None:
        lines = read_lines(path)
    strict = oov == "error" or (oov == "auto" and closed_vocab)
    ids: list[int] = []
    unknown = 0
    unk = vocab.unk_id
    for lineno, words in enumerate(lines, 1):
        for w in words:
            i = vocab.index.get(w)
            if i is None:
                if strict or unk is None:
                    why = (
                        "the training text contains <unk>, so the corpus claims a closed vocabulary"
                        if closed_vocab and oov == "auto"
                        else f"oov policy is {oov!r}"
                    )
                    raise CorpusError(
                        f"{path}, line {lineno}: word {w!r} is not in the training vocabulary ({why}). "
                        f"Use the {name} file that belongs to this training file, replace rare words by <unk> "
                        "when preprocessing, or pass --oov unk to map unknown words to <unk>"
                    )
                i, unknown = unk, unknown + 1
            ids.append(i)
    return Split(name, Path(path), torch.tensor(ids, dtype=torch.int64), len(lines), unknown)


def load_corpus(data_dir: Path, oov: str = "auto", splits=SPLITS, vocab: Vocab | None = None) -> Corpus:
    """Read the corpus in ``data_dir``; the vocabulary comes from the training file unless ``vocab`` is given
    (then the training file is only read to learn whether the vocabulary is closed)."""
    if oov not in OOV_POLICIES:
        raise CorpusError(f"oov must be one of {OOV_POLICIES}, got {oov!r}")
    train_path = split_file(data_dir, "train")
    train_lines = read_lines(train_path)
    closed = any(UNK in words for words in train_lines)
    if vocab is None:
        vocab = Vocab.build(train_lines, specials=(EOS, UNK))
    corpus = Corpus(vocab, closed)
    for name in splits:
        if name == "train":
            corpus.splits[name] = encode_split(name, train_path, vocab, closed, oov, lines=train_lines)
        else:
            corpus.splits[name] = encode_split(name, split_file(data_dir, name), vocab, closed, oov)
    return corpus
