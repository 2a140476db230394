"""The #45 study's kept records (docs/results/records/lm-study: each run without its weights, with its kept
evaluations) read by the study's own command give the tables the results pages quote, byte for byte: the published
figures are what the code reads from the runs, with Marvin & Linzen's suite generated anew. Needs ../shared/data
(the PTB text the runs trained on, the WSJ sample, the SyntaxGym suites); skipped without it."""

from __future__ import annotations

import shutil

import pytest

from onlstm.cli import main
from support import REPO, SHARED_DATA

RECORDS = REPO / "docs" / "results" / "records" / "lm-study"
NEEDED = [SHARED_DATA / "ptb", SHARED_DATA / "treebank", SHARED_DATA / "syntaxgym" / "suites"]


@pytest.mark.skipif(not all(p.exists() for p in NEEDED), reason="needs ../shared/data (ptb, treebank, syntaxgym)")
@pytest.mark.skipif(not (RECORDS / "tables.md").is_file(), reason="no kept study in this checkout")
def test_the_kept_study_reads_as_published(tmp_path, capsys):
    out = tmp_path / "study"
    shutil.copytree(RECORDS, out, ignore=shutil.ignore_patterns("tables.md", "compare.json", "curves.png", "sys*"))
    assert main(["data", "marvin-linzen", "--out", str(tmp_path / "ml")]) == 0
    argv = ["lm", "compare", "--config", "ptb-cpu", "--data-dir", str(SHARED_DATA / "ptb"), "--out", str(out)]
    argv += ["--cells", "onlstm", "lstm", "--seeds", "141", "142", "143", "--epochs", "30", "--asgd-start-epoch"]
    argv += ["15", "--patience", "3", "--threads", "1", "--finished-only", "--treebank", str(SHARED_DATA / "treebank")]
    argv += ["--syneval-data", str(tmp_path / "ml" / "marvin_linzen.tsv"), "--suites"]
    argv += [str(SHARED_DATA / "syntaxgym" / "suites"), "--eval-threads", "1", "--no-progress"]
    code, said = main(argv), capsys.readouterr()
    assert code == 0, said.err[-2000:]
    ran = said.out + said.err  # each measuring command is named as it starts: a kept one is read, not run
    assert "onlstm syneval" not in ran and "onlstm parsing" not in ran, "a kept evaluation was run again:\n" + ran
    assert (out / "tables.md").read_text() == (RECORDS / "tables.md").read_text()
