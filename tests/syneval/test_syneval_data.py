"""Readers of minimal pairs: the sample TSV, the TSV dump, and the suite's pickles through the restricted
unpickler (which must refuse any pickle that would import or call something, without running it)."""

from __future__ import annotations

import os
import pickle

import pytest

from onlstm.syneval.data import (
    PAPER_ROWS,
    Item,
    SynevalDataError,
    read_items,
    write_dump,
)
from support import SHARED_DATA

SAMPLE = SHARED_DATA / "syneval-sample" / "syneval_sample.tsv"


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_sample_tsv_pairs_npi_rows_with_their_intrusive_rows(tmp_path):
    f = write(
        tmp_path / "s.tsv",
        "simple_agrmt\tthe author laughs\tthe author laugh\n"
        "\n"
        "simple_npi_anim\tno authors will ever be famous\tmost authors will ever be famous\n"
        "simple_npi_anim:intrusive\tno authors will ever be famous\tthe authors will ever be famous\n",
    )
    items = read_items(f)
    assert items == [
        Item("simple_agrmt", "", "the author laughs", "the author laugh", None, f"{f}:1"),
        Item(
            "simple_npi_anim",
            "",
            "no authors will ever be famous",
            "most authors will ever be famous",
            "the authors will ever be famous",
            f"{f}:3+4",
        ),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("simple_agrmt\tthe author laughs\n", r"s\.tsv:1: 2 tab-separated fields"),
        ("simple_agrmt\tthe author laughs\t \n", r"s\.tsv:1: an empty field"),
        ("a\tx y\tx z\nnpi_x:intrusive\tp\tq\n", r"s\.tsv:2: npi_x:intrusive rows without any npi_x rows"),
        ("simple_npi_anim\tno a ever b\tmost a ever b\n", r"s\.tsv:1: NPI case simple_npi_anim has no"),
        (
            "simple_npi_anim\tno a ever b\tmost a ever b\nsimple_npi_anim:intrusive\tfew a ever b\tthe a ever b\n",
            r"s\.tsv:2: the grammatical sentence 'few a ever b' differs",
        ),
        (
            "simple_npi_anim\tno a ever b\tmost a ever b\nsimple_npi_anim\tno c\tmost c\n"
            "simple_npi_anim:intrusive\tno a ever b\tthe a ever b\n",
            r"case simple_npi_anim has 2 rows but 1 simple_npi_anim:intrusive rows",
        ),
    ],
)
def test_sample_tsv_errors_name_file_and_line(tmp_path, text, expected):
    with pytest.raises(SynevalDataError, match=expected):
        read_items(write(tmp_path / "s.tsv", text))


def test_dump_round_trip_and_errors(tmp_path):
    items = [
        Item("simple_agrmt", "sing_MS", "the author laughs", "the author laugh"),
        Item("simple_agrmt", "", "the pilot swims", "the pilot swim"),  # no condition (as in the sample)
        Item("npi_across_anim", "past", "no a that b c have ever d", "most a that b c have ever d", "the a that no b"),
    ]
    write_dump(items, tmp_path / "d.tsv")
    back = read_items(tmp_path / "d.tsv")
    assert [(i.case, i.condition, i.grammatical, i.ungrammatical, i.intrusive) for i in back] == [
        (i.case, i.condition, i.grammatical, i.ungrammatical, i.intrusive) for i in items
    ]
    assert back[2].where == f"{tmp_path / 'd.tsv'}:4"
    header = "case\tcondition\tgrammatical\tungrammatical\tintrusive\n"
    with pytest.raises(SynevalDataError, match=r"d2\.tsv:2: case npi_x needs an intrusive sentence"):
        read_items(write(tmp_path / "d2.tsv", header + "npi_x\tc\tg\tu\t\n"))
    with pytest.raises(SynevalDataError, match=r"d3\.tsv:3: case agr must not have an intrusive"):
        read_items(write(tmp_path / "d3.tsv", header + "agr\tc\tg\tu\t\nagr\tc\tg\tu\ti\n"))
    with pytest.raises(SynevalDataError, match=r"d5\.tsv:2: an empty field"):
        read_items(write(tmp_path / "d5.tsv", header + "agr\tc\t \tu\n"))
    with pytest.raises(SynevalDataError, match=r"d4\.tsv:2: 3 tab-separated fields"):
        read_items(write(tmp_path / "d4.tsv", header + "agr\tc\tg\n"))


# --------------------------------------------------------------------------- pickles

TEMPLATES = {
    "sing_MS_MV": [("the author laughs", "the author laugh"), ("the pilot swims", "the pilot swim")],
    "plur_MS_MV": [("the authors laugh", "the authors laughs")],
}


