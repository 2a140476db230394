"""Penn Treebank ``.mrg`` files -> normalised gold trees for unsupervised-parsing evaluation:
:func:`load_treebank`, :func:`normalise_tree`. The normalisation steps (as the ON-LSTM/PRPN evaluation
code) are listed in docs/parsing.md ("Trees and metrics"); files are read as text, not with nltk's corpus
readers (they refuse paths outside nltk's data roots since 3.10)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import OnlstmError
from ..files import UTF8
from .trees import (
    MAX_DEPTH,
    Tree,
    _is_preterminal,
    is_labelled,
    labelled_tree_class,
    strip_function_tags,
    too_deep,
    unlabel,
)

if TYPE_CHECKING:
    from nltk.tree import Tree as LabelledTree

WORD_TAGS = frozenset(
    "CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB RBR RBS RP SYM TO UH "
    "VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB".split()
)

_DIGITS = re.compile(r"\d+")
_SECTION_IN_NAME = re.compile(r"^wsj_(\d\d)\d\d\.mrg$", re.IGNORECASE)


class TreebankError(OnlstmError, ValueError):
    """A treebank that cannot be read; the message names the file and the problem."""


def normalise_word(word: str, lowercase: bool = True, number: str | None = "N") -> str:
    """A treebank word in a training text's form; by default the paper's (Mikolov's PTB): lower case and every run
    of digits as ``N`` (``"1987"`` -> ``"N"``, ``"3.5"`` -> ``"N.N"``); ``number`` None keeps the digits."""
    word = word.lower() if lowercase else word
    return word if number is None else _DIGITS.sub(lambda _: number, word)


def normalise_tree(tree: LabelledTree) -> LabelledTree | None:
    """The normalised copy of a raw PTB tree, or ``None`` when no word survives. Raises ``ValueError``
    for a word outside a ``(TAG word)`` pre-terminal (without a tag, whether to keep it is unknown)."""
    if not is_labelled(tree):
        raise TypeError(f"normalise_tree needs an nltk.Tree, got {type(tree).__name__}")
    node = _normalise(tree, labelled_tree_class())
    if node is None:
        return None
    if node.label() == "":  # an unlabelled root with several children: give it a name
        node.set_label("ROOT")
    return node


def _normalise(node: LabelledTree, labelled: type[LabelledTree]) -> LabelledTree | None:
    if _is_preterminal(node):
        tag = node.label()
        return labelled(tag, [normalise_word(node[0])]) if tag in WORD_TAGS else None
    word = next((c for c in node if isinstance(c, str)), None)
    if word is not None:
        raise ValueError(
            f"the word {word!r} is directly under ({node.label()} ...), not inside a (TAG word) pre-terminal"
        )
    kids = [k for k in (_normalise(child, labelled) for child in node) if k is not None]
    if not kids:
        return None
    label = strip_function_tags(node.label())
    if len(kids) == 1 and not _is_preterminal(kids[0]):  # a unary chain: one node, labels joined by "+"
        only = kids[0]
        return labelled(f"{label}+{only.label()}" if label else only.label(), list(only))
    return labelled(label, kids)


def kept_words(tree: LabelledTree) -> tuple[str, ...]:
    """The words of a raw PTB tree that :func:`normalise_tree` keeps (those of a word tag), as written."""
    return tuple(node[0] for node in tree.subtrees(_is_preterminal) if node.label() in WORD_TAGS)


def split_bracketings(text: str, source: str = "<text>") -> list[tuple[int, str]]:
    """A file's top-level bracketings as ``[(first_line, text), ...]``; :class:`TreebankError` naming
    ``source`` and the line for unbalanced brackets or text outside any bracket."""
    out: list[tuple[int, str]] = []
    depth, start, start_line, line = 0, 0, 1, 1
    for pos, ch in enumerate(text):
        if ch == "\n":
            line += 1
        elif ch == "(":
            if depth == 0:
                start, start_line = pos, line
            depth += 1
            if depth > MAX_DEPTH:
                raise TreebankError(f"{source}: {too_deep(f'at line {line}')}; the file is malformed")
        elif ch == ")":
            if depth == 0:
                raise TreebankError(
                    f"{source}: unbalanced brackets: ')' at line {line} closes nothing; the file is malformed"
                )
            depth -= 1
            if depth == 0:
                out.append((start_line, text[start : pos + 1]))
        elif depth == 0 and not ch.isspace():
            snippet = text[pos : pos + 30].split("\n")[0]
            raise TreebankError(
                f"{source}: text outside any bracketing at line {line}: {snippet!r}; an .mrg file holds only bracketed trees"
            )
    if depth:
        raise TreebankError(
            f"{source}: unbalanced brackets: the tree starting at line {start_line} is never closed "
            f"({depth} '(' still open at the end of the file); the file is malformed or truncated"
        )
    return out


def read_mrg_file(path: str | Path) -> list[LabelledTree]:
    """The raw (not normalised) trees of one ``.mrg`` file, in order."""
    path = Path(path)
    try:
        text = path.read_text(encoding=UTF8)
    except UnicodeDecodeError as err:
        raise TreebankError(f"{path}: not UTF-8/ASCII text ({err}); is this a treebank .mrg file?") from None
    except OSError as err:
        raise TreebankError(f"{path}: cannot read the file ({err.strerror or err})") from None
    trees, labelled = [], labelled_tree_class()
    for k, (line, chunk) in enumerate(split_bracketings(text, str(path))):
        try:
            trees.append(labelled.fromstring(chunk))
        except ValueError as err:
            raise TreebankError(f"{path}: tree {k + 1} (line {line}) is not a valid bracketing: {err}") from None
    return trees


def file_section(path: str | Path) -> str | None:
    """The WSJ section (``'00'`` .. ``'24'``) of a file: ``SS`` in ``wsj_SSNN.mrg``, else a two-digit
    parent directory name, else ``None``."""
    path = Path(path)
    if m := _SECTION_IN_NAME.match(path.name):
        return m.group(1)
    return path.parent.name if re.fullmatch(r"\d\d", path.parent.name) else None


def _section_names(sections: Iterable[int | str] | int | str | None) -> tuple[str, ...] | None:
    if sections is None:
        return None
    names = set()
    for s in [sections] if isinstance(sections, (int, str)) else sections:
        text = str(s).strip()
        if not text.isdigit() or int(text) > 99:
            raise ValueError(f"a WSJ section is a number such as 23 or '00', got {s!r}")
        names.add(f"{int(text):02d}")
    if not names:
        raise ValueError("sections is empty; pass None for all sections")
    return tuple(sorted(names))


def find_mrg_files(directory: str | Path, sections: Iterable[int | str] | int | str | None = None) -> list[Path]:
    """All ``*.mrg`` files (any case, searched recursively) under ``directory`` (or the file itself),
    sorted by path ignoring case, optionally only those of the WSJ ``sections`` (``23``, ``["00", "01"]``)."""
    directory = Path(directory)
    wanted = _section_names(sections)
    if not directory.exists():
        raise TreebankError(f"{directory}: no such file or directory; give the folder that holds the .mrg files")
    if directory.is_file():
        files = [directory]
    else:
        entries = list(directory.rglob("*"))
        if not entries:
            raise TreebankError(f"{directory}: the directory is empty; give the folder that holds the .mrg files")
        files = sorted(
            (p for p in entries if p.is_file() and p.suffix.lower() == ".mrg"),
            key=lambda p: (p.as_posix().lower(), p.as_posix()),
        )
        if not files:
            raise TreebankError(
                f"{directory}: no .mrg files found (searched sub-folders too, {len(entries)} entries); "
                "expected Penn Treebank files such as wsj_0001.mrg"
            )
    if wanted is None:
        return files
    picked = [p for p in files if file_section(p) in wanted]
    if not picked:
        found = sorted({s for s in map(file_section, files) if s is not None})
        raise TreebankError(
            f"{directory}: no .mrg file of section(s) {', '.join(wanted)}; sections present: "
            f"{', '.join(found) if found else 'none recognisable (names are not wsj_SSNN.mrg)'}"
        )
    return picked


@dataclass(frozen=True)
class GoldSentence:
    """One normalised gold sentence, unlabelled and labelled, and where it came from (``file`` relative to
    the directory, ``index`` of the tree in the file, WSJ ``section`` or ``None``)."""

    words: tuple[str, ...]
    tree: Tree
    labelled: LabelledTree
    file: str
    index: int
    section: str | None
    raw_words: tuple[str, ...] = ()  # the same words as the treebank writes them (case and digits kept)


@dataclass
class Treebank:
    """Normalised gold sentences and what was read, skipped and filtered to get them."""

    sentences: list[GoldSentence]
    directory: Path
    files: list[Path]
    trees_read: int
    skipped_empty: int
    skipped_long: int = 0
    max_length: int | None = None
    sections: tuple[str, ...] = ()
    empty_files: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sentences)

    def __iter__(self) -> Iterator[GoldSentence]:
        return iter(self.sentences)

    @property
    def words(self) -> list[tuple[str, ...]]:
        return [s.words for s in self.sentences]

    @property
    def labelled_trees(self) -> list[LabelledTree]:
        return [s.labelled for s in self.sentences]

    @property
    def name(self) -> str:
        """E.g. ``'WSJ10 (NLTK sample, sections 00-01)'`` or ``'WSJ all lengths (section 23)'``."""
        length = {None: "WSJ all lengths", 10: "WSJ10"}.get(self.max_length, f"WSJ<={self.max_length}")
        secs = list(self.sections)
        if len(secs) <= 1:
            where = f"section {secs[0]}" if secs else "sections unknown"
        else:
            contiguous = [int(s) for s in secs] == list(range(int(secs[0]), int(secs[-1]) + 1))
            where = f"sections {secs[0]}-{secs[-1]}" if contiguous else "sections " + ",".join(secs)
        sample = "NLTK sample, " if secs and set(secs) <= {"00", "01"} else ""
        return f"{length} ({sample}{where})"

    def summary(self) -> str:
        parts = [
            f"{self.name}: {len(self)} sentences from {len(self.files)} files ({self.trees_read} trees read",
            f"{self.skipped_empty} empty after normalisation skipped",
        ]
        if self.max_length is not None:
            parts.append(f"{self.skipped_long} longer than {self.max_length} words left out")
        if self.empty_files:
            parts.append(f"{len(self.empty_files)} files without trees")
        return ", ".join(parts) + ")"


def load_treebank(
    directory: str | Path, *, max_length: int | None = None, sections: Iterable[int | str] | int | str | None = None
) -> Treebank:
    """Read and normalise every ``.mrg`` file under ``directory``, keeping sentences of at most
    ``max_length`` words after normalisation (``10``: WSJ10) from the WSJ ``sections`` given (``23``: the
    test set). Empty sentences are skipped and counted; :class:`TreebankError` when nothing is left."""
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be >= 1 or None, got {max_length}")
    root = Path(directory)
    files = find_mrg_files(root, sections)
    base = root if root.is_dir() else root.parent
    sentences: list[GoldSentence] = []
    trees_read = skipped_empty = skipped_long = 0
    empty_files: list[str] = []
    for path in files:
        rel = path.relative_to(base).as_posix()
        raw = read_mrg_file(path)
        if not raw:
            empty_files.append(rel)
        trees_read += len(raw)
        section = file_section(path)
        for k, tree in enumerate(raw):
            try:
                norm = normalise_tree(tree)
            except ValueError as err:
                raise TreebankError(f"{path}: tree {k + 1}: {err}") from None
            words = () if norm is None else tuple(norm.leaves())
            if norm is None:
                skipped_empty += 1
            elif max_length is not None and len(words) > max_length:
                skipped_long += 1
            else:
                sentences.append(GoldSentence(words, unlabel(norm), norm, rel, k, section, kept_words(tree)))
    found_sections = tuple(sorted({s for s in map(file_section, files) if s is not None}))
    bank = Treebank(
        sentences, root, files, trees_read, skipped_empty, skipped_long, max_length, found_sections, empty_files
    )
    if not sentences:
        raise TreebankError(
            f"{root}: no sentence left ({bank.summary()}); check the files and the length/section filters"
        )
    return bank


def load_wsj10(directory: str | Path, sections: Iterable[int | str] | int | str | None = None) -> Treebank:
    """WSJ10: the sentences of at most 10 words after normalisation (``load_treebank(..., max_length=10)``)."""
    return load_treebank(directory, max_length=10, sections=sections)
