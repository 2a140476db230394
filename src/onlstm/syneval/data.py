"""Minimal pairs of the targeted syntactic evaluation (Marvin & Linzen 2018) and the paper's table: the sample TSV,
a TSV dump and the authors' pickles (read as plain data by :class:`onlstm.pickles.PlainUnpickler`) all give
:class:`Item` lists (:func:`read_items`; formats: docs/syneval.md, "Data")."""

from __future__ import annotations

import io
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..data.marvin_linzen import HEADER  # the dump's columns: the generated suite is written in them too
from ..errors import OnlstmError, first_line, quote
from ..files import read_lines, read_regular, write_text
from ..pickles import PlainUnpickler, RefusedPickle

INTRUSIVE_SUFFIX = ":intrusive"


class SynevalDataError(OnlstmError, ValueError):
    """A minimal-pair file that cannot be read; the message names the file and the line or item."""


@dataclass(frozen=True)
class Item:
    """One minimal pair (or NPI triple when ``intrusive`` is set), sentences as given in the file."""

    case: str
    condition: str
    grammatical: str
    ungrammatical: str
    intrusive: str | None = None
    where: str = ""  # "file:line" or "file: condition c, item i", for messages

    @property
    def sentences(self) -> list[str]:
        return [s for s in (self.grammatical, self.ungrammatical, self.intrusive) if s is not None]


def is_npi(case: str) -> bool:
    return "npi" in case


def _anim(stem: str) -> tuple[str, str]:
    """The animate and the inanimate case of one construction."""
    return f"{stem}_anim", f"{stem}_inanim"


_NPI_ACROSS = "NPI: across a relative clause"

#: The paper's rows: (group, row name, cases pooled in the row, comparison, ON-LSTM, LSTM). The published
#: numbers come from 2x650 models trained on 90M words of Wikipedia (Gulordava et al. 2018), not from the
#: models this project trains. Comparisons: "g>u" grammatical vs ungrammatical; for NPIs also "g>i"
#: (grammatical vs intrusive) and "i>u" (intrusive vs ungrammatical); "a>b" is correct when a scores higher.
PAPER_ROWS: tuple[tuple[str, str, tuple[str, ...], str, float, float], ...] = (
    ("short-term", "SVA: simple", ("simple_agrmt",), "g>u", 0.99, 1.00),
    ("short-term", "SVA: in a sentential complement", ("sent_comp",), "g>u", 0.95, 0.98),
    ("short-term", "SVA: short VP coordination", ("vp_coord",), "g>u", 0.89, 0.92),
    ("short-term", "SVA: in an object relative clause", _anim("obj_rel_within"), "g>u", 0.84, 0.88),
    ("short-term", "SVA: in an object relative (no that)", _anim("obj_rel_no_comp_within"), "g>u", 0.78, 0.81),
    ("short-term", "Reflexive: simple", ("simple_reflexives",), "g>u", 0.89, 0.82),
    ("short-term", "Reflexive: in a sentential complement", ("reflexive_sent_comp",), "g>u", 0.86, 0.80),
    ("short-term", "NPI: simple (grammatical vs intrusive)", _anim("simple_npi"), "g>i", 0.18, 1.00),
    ("short-term", "NPI: simple (intrusive vs ungrammatical)", _anim("simple_npi"), "i>u", 0.50, 0.01),
    ("short-term", "NPI: simple (grammatical vs ungrammatical)", _anim("simple_npi"), "g>u", 0.07, 0.63),
    ("long-term", "SVA: long VP coordination", ("long_vp_coord",), "g>u", 0.74, 0.74),
    ("long-term", "SVA: across a prepositional phrase", _anim("prep"), "g>u", 0.67, 0.68),
    ("long-term", "SVA: across a subject relative clause", ("subj_rel",), "g>u", 0.66, 0.60),
    ("long-term", "SVA: across an object relative clause", _anim("obj_rel_across"), "g>u", 0.57, 0.52),
    ("long-term", "SVA: across an object relative (no that)", _anim("obj_rel_no_comp_across"), "g>u", 0.54, 0.51),
    ("long-term", "Reflexive: across a relative clause", ("reflexives_across",), "g>u", 0.57, 0.58),
    ("long-term", f"{_NPI_ACROSS} (grammatical vs intrusive)", _anim("npi_across"), "g>i", 0.59, 0.95),
    ("long-term", f"{_NPI_ACROSS} (intrusive vs ungrammatical)", _anim("npi_across"), "i>u", 0.20, 0.00),
    ("long-term", f"{_NPI_ACROSS} (grammatical vs ungrammatical)", _anim("npi_across"), "g>u", 0.11, 0.04),
)

