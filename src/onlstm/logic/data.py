"""Reader and writer of the ``LABEL<TAB>A<TAB>B`` pair files ``train{k}``/``test{k}`` of Bowman et al. (2015):
:func:`read_examples`, :func:`write_file` (docs/logic.md, "Data"). Problems raise :class:`LogicDataError`.
"""

from __future__ import annotations

import os
import random
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError, OnlstmError
from ..files import atomic_write, iter_lines, sha256_files
from .formulas import Formula, FormulaSyntaxError, count_operators_text, parse, to_text
from .relations import RELATIONS, relation

if TYPE_CHECKING:
    from .config import LogicTrainConfig

#: The last file number; it holds every pair with this many operators or more.
LAST_BUCKET = 12
SPLITS: tuple[str, ...] = ("train", "test")
_FILE_NAME = re.compile(r"^(train|test)(\d+)(?:\..+)?$")


class LogicDataError(OnlstmError, ValueError):
    """A logic data file or directory is malformed or selects nothing."""


def bucket_of(ops_a: int, ops_b: int) -> int:
    """The file number a pair belongs in: its larger operator count, capped at 12."""
    return min(max(ops_a, ops_b), LAST_BUCKET)


@dataclass(frozen=True)
class Example:
    """One labelled pair read from a file."""

    label: str
    a: Formula
    b: Formula
    ops_a: int
    ops_b: int
    source: str  # path of the file it came from
    line: int  # 1-based line number in ``source``
    split: str | None = None  # ``train``/``test`` from the file name, ``None`` when the name does not say
    file_number: int | None = None  # ``k`` of ``train{k}``/``test{k}``, ``None`` when the name does not say

    @property
    def max_ops(self) -> int:
        """The larger of the two operator counts."""
        return max(self.ops_a, self.ops_b)

    @property
    def bucket(self) -> int:
        """The file number the pair belongs in by the split rule (see :func:`bucket_of`)."""
        return bucket_of(self.ops_a, self.ops_b)

    @property
    def length(self) -> int:
        """The length the pair is selected and reported under: its file number, else its bucket."""
        return self.file_number if self.file_number is not None else self.bucket

    @property
    def text_a(self) -> str:
        return to_text(self.a)

    @property
    def text_b(self) -> str:
        return to_text(self.b)

    @property
    def where(self) -> str:
        """``'path:line'`` for messages."""
        return f"{self.source}:{self.line}"


def parse_line(
    line: str, source: str = "<string>", lineno: int = 1, split: str | None = None, file_number: int | None = None
) -> Example:
    """Parse one line ``LABEL<TAB>A<TAB>B`` (a trailing ``\\n`` or ``\\r\\n`` is allowed); a problem raises
    :class:`LogicDataError` naming ``source``, ``lineno`` and what is wrong."""
    text = line.rstrip("\n").rstrip("\r")
    where = f"{source}, line {lineno}"
    if not text.strip():
        raise LogicDataError(f"{where}: empty line; every line must be LABEL<TAB>A<TAB>B (remove blank lines)")
    fields = text.split("\t")
    if len(fields) != 3:
        raise LogicDataError(
            f"{where}: expected 3 TAB-separated fields LABEL<TAB>A<TAB>B, found {len(fields)} "
            f"({len(fields) - 1} TABs) in {text!r}; fields must be separated by single TAB characters"
        )
    label, text_a, text_b = fields
    if label not in RELATIONS:
        raise LogicDataError(f"{where}: unknown label {label!r}; the label must be one of {' '.join(RELATIONS)}")
    a = _parse_formula(text_a, where, "first")
    b = _parse_formula(text_b, where, "second")
    ops = count_operators_text(text_a), count_operators_text(text_b)  # the texts parsed: tokens of the notation
    return Example(label, a, b, *ops, source, lineno, split, file_number)


def _parse_formula(text: str, where: str, which: str) -> Formula:
    try:
        return parse(text)
    except FormulaSyntaxError as exc:
        raise LogicDataError(f"{where}: {which} formula is not in the notation: {exc}") from None