def python2_protocol0_pickle() -> bytes:
    """What Python 2's ``pickle.dumps({'sing': [('the caf\\xe9 is open', 'the caf\\xe9 are open')]})``
    writes: protocol 0 with byte strings (``S'...'``), here holding a latin-1 byte (0xe9)."""
    return b"(dp0\nS'sing'\np1\n(lp2\n(S'the caf\\xe9 is open'\np3\nS'the caf\\xe9 are open'\np4\ntp5\nas."


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_modern_pickles_of_plain_data_are_read(tmp_path, protocol):
    (tmp_path / "simple_agrmt.pickle").write_bytes(pickle.dumps(TEMPLATES, protocol=protocol))
    items = read_items(tmp_path)
    assert [(i.case, i.condition, i.grammatical, i.ungrammatical, i.intrusive) for i in items] == [
        ("simple_agrmt", c, g, u, None) for c, pairs in TEMPLATES.items() for g, u in pairs
    ]
    assert items[1].where.endswith("case simple_agrmt, condition sing_MS_MV, item 1")


def test_python2_protocol0_pickle_is_read_as_latin1(tmp_path):
    (tmp_path / "simple_agrmt.pickle").write_bytes(python2_protocol0_pickle())
    (item,) = read_items(tmp_path / "simple_agrmt.pickle")
    assert (item.condition, item.grammatical, item.ungrammatical) == ("sing", "the café is open", "the café are open")


def test_npi_pickles_hold_triples_grammatical_intrusive_ungrammatical(tmp_path):
    data = {"past": [["no authors have ever been famous", "the authors that no x like have ever been famous",
                      "most authors have ever been famous"]]}  # fmt: skip
    (tmp_path / "npi_across_anim.pickle").write_bytes(pickle.dumps(data, protocol=2))
    (item,) = read_items(tmp_path)
    assert item.grammatical.startswith("no authors") and item.ungrammatical.startswith("most authors")
    assert item.intrusive == "the authors that no x like have ever been famous"


class _Exploit:
    """Unpickling an instance of this would call os.system (a pickle runs whatever its globals name)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Plain:
    pass


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_restricted_unpickler_refuses_globals_without_running_them(tmp_path, protocol):
    marker = tmp_path / "pwned"
    evil = {"sing": [("a b", "a c")], "x": _Exploit(marker)}
    (tmp_path / "simple_agrmt.pickle").write_bytes(pickle.dumps(evil, protocol=protocol))
    with pytest.raises(SynevalDataError, match=r"simple_agrmt\.pickle: refused \(it refers to (posix|os|nt)\.system"):
        read_items(tmp_path)
    assert not marker.exists()
    # the plain unpickler really would have run it: the test can fail
    pickle.loads((tmp_path / "simple_agrmt.pickle").read_bytes())
    assert marker.exists()


def test_restricted_unpickler_refuses_classes_and_garbage(tmp_path):
    f = tmp_path / "vp_coord.pickle"
    f.write_bytes(pickle.dumps({"c": [Plain()]}, protocol=2))
    with pytest.raises(SynevalDataError, match=r"vp_coord\.pickle: refused \(it refers to .*Plain"):
        read_items(f)
    f.write_bytes(b"\x80\x04garbage")
    with pytest.raises(SynevalDataError, match=r"vp_coord\.pickle: not a readable pickle"):
        read_items(f)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (["not", "a dict"], r"holds a list, expected a dict"),
        ({"c": [("only one",)]}, r"case vp_coord, condition c, item 0: \('only one',\) is not a tuple"),
        ({"c": [("a b", "a c"), ("a b", "", "x")]}, r"condition c, item 1"),
        ({"c": "a b"}, r"condition 'c' must be a string mapped to a list"),
    ],
)
def test_pickle_content_errors_name_case_condition_item(tmp_path, data, expected):
    f = tmp_path / "vp_coord.pickle"
    f.write_bytes(pickle.dumps(data, protocol=2))
    with pytest.raises(SynevalDataError, match=expected):
        read_items(f)


def test_missing_and_empty_inputs(tmp_path):
    with pytest.raises(SynevalDataError, match="does not exist"):
        read_items(tmp_path / "nope.tsv")
    os.mkfifo(tmp_path / "fifo.tsv")  # there, but not a file: said so (a FIFO would never end)
    with pytest.raises(SynevalDataError, match="fifo.tsv is not a regular file; give a TSV file"):
        read_items(tmp_path / "fifo.tsv")
    (tmp_path / "fifo.tsv").unlink()
    with pytest.raises(SynevalDataError, match=r"holds no \*\.pickle or \*\.tsv files"):
        read_items(tmp_path)


def test_paper_rows_name_known_cases_once_per_comparison():
    seen = set()
    for _group, _name, cases, comparison, onlstm, lstm in PAPER_ROWS:
        assert comparison in ("g>u", "g>i", "i>u") and 0 <= onlstm <= 1 and 0 <= lstm <= 1
        assert comparison == "g>u" or all("npi" in c for c in cases)
        for c in cases:
            assert (c, comparison) not in seen
            seen.add((c, comparison))
    assert len({c for c, _ in seen}) == 22  # the suite's 22 cases


@pytest.mark.skipif(not SAMPLE.exists(), reason="the shared syneval sample is not in this workspace")
def test_shared_sample_reads_whole():
    items = read_items(SAMPLE)
    assert len(items) == 1100  # 26 groups of 50 rows; the 4 intrusive groups complete 4 NPI cases
    assert sum(i.intrusive is not None for i in items) == 200
    cases = {i.case for i in items}
    assert cases == {c for row in PAPER_ROWS for c in row[2]}
