"""onlstm.files' readers and JSON writer (issue 48): lines end at "\\n" only, and no JSON the project writes holds
NaN or Infinity (not JSON: strict readers refuse the file)."""

from __future__ import annotations

import io
import json
import math
import re
import warnings
from pathlib import Path

import pytest

from onlstm.errors import InputError, UserNote
from onlstm.files import json_text, read_lines, read_stdin_text, split_lines, write_json


@pytest.mark.parametrize(
    "text, lines",
    [
        ("a\nb\n", ["a", "b"]),
        ("a\nb", ["a", "b"]),  # a last line without its end
        ("a\r\nb\r\n", ["a", "b"]),
        ("a\rb\x0cc\x85d\u2028e\n", ["a\rb\x0cc\x85d\u2028e"]),  # none of these ends a line
        ("\n\n", ["", ""]),
        ("", []),
    ],
)
def test_split_lines(tmp_path, text, lines):
    assert split_lines(text) == lines
    (tmp_path / "f.txt").write_bytes(text.encode("utf-8"))
    assert read_lines(tmp_path / "f.txt") == lines


def test_carriage_returns_without_a_line_feed_are_one_line_and_a_note():
    with pytest.warns(UserNote, match=r"no line feed, so it is read as one line"):
        assert split_lines("a b\rc d\r") == ["a b\rc d"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a line ending in \r alone, or \r inside lines that \n ends: no note
        assert split_lines("a b\r") == ["a b"] and split_lines("a\rb\n") == ["a\rb"]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_json_never_holds_a_non_finite_number(tmp_path, value):
    obj = {"x": value, "row": [1.5, value, {"y": (value, 2)}], "ok": 0.25}
    write_json(tmp_path / "a.json", obj)
    for text in ((tmp_path / "a.json").read_text(), json_text(obj)):
        back = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} written"))
        assert back == {"x": None, "row": [1.5, None, {"y": [None, 2]}], "ok": 0.25}


def test_a_closed_stdin_is_one_input_error(monkeypatch):
    monkeypatch.setattr("sys.stdin", None)  # what Python sets when the shell closed it (<&-)
    with pytest.raises(InputError, match="standard input is closed"):
        read_stdin_text()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a\rb\n"), encoding="utf-8"))
    assert read_stdin_text() == "a\rb\n"  # read as bytes: no newline translated


def test_a_nan_written_as_null_reads_back_where_a_history_allows_any_number(tmp_path):
    # lm train's history rows hold NaN until a finite validation comes (best_valid_ppl); JSON now says null, and a
    # resumed run must still read its own history
    from onlstm.lm.train import LMRow
    from onlstm.runs.resume import read_history

    write_json(tmp_path / "history.json", [{"epoch": 1, "steps": 3, "best_valid_ppl": math.nan, "epoch_seconds": 1.5}])
    rows = read_history(tmp_path / "history.json", LMRow, "fix it")
    assert rows == [{"epoch": 1, "steps": 3, "best_valid_ppl": None, "epoch_seconds": 1.5}]


def test_read_text_refuses_what_is_not_a_text_file_naming_it(tmp_path):
    """The reader of a text file a user names: a FIFO (which would never end), a device (which would fill the
    memory), a folder and bytes that are not UTF-8 are one InputError naming the path; a missing file stays the
    caller's OSError (each command words it); a lone \\r is kept as it is."""
    import os

    from onlstm.files import read_text

    (tmp_path / "ok.txt").write_bytes(b"a\rb\n")
    assert read_text(tmp_path / "ok.txt") == "a\rb\n"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\xfe")
    cases = {tmp_path / "fifo": "is a FIFO (named pipe), not a regular file", tmp_path: "is a folder, not a regular"}
    cases[tmp_path / "bad.txt"] = "is not UTF-8 text (invalid start byte at byte 3)"
    if os.path.exists("/dev/zero"):
        cases[Path("/dev/zero")] = "is a device, not a regular file"
    for path, words in cases.items():
        with pytest.raises(InputError, match=re.escape(f"{path} {words}")):
            read_text(path)
    with pytest.raises(FileNotFoundError):
        read_text(tmp_path / "nope.txt")


ENGLISH = "the cat sat on the mat\na dog ran\n"


@pytest.mark.parametrize("reader", ["read_text", "iter_lines"])
def test_utf16_text_is_named_with_the_way_to_convert_it(tmp_path, reader):
    """Windows editors save "Unicode" as UTF-16: with its byte-order mark it is no UTF-8 and the message says which
    encoding it is; without the mark it decodes as UTF-8 with a NUL after every letter, which was read as words."""
    from onlstm import files

    read = (lambda p: files.read_text(p)) if reader == "read_text" else (lambda p: list(files.iter_lines(p)))
    marked, bare = tmp_path / "marked.txt", tmp_path / "bare.txt"
    marked.write_bytes(ENGLISH.encode("utf-16"))  # the mark first, in the machine's byte order
    bare.write_bytes(ENGLISH.encode("utf-16-le"))
    with pytest.raises(InputError, match=r"it is UTF-16 .*iconv -f utf-16 -t utf-8"):
        read(marked)
    with pytest.raises(InputError, match=r"bare.txt: line 1 holds a NUL byte.*iconv -f utf-16 -t utf-8"):
        read(bare)
    late = tmp_path / "late.txt"
    late.write_bytes(b"first line\nsecond\x00line\n")
    with pytest.raises(InputError, match=r"late.txt: line 2 holds a NUL byte"):
        read(late)
    plain = tmp_path / "plain.txt"
    plain.write_text(ENGLISH, encoding="utf-8")
    assert read(plain) == (ENGLISH if reader == "read_text" else ENGLISH.splitlines())


def test_a_utf16_corpus_is_one_line_and_its_exit_status(tmp_path, capsys):
    from onlstm.cli import main
    from onlstm.errors import EXIT_BAD_INPUT

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "valid", "test"):
        (corpus / f"{split}.txt").write_bytes(ENGLISH.encode("utf-16-le"))
    rc = main(["lm", "train", "--data-dir", str(corpus), "--out", str(tmp_path / "run"), "--epochs", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == EXIT_BAD_INPUT and len(err) == 1 and "train.txt: line 1 holds a NUL byte" in err[0], err
    assert not (tmp_path / "run").exists()  # nothing written