def format_line(label: str, a: Formula | str, b: Formula | str) -> str:
    """One line ``LABEL<TAB>A<TAB>B`` (without the ``\\n``); formulas may be given as text."""
    if label not in RELATIONS:
        raise ValueError(f"unknown label {label!r}; the label must be one of {' '.join(RELATIONS)}")
    return "\t".join([label, *(f if isinstance(f, str) else to_text(f) for f in (a, b))])


def write_file(path: str | Path, rows: Iterable[tuple[str, Formula | str, Formula | str]]) -> int:
    """Write ``(label, a, b)`` rows in the line format with ``\\n`` line ends; returns the line count."""
    lines = [format_line(label, a, b) + "\n" for label, a, b in rows]
    atomic_write(Path(path), lambda tmp: Path(tmp).write_text("".join(lines), encoding="utf-8", newline="\n"))
    return len(lines)


def parse_file_name(path: str | Path) -> tuple[str, int] | None:
    """``(split, k)`` for names like ``train4`` or ``test12.head200``; ``None`` otherwise."""
    m = _FILE_NAME.match(Path(path).name)
    return (m.group(1), int(m.group(2))) if m else None


def read_file(path: str | Path) -> list[Example]:
    """All examples of one file; split and file number come from its name when it has the pattern."""
    path = Path(path)
    if not path.is_file():
        what = "not a regular file" if path.exists() else "no such file"
        raise LogicDataError(f"{path}: {what}; give a train{{k}}/test{{k}} file or a directory of them")
    split, number = parse_file_name(path) or (None, None)
    try:
        return [parse_line(line, str(path), i, split, number) for i, line in enumerate(iter_lines(path), start=1)]
    except InputError as exc:  # a byte that is not UTF-8, named by its line
        raise LogicDataError(str(exc)) from None


def _check_split(split: str | None) -> None:
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: use 'train', 'test' or None for both")


def select(
    examples: Iterable[Example],
    split: str | None = None,
    buckets: Iterable[int] | None = None,
    min_ops: int | None = None,
    max_ops: int | None = None,
) -> list[Example]:
    """The examples of ``split`` whose file number (else bucket) is in ``buckets`` and whose actual larger
    operator count lies in ``[min_ops, max_ops]``; conditions left ``None`` are not applied."""
    _check_split(split)
    keep = None if buckets is None else set(buckets)
    return [
        ex
        for ex in examples
        if (split is None or ex.split == split)
        and (keep is None or ex.length in keep)
        and (min_ops is None or ex.max_ops >= min_ops)
        and (max_ops is None or ex.max_ops <= max_ops)
    ]


def check_file_numbers(examples: Iterable[Example]) -> None:
    """Raise :class:`LogicDataError` for the first example whose file number breaks the split rule."""
    for ex in examples:
        if ex.file_number is not None and ex.file_number != ex.bucket:
            raise LogicDataError(
                f"{ex.source}, line {ex.line}: the larger operator count is {ex.max_ops}, so the pair belongs "
                f"in file number {ex.bucket}, not {ex.file_number} (file k holds max count k; file 12 holds 12+)"
            )


def relabel_mismatches(examples: Iterable[Example]) -> list[tuple[Example, str]]:
    """``(example, recomputed label)`` for every example whose label differs from its truth sets' relation."""
    return [(ex, computed) for ex in examples if (computed := relation(ex.a, ex.b)) != ex.label]


def read_examples(
    path: str | Path,
    split: str | None = None,
    buckets: Iterable[int] | None = None,
    min_ops: int | None = None,
    max_ops: int | None = None,
    check_buckets: bool = False,
) -> list[Example]:
    """Read a directory of ``train{k}``/``test{k}`` files (only those of the selected split and buckets) or one
    file, and :func:`select`. ``check_buckets``: an example whose file number breaks the split rule raises.
    Raises :class:`LogicDataError` when the path does not exist, the directory holds no such files, a line
    is malformed (naming file and line), or nothing is selected."""
    _check_split(split)
    path = Path(path)
    bucket_set = None if buckets is None else set(buckets)
    if path.is_dir():
        examples = _read_directory(path, split, bucket_set)
    elif path.is_file():
        examples = read_file(path)
    else:
        what = "not a regular file" if path.exists() else "no such file or directory"  # a FIFO, a device
        raise LogicDataError(
            f"{path}: {what}; give a directory of train{{k}}/test{{k}} files (k = 0 … 12) or one such file"
        )
    if check_buckets:
        check_file_numbers(examples)
    chosen = select(examples, split, bucket_set, min_ops, max_ops)
    if not chosen:
        raise LogicDataError(
            f"{path}: no examples match split={split!r}, buckets={_show(bucket_set)}, min_ops={min_ops}, "
            f"max_ops={max_ops} ({len(examples)} examples read); widen the selection"
        )
    return chosen


