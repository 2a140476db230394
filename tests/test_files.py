"""onlstm.files' readers and JSON writer (issue 48): lines end at "\\n" only, and no JSON the project writes holds
NaN or Infinity (not JSON: strict readers refuse the file)."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pytest

from onlstm.errors import InputError
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
