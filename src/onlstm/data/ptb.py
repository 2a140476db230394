"""Mikolov's Penn Treebank language-modelling text, and any corpus in its format (one tokenised sentence a
line, ``<eos>`` appended): :func:`load_corpus`, streamed, with the closed-vocabulary / ``oov`` rules of
docs/lm.md ("Data")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..errors import InputError, OnlstmError
from ..files import UTF8
from ..files import iter_lines as iter_text_lines
from .reader import TextReader
from .vocab import EOS, UNK, Vocab

SPLITS = ("train", "valid", "test")
VOCAB_FILE = "vocab.txt"
ENCODE_BLOCK = 1 << 20  # ids converted to the tensor this many at a time (bounds the Python list)
OOV_POLICIES = ("auto", "error", "unk")


class CorpusError(OnlstmError, ValueError):
    """A corpus directory or file that cannot be used; the message says what is wrong and how to fix it."""


def split_file(data_dir: Path, split: str) -> Path:
    """The file of ``split`` in ``data_dir``: ``ptb.<split>.txt`` or ``<split>.txt``."""
    if split not in SPLITS:
        raise CorpusError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        there = "is not a folder" if data_dir.exists() else "does not exist"
        raise CorpusError(
            f"data directory {data_dir} {there}; pass --data-dir pointing at a folder "
            "with ptb.train.txt, ptb.valid.txt and ptb.test.txt (`onlstm data download ptb "
            "--to DIR` fetches them)"
        )
    candidates = [data_dir / f"ptb.{split}.txt", data_dir / f"{split}.txt"]
    if found := next((c for c in candidates if c.is_file()), None):
        return found
    if odd := next((c for c in candidates if c.exists()), None):  # a FIFO or a device would never end
        raise CorpusError(f"{odd} is not a regular file; a corpus file must be a text file")
    raise CorpusError(
        f"{data_dir} has no {split} file (looked for {candidates[0].name} and {candidates[1].name}); "
        "a corpus directory needs ptb.train.txt, ptb.valid.txt and ptb.test.txt "
        "(or train.txt, valid.txt, test.txt)"
    )


def iter_lines(path: Path) -> Iterator[list[str]]:
    """The sentences of a text file one at a time (streamed), each as its words plus ``<eos>`` (unless the
    line already ends in ``<eos>``)."""
    path = Path(path)
    try:
        for line in iter_text_lines(path):
            words = line.split()
            if not words or words[-1] != EOS:
                words.append(EOS)
            yield words
    except InputError as e:  # a byte that is not UTF-8, named by its line
        raise CorpusError(str(e)) from None
    except OSError as e:
        raise CorpusError(f"cannot read {path}: {e}") from None


def _check_not_empty(path: Path, n_words: int) -> None:
    if n_words == 0:
        raise CorpusError(f"{path} is empty (no words); a corpus file needs one tokenised sentence per line")


def count_words(path: Path) -> tuple[Counter, int]:
    """Word counts of a file (``<eos>`` included) and its number of lines, in one streamed pass."""
    counts: Counter = Counter()
    n_lines = 0
    for n_lines, words in enumerate(iter_lines(path), 1):  # noqa: B007
        counts.update(words)
    _check_not_empty(path, sum(counts.values()) - counts[EOS])
    return counts, n_lines


def vocab_from_counts(counts: Counter, max_size: int = 0) -> Vocab:
    """``<eos>``, ``<unk>``, then the words in order of first appearance (``counts`` keeps it); with
    ``max_size`` only the ``max_size - 2`` most frequent words (ties: the first seen) are kept."""
    words = [w for w in counts if w not in (EOS, UNK)]
    if max_size:
        if max_size < 3:
            raise CorpusError(f"the vocabulary cap must be at least 3 (<eos>, <unk> and a word), got {max_size}")
        kept = set(sorted(words, key=lambda w: -counts[w])[: max_size - 2])  # a stable sort: ties in seen order
        words = [w for w in words if w in kept]
    return Vocab([EOS, UNK, *words])


def read_vocab_file(path: Path) -> Vocab:
    """A vocabulary file (whitespace-separated words, as Gulordava et al.'s ``vocab.txt``); ``<eos>`` and
    ``<unk>`` come first, added when the file lacks them."""
    try:
        words = Path(path).read_text(encoding=UTF8).split()
    except (OSError, UnicodeDecodeError) as e:
        raise CorpusError(f"cannot read the vocabulary file {path}: {e}") from None
    if not words:
        raise CorpusError(f"{path} is empty; a vocabulary file lists the words, one per line (or delete it)")
    dup = sorted(w for w, n in Counter(words).items() if n > 1)
    if dup:
        raise CorpusError(f"{path} lists {dup[:3]} more than once; a vocabulary file lists each word once")
    return Vocab([EOS, UNK, *(w for w in words if w not in (EOS, UNK))])


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
    text: TextReader  # the convention the training text shows (all its words, not the vocabulary's)
    limited: bool = False  # the vocabulary leaves training words out (a vocab.txt or a cap): they are <unk>
    splits: dict[str, Split] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Split:
        return self.splits[name]

    def summary(self) -> str:
        unknown = {s.name: f", {s.n_unknown} mapped to {UNK}" if s.n_unknown else "" for s in self.splits.values()}
        parts = [f"{s.name} {s.n_tokens:,} tokens ({s.n_lines:,} lines{unknown[s.name]})" for s in self.splits.values()]
        kind = "closed" if self.closed_vocab else "open"
        return f"vocabulary {len(self.vocab):,} words ({kind}); " + "; ".join(parts)


def encode_split(
    name: str,
    path: Path,
    vocab: Vocab,
    closed_vocab: bool,
    oov: str = "auto",
    limited: bool = False,
    total: int | None = None,
) -> Split:
    """Read ``path`` and encode it with ``vocab`` under the ``oov`` policy. ``limited``: the vocabulary
    deliberately leaves words out (a ``vocab.txt`` or a cap), so ``auto`` maps them to ``<unk>`` even in a
    closed-vocabulary corpus. The ids go block by block into one preallocated int64 tensor (no Python list of
    every id) of ``total`` tokens (``<eos>`` included), counted in a first pass over the file when not given."""
    if oov not in OOV_POLICIES:
        raise CorpusError(f"oov must be one of {OOV_POLICIES}, got {oov!r}")
    strict = oov == "error" or (oov == "auto" and closed_vocab and not limited)
    if total is None:
        total = sum(len(w) for w in iter_lines(path))
    ids = torch.empty(total, dtype=torch.int64)
    unk, get = vocab.unk_id, vocab.index.get
    why = "the training text contains <unk>, so the corpus claims a closed vocabulary"
    why = why if closed_vocab and oov == "auto" else f"oov policy is {oov!r}"
    pos = n_lines = unknown = 0
    block: list[int] = []
    for n_lines, words in enumerate(iter_lines(path), 1):
        line = [get(w, -1) for w in words]
        if -1 in line:
            if unk is None and not strict:  # oov "unk" asked for, but there is no <unk> to map to
                raise CorpusError(
                    f"{path}, line {n_lines}: word {words[line.index(-1)]!r} is not in the training vocabulary, "
                    "which has no <unk> to map it to: use the file that belongs to this training file, or put "
                    "<unk> in the training text for rare words"
                )
            if strict:
                raise CorpusError(
                    f"{path}, line {n_lines}: word {words[line.index(-1)]!r} is not in the training vocabulary "
                    f"({why}). Use the {name} file that belongs to this training file, replace rare words by "
                    "<unk> when preprocessing, or set oov to 'unk' to map unknown words to <unk>"
                )
            unknown += line.count(-1)
            line = [unk if i == -1 else i for i in line]
        block.extend(line)
        if len(block) >= ENCODE_BLOCK:
            ids[pos : pos + len(block)] = torch.tensor(block, dtype=torch.int64)
            pos, block = pos + len(block), []
    ids[pos : pos + len(block)] = torch.tensor(block, dtype=torch.int64)
    if total == n_lines:  # every line a lone <eos>
        _check_not_empty(Path(path), 0)
    return Split(name, Path(path), ids, n_lines, unknown)


def load_corpus(
    data_dir: Path, oov: str = "auto", splits=SPLITS, vocab: Vocab | None = None, max_vocab: int = 0
) -> Corpus:
    """Read the corpus in ``data_dir``, streaming each file. The vocabulary is ``vocab`` if given, else the
    folder's ``vocab.txt`` if any, else built from the training file, capped at ``max_vocab`` words when
    not 0; words a ``vocab.txt`` or the cap leave out become ``<unk>``."""
    train_path = split_file(data_dir, "train")
    counts, _ = count_words(train_path)
    closed = UNK in counts
    train_tokens = sum(counts.values())  # so that encoding the training file reads it once, not twice
    limited = vocab is None and (max_vocab > 0 or (Path(data_dir) / VOCAB_FILE).is_file())
    if vocab is None and (Path(data_dir) / VOCAB_FILE).is_file():
        vocab = read_vocab_file(Path(data_dir) / VOCAB_FILE)
        if max_vocab and len(vocab) > max_vocab:
            vocab = Vocab(vocab.words[:max_vocab])  # the file lists its words most frequent first
    elif vocab is None:
        vocab = vocab_from_counts(counts, max_vocab)
    # case, numbers and punctuation as the whole text shows them (a cap may leave out every capital or every "."
    # the model was trained on); the unknown word as the vocabulary has it (an open one gains <unk> when capped)
    text = replace(TextReader.detect(counts), unknown=UNK if UNK in vocab.words else None)
    del counts
    corpus = Corpus(vocab, closed, text, limited=limited)
    for name in splits:
        if name == "train":
            oov_train = "unk" if limited else oov
            split = encode_split(name, train_path, vocab, closed, oov_train, limited=limited, total=train_tokens)
        else:
            split = encode_split(name, split_file(data_dir, name), vocab, closed, oov, limited=limited)
        corpus.splits[name] = split
    return corpus