def _read_directory(directory: Path, split: str | None, buckets: set[int] | None) -> list[Example]:
    """Examples of the directory's files of ``split`` whose number is in ``buckets``."""
    found = [(*named, p) for p in directory.iterdir() if (named := parse_file_name(p))]
    for _, _, p in found:
        _check_regular(p)  # never left out without a word: training would go on without that bucket
    files = sorted(found, key=lambda t: (SPLITS.index(t[0]), t[1], t[2].name))  # by split, then k
    if not files:
        # never suggest writing into a folder that holds something else (a PTB folder given by mistake)
        into = directory if not any(directory.iterdir()) else Path("runs/logic/data")
        raise LogicDataError(
            f"{directory}: no train{{k}}/test{{k}} files here (expected names like train0 … train12, "
            f"test0 … test12); generate a data set with `onlstm logic generate --out {into}` and pass --data {into}"
        )
    wanted = [(s, k, p) for s, k, p in files if (split is None or s == split) and (buckets is None or k in buckets)]
    if not wanted:
        names = ", ".join(p.name for _, _, p in files)
        hint = ""
        if split == "test" and not any(s == "test" for s, _, _ in files):  # the original data: train files only
            hint = (
                "; this data has no test files: `onlstm logic eval --split valid` scores the run's validation hold-out"
            )
        raise LogicDataError(
            f"{directory}: no file matches split={split!r}, buckets={_show(buckets)} (files present: {names}){hint}"
        )
    return [ex for _, _, p in wanted for ex in read_file(p)]


def _check_regular(path: Path) -> None:
    """A data file that is a dangling link, a FIFO, a device or a folder is refused by name (a FIFO would hang)."""
    if path.is_symlink() and not path.exists():
        raise LogicDataError(f"{path} is a symbolic link to nothing ({os.readlink(path)}); fix or remove the link")
    if not path.is_file():
        what = "a folder" if path.is_dir() else "a FIFO" if stat.S_ISFIFO(path.stat().st_mode) else "not a regular file"
        raise LogicDataError(
            f"{path} is {what}, not a data file; remove it or give a folder of train{{k}}/test{{k}} files"
        )


def has_split(directory: str | Path, split: str) -> bool:
    """Whether ``directory`` holds a file of ``split`` (the original data has train files only)."""
    path = Path(directory)
    return path.is_dir() and any((named := parse_file_name(p)) and named[0] == split for p in path.iterdir())


def _show(buckets: set[int] | None) -> str:
    return "None" if buckets is None else "{" + ", ".join(map(str, sorted(buckets))) + "}"


def split_train_valid(examples: list[Example], cfg: LogicTrainConfig) -> tuple[list[Example], list[Example]]:
    """Subset (``max_train_examples``) and validation hold-out (``valid_fraction``): seeded random, or with
    ``valid_split='ordered'`` every ``round(1 / valid_fraction)``-th pair in file order (the authors' script:
    the 10th, 20th, ... pair of train0, train1, ... read in turn)."""
    if cfg.valid_split == "ordered":
        pool = list(examples)[: cfg.max_train_examples]  # None: all
        nth = max(2, round(1 / cfg.valid_fraction))
        train = [ex for i, ex in enumerate(pool, start=1) if i % nth]
        valid = [ex for i, ex in enumerate(pool, start=1) if not i % nth]
    else:
        rng = random.Random(f"onlstm-logic-split/{cfg.seed}")
        pool = list(examples)
        rng.shuffle(pool)
        pool = pool[: cfg.max_train_examples]  # None: all
        n_valid = max(1, round(cfg.valid_fraction * len(pool)))
        train, valid = pool[n_valid:], pool[:n_valid]
    if not valid or not train:
        raise LogicDataError(
            f"only {len(pool)} training pairs: too few to hold out {cfg.valid_fraction:.0%} "
            "for validation and train on the rest"
        )
    return train, valid


