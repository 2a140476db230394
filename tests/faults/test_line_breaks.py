"""Issue 48: every reader of a user's text ends a line at "\\n" (or "\\r\\n") only. ``str.splitlines`` and Python's
universal newlines also end one at the characters below, which sit inside lines of real text (a form feed in a
document, NEL in Latin-1 text decoded wrongly, U+2028 from a word processor): they must not add sentences or shift
the line numbers results are keyed by. The characters are generated from Unicode, the readers listed once; each
reader is fed each character inside a line, in place of a space, and must give what it gives without it."""

from __future__ import annotations

import contextlib
import io
import re
import sys

import pytest

from onlstm.cli import main
from onlstm.data.ptb import iter_lines as corpus_sentences
from onlstm.logic.data import LogicDataError, read_file
from onlstm.models import LanguageModel, LMConfig
from onlstm.parsing.cli import _read_trees
from onlstm.syneval.data import read_items
from support import WORDS

#: Every character that str.splitlines ends a line at, "\n" aside (the one line end kept).
BREAKS = [chr(c) for c in range(sys.maxunicode + 1) if len(f"a{chr(c)}b".splitlines()) == 2 and chr(c) != "\n"]

SENTENCES = ["the cat sat on a mat", "a big dog ran fast", "the small red cat sat"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    cfg = LMConfig(vocab_size=len(WORDS) + 2, emb_size=8, hidden_sizes=[12, 8], chunk_size=4)
    LanguageModel(cfg).eval().save_pretrained(folder, ["<eos>", "<unk>", *WORDS])
    return folder


def _command(argv: list[str], stdin: bytes | None = None) -> str:
    out = io.StringIO()
    old = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert main(argv) == 0
    finally:
        sys.stdin = old
    return out.getvalue()


def _file(tmp_path, text: str, name: str = "input.txt"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


# Each reader: (tmp folder, model, lines) -> what it read. The lines' text is written to a file (or stdin) as is.
READERS = {
    "lm surprisal": lambda tmp, m, text: _command(["lm", "surprisal", "--checkpoint", str(m), str(_file(tmp, text))]),
    "lm surprisal (stdin)": lambda tmp, m, text: _command(
        ["lm", "surprisal", "--checkpoint", str(m), "-"], text.encode("utf-8")
    ),
    "parsing parse": lambda tmp, m, text: _command(
        ["parsing", "parse", "--checkpoint", str(m), "--format", "json", str(_file(tmp, text))]
    ),
    "parsing parse (stdin)": lambda tmp, m, text: _command(
        ["parsing", "parse", "--checkpoint", str(m), "--format", "json"], text.encode("utf-8")
    ),
    "corpus": lambda tmp, m, text: list(corpus_sentences(_file(tmp, text))),
    "tree file": lambda tmp, m, text: _read_trees(
        _file(tmp, "".join(f"({s})\n" for s in text.split("\n")[:-1])),  # a flat tree per sentence
        "auto",
        "gold",
    ),
    "syneval TSV": lambda tmp, m, text: [
        (i.case, i.where, [s.split() for s in i.sentences])
        for i in read_items(_file(tmp, "".join(f"simple_agrmt\t{s}\t{s} x\n" for s in text.split("\n")[:-1]), "p.tsv"))
    ],
}


def _text(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def _with(char: str) -> list[str]:
    """The sentences with ``char`` in place of the middle line's second space."""
    words = SENTENCES[1].split(" ")
    return [SENTENCES[0], " ".join(words[:2]) + char + " ".join(words[2:]), SENTENCES[2]]


@pytest.mark.parametrize("reader", READERS)
def test_a_line_break_character_inside_a_line_adds_no_sentence(tmp_path, model, reader):
    read = READERS[reader]
    expected = read(tmp_path, model, _text(SENTENCES))
    for char in BREAKS:
        got = read(tmp_path, model, _text(_with(char)))
        assert got == expected, f"{reader}: U+{ord(char):04X} inside a line changed what was read"


@pytest.mark.parametrize("reader", [r for r in READERS if r not in ("tree file", "syneval TSV")])  # those: below
def test_crlf_line_ends_read_as_lf(tmp_path, model, reader):
    read = READERS[reader]
    assert read(tmp_path, model, _text(SENTENCES).replace("\n", "\r\n")) == read(tmp_path, model, _text(SENTENCES))


def test_crlf_tree_and_tsv_files_read_as_lf(tmp_path):
    trees = "((the cat) (sat down))\n((a dog) ran)\n"
    lf, crlf = _file(tmp_path, trees, "lf.txt"), _file(tmp_path, trees.replace("\n", "\r\n"), "crlf.txt")
    assert _read_trees(crlf, "auto", "gold") == _read_trees(lf, "auto", "gold")
    pairs = "simple_agrmt\tthe dog runs\tthe dog run\n"
    lf, crlf = _file(tmp_path, pairs, "lf.tsv"), _file(tmp_path, pairs.replace("\n", "\r\n"), "crlf.tsv")
    assert [i.sentences for i in read_items(crlf)] == [i.sentences for i in read_items(lf)]


LOGIC_LINES = ["<\ta\t( a ( or b ) )", "=\t( not ( not c ) )\tc", ">\t( a ( or b ) )\tb"]


@pytest.mark.parametrize("char", BREAKS, ids=lambda c: f"U+{ord(c):04X}")
def test_logic_data_names_the_line_that_holds_a_break_character(tmp_path, char):
    """The logic notation separates tokens by single spaces, so the character cannot stand for one: the line that
    holds it is refused by its own number, and no line is split in two (line 3 must not move)."""
    path = tmp_path / "train1"
    assert [ex.line for ex in read_file(_file(tmp_path, _text(LOGIC_LINES), "train1"))] == [1, 2, 3]
    lines = [LOGIC_LINES[0], LOGIC_LINES[1].replace("( not c", f"( not{char}c"), LOGIC_LINES[2]]
    path.write_bytes(_text(lines).encode("utf-8"))
    with pytest.raises(LogicDataError) as err:
        read_file(path)
    assert re.search(r"line 2\b", str(err.value)), str(err.value)


def test_the_generated_characters_are_the_known_ones():
    # a check of the generator against the documented list (Python's str.splitlines): it must not come out empty
    assert {"\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"} <= set(BREAKS)


@pytest.mark.parametrize("reader", [r for r in READERS if r not in ("tree file", "syneval TSV")])  # those: below
def test_a_byte_order_mark_is_not_read_as_text(tmp_path, model, reader):
    """Some editors write U+FEFF first: it must not become part of the first word, label or header."""
    read = READERS[reader]
    assert read(tmp_path, model, "\ufeff" + _text(SENTENCES)) == read(tmp_path, model, _text(SENTENCES))


def test_a_byte_order_mark_before_logic_data_a_suite_and_a_config(tmp_path):
    import json

    from onlstm.logic.config import SECTIONS
    from onlstm.syneval.syntaxgym import read_suite

    assert read_file(_file(tmp_path, "\ufeff" + _text(LOGIC_LINES), "train1"))[0].label == "<"
    trees = "((the cat) (sat down))\n((a dog) ran)\n"
    marked = _read_trees(_file(tmp_path, "\ufeff" + trees, "bom.txt"), "auto", "gold")
    assert marked == _read_trees(_file(tmp_path, trees, "plain.txt"), "auto", "gold")
    pairs = "simple_agrmt\tthe dog runs\tthe dog run\n"
    items = read_items(_file(tmp_path, "\ufeff" + pairs, "bom.tsv"))
    assert [(i.case, i.sentences) for i in items] == [
        (i.case, i.sentences) for i in read_items(_file(tmp_path, pairs, "p.tsv"))
    ]
    suite = {
        "meta": {"name": "s", "metric": "sum"},
        "predictions": [{"type": "formula", "formula": "(1;%a%) < (1;%b%)"}],
        "region_meta": {"1": "w"},
        "items": [{"item_number": 1, "conditions": [
            {"condition_name": n, "regions": [{"region_number": 1, "content": "the cat"}]} for n in "ab"
        ]}],
    }  # fmt: skip
    assert read_suite(_file(tmp_path, "\ufeff" + json.dumps(suite), "s.json")).name == "s"
    from onlstm.config import read_yaml

    sections = read_yaml(_file(tmp_path, "\ufefftrain:\n  lr: 2.0\n", "c.yaml"), SECTIONS)
    assert sections["train"]["lr"] == 2.0