PAPER_SOURCE = "Shen et al. 2019, Table 3: 2x650 models trained on 90M words of Wikipedia (Gulordava et al. 2018)"


def read_items(path: str | Path) -> list[Item]:
    """Every item of a sample TSV, a TSV dump with a header, a ``.pickle`` file or a folder of them."""
    path = Path(path)
    if path.is_dir():
        pickles = sorted(path.glob("*.pickle"))
        tsvs = sorted(path.glob("*.tsv"))
        if not pickles and not tsvs:
            raise SynevalDataError(
                f"{path} holds no *.pickle or *.tsv files; point --data at the templates/ "
                "folder of the original suite or at a TSV file"
            )
        return [item for f in pickles + tsvs for item in read_items(f)]
    if not path.is_file():
        what = "is not a regular file" if path.exists() else "does not exist"  # a FIFO, a device
        raise SynevalDataError(f"{path} {what}; give a TSV file, a .pickle file or a templates/ folder")
    if path.suffix == ".pickle":
        return read_pickle(path)
    return read_tsv(path)


def read_tsv(path: Path) -> list[Item]:
    try:
        lines = read_lines(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise SynevalDataError(f"{path}: cannot be read as UTF-8 text ({exc})") from None
    if lines and tuple(c.strip().lower() for c in lines[0].split("\t")) == HEADER:
        return _read_dump(path, lines)
    return _read_sample(path, lines)


def _fields(
    path: Path, number: int, line: str, n: tuple[int, ...], layout: str, required: tuple[int, ...] = (0, 1, 2)
) -> list[str]:
    """The tab-separated fields of one line; ``required`` are the indices that must not be empty."""
    fields = line.split("\t")
    if len(fields) not in n:
        raise SynevalDataError(f"{path}:{number}: {len(fields)} tab-separated fields, expected {layout}")
    if any(not fields[i].strip() for i in required):
        raise SynevalDataError(f"{path}:{number}: an empty field; every line needs {layout}")
    return [f.strip() for f in fields]


def _read_sample(path: Path, lines: list[str]) -> list[Item]:
    layout = "case<TAB>grammatical<TAB>ungrammatical"
    plain: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    intrusive: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue  # blank lines carry no item
        case, good, bad = _fields(path, number, line, (3,), layout)
        table = intrusive if case.endswith(INTRUSIVE_SUFFIX) else plain
        table[case.removesuffix(INTRUSIVE_SUFFIX)].append((number, good, bad))
    for case in intrusive:
        if case not in plain:
            line = intrusive[case][0][0]
            raise SynevalDataError(f"{path}:{line}: {case}{INTRUSIVE_SUFFIX} rows without any {case} rows")
    return [item for case in plain for item in _sample_case(path, case, plain[case], intrusive.get(case))]


def _sample_case(path: Path, case: str, rows: list, intrusive_rows: list | None) -> list[Item]:
    """The items of one case; the i-th ``case:intrusive`` row completes the i-th ``case`` row to a triple."""
    if intrusive_rows is None:
        if is_npi(case):
            raise SynevalDataError(
                f"{path}:{rows[0][0]}: NPI case {case} has no {case}{INTRUSIVE_SUFFIX} rows "
                "(each NPI item needs its intrusive sentence)"
            )
        return [Item(case, "", g, u, None, f"{path}:{n}") for n, g, u in rows]
    if len(intrusive_rows) != len(rows):
        raise SynevalDataError(
            f"{path}: case {case} has {len(rows)} rows but {len(intrusive_rows)} "
            f"{case}{INTRUSIVE_SUFFIX} rows; they must pair up one to one"
        )
    items = []
    for (n, g, u), (m, g2, i) in zip(rows, intrusive_rows):
        if g != g2:
            raise SynevalDataError(
                f"{path}:{m}: the grammatical sentence {g2!r} differs from {g!r} on line {n}; "
                f"the i-th {case}{INTRUSIVE_SUFFIX} row must repeat the i-th {case} row's"
            )
        items.append(Item(case, "", g, u, i, f"{path}:{n}+{m}"))
    return items


def _read_dump(path: Path, lines: list[str]) -> list[Item]:
    layout = "case, condition, grammatical, ungrammatical, intrusive (condition may be empty; intrusive empty outside NPI cases)"
    items = []
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        fields = _fields(path, number, line, (4, 5), layout, required=(0, 2, 3))  # the condition may be empty
        case, condition, good, bad = fields[:4]
        intrusive = fields[4] if len(fields) == 5 and fields[4] else None
        if is_npi(case) != (intrusive is not None):
            need = "needs" if is_npi(case) else "must not have"
            raise SynevalDataError(f"{path}:{number}: case {case} {need} an intrusive sentence (5th field)")
        items.append(Item(case, condition, good, bad, intrusive, f"{path}:{number}"))
    return items


def load_plain_pickle(path: Path) -> object:
    """The plain data in ``path`` (a regular file); protocol-0 Python 2 pickles hold byte strings, decoded as
    latin-1."""
    data = read_regular(path, error=SynevalDataError)
    try:
        return PlainUnpickler(io.BytesIO(data), encoding="latin1").load()
    except RefusedPickle as exc:
        raise SynevalDataError(f"{path}: refused ({exc}); this reader accepts only plain data") from None
    except Exception as exc:  # truncated or garbled files raise EOFError, ValueError, KeyError, ...
        raise SynevalDataError(f"{path}: not a readable pickle ({type(exc).__name__}: {first_line(exc)})") from None


def read_pickle(path: Path) -> list[Item]:
    """One ``<case>.pickle`` of the original suite: ``{condition: [(g, u), ...]}`` (NPI: ``(g, i, u)``)."""
    case = path.stem
    data = load_plain_pickle(path)
    if not isinstance(data, dict):
        raise SynevalDataError(f"{path}: holds a {type(data).__name__}, expected a dict condition -> list of items")
    size = 3 if is_npi(case) else 2
    shape = "(grammatical, intrusive, ungrammatical)" if size == 3 else "(grammatical, ungrammatical)"
    items = []
    for condition, rows in data.items():
        if not isinstance(condition, str) or not isinstance(rows, (list, tuple)):
            raise SynevalDataError(f"{path}: condition {quote(condition)} must be a string mapped to a list of items")
        for index, row in enumerate(rows):
            where = f"{path}: case {case}, condition {condition}, item {index}"
            texts = row if isinstance(row, (list, tuple)) else ()
            sentences = [s.decode("latin1") if isinstance(s, bytes) else s for s in texts]
            if len(sentences) != size or not all(isinstance(s, str) and s.strip() for s in sentences):
                raise SynevalDataError(f"{where}: {quote(row)} is not a tuple {shape} of non-empty strings")
            good, *intrusive, bad = (s.strip() for s in sentences)
            items.append(Item(case, condition, good, bad, intrusive[0] if intrusive else None, where))
    return items


def write_dump(items: list[Item], path: Path) -> None:
    lines = ["\t".join(HEADER)]
    lines += ["\t".join((it.case, it.condition, it.grammatical, it.ungrammatical, it.intrusive or "")) for it in items]
    write_text(Path(path), "\n".join(lines) + "\n")