def validation_examples(data: str | Path, cfg: LogicTrainConfig, buckets: Iterable[int]) -> list[Example]:
    """The validation hold-out of a run trained with ``cfg`` on ``data``, rebuilt as training drew it, in the
    given length buckets (for data whose test files are kept back)."""
    keep = set(buckets)
    _, valid = split_train_valid(load_training_examples(data, cfg), cfg)
    return [ex for ex in valid if ex.file_number in keep]


def load_training_examples(data: str | Path, cfg: LogicTrainConfig) -> list[Example]:
    """The pairs of the ``train{k}`` files with ``k <= max_train_ops`` whose larger count is <= max_train_ops."""
    path = _existing(data)
    buckets = range(cfg.max_train_ops + 1) if path.is_dir() else None
    return read_examples(path, split="train", buckets=buckets, max_ops=cfg.max_train_ops)


def _existing(data: str | Path) -> Path:
    path = Path(data)
    if not path.exists():
        raise LogicDataError(
            f"data directory {path} does not exist; create one with `onlstm logic generate "
            f"--out {path}` or pass the directory of the original train{{k}}/test{{k}} files"
        )
    return path


#: Where a run records the fingerprint of its training files (:func:`training_fingerprint`): ``config.json``'s
#: ``data`` section, under this key (the key a language-model run records its training text's under).
TRAIN_FINGERPRINT = "train_sha256"


def training_files(data: str | Path, cfg: LogicTrainConfig) -> list[Path]:
    """The files training reads from ``data`` (:func:`load_training_examples`): its ``train{k}`` files with
    ``k <= max_train_ops``, or ``data`` itself when it is one file. Each must be a regular file (a FIFO would hang)."""
    path = _existing(data)
    if not path.is_dir():
        return [path]
    named = [(parse_file_name(p), p) for p in path.iterdir()]
    files = [p for n, p in named if n is not None and n[0] == "train" and n[1] <= cfg.max_train_ops]
    for p in files:
        _check_regular(p)
    return files


def training_fingerprint(data: str | Path, cfg: LogicTrainConfig) -> str:
    """The SHA-256 of the files training reads from ``data`` (:func:`training_files`), each by its name: what a run
    was trained on, wherever the folder is and however its path is spelled. Recorded in a run's ``config.json``
    (:data:`TRAIN_FINGERPRINT`); the same data regenerated with another seed (the same path) has another."""
    path = Path(data)
    return sha256_files(training_files(path, cfg), path)


def trained_on(header: dict, data: str | Path, cfg: LogicTrainConfig) -> bool | None:
    """Whether the run of ``header`` (its ``config.json``) was trained on the training files ``data`` holds now, by
    their fingerprint; None when the run records none (a run written before fingerprints were recorded)."""
    summary = header.get("data")
    saved = summary.get(TRAIN_FINGERPRINT) if isinstance(summary, dict) else None
    return None if saved is None else saved == training_fingerprint(data, cfg)


def recorded_path(header: dict) -> str | None:
    """The data folder (or file) a run was trained on, as its ``config.json`` spells it; None when not recorded."""
    summary = header.get("data")
    path = summary.get("path") if isinstance(summary, dict) else None
    return None if path is None else str(path)


def same_path(recorded: str | None, data: str | Path) -> bool:
    """Whether the path a run recorded (:func:`recorded_path`) is ``data``, however spelled: what is left to compare
    for a run that records no fingerprint (relative paths resolved against the working folder)."""
    return recorded is not None and Path(recorded).resolve() == Path(data).resolve()


def load_test_examples(data: str | Path) -> list[Example]:
    """The pairs of the ``test{k}`` files of ``data`` (for ``score_test``), with a fix when there are none."""
    try:
        return read_examples(data, split="test")
    except LogicDataError as exc:
        raise LogicDataError(
            f"score_test: {exc}; drop --score-test or point --data at a directory with test files"
        ) from None
