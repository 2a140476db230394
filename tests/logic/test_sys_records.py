"""Issue #50's systematicity grid, kept in docs/results/records/lm-study/sysB and sysC (each run without its
weights, with its kept score on the held-out pairs), read by the grid's own command gives the table the results
page publishes (records/lm-study/sysB.md, sysC.md), byte for byte: the held-out pairs are made again from the
training files by ``logic holdout`` and the kept scores are read back only while those pairs are the same. Needs
../shared/data/logic-train; skipped without it, and for a split whose table is not published yet."""

from __future__ import annotations

import shutil

import pytest

from onlstm.cli import main
from support import REPO, SHARED_DATA

RECORDS = REPO / "docs" / "results" / "records" / "lm-study"
GRID = ["--config", "paper", "--cells", "onlstm", "lstm-std", "--seeds", "1111", "1112", "1113", "--epochs", "20"]


@pytest.mark.skipif(not (SHARED_DATA / "logic-train").is_dir(), reason="needs ../shared/data/logic-train")
@pytest.mark.parametrize("split", ["B", "C"])
def test_the_kept_grid_reads_as_published(split, tmp_path, capsys):
    published = RECORDS / f"sys{split}.md"
    if not published.is_file():
        pytest.skip(f"split {split}'s table is not published yet (the grid is running)")
    data, out = tmp_path / "data", tmp_path / f"sys{split}"
    holdout = ["logic", "holdout", "--data", str(SHARED_DATA / "logic-train"), "--split", split, "--out", str(data)]
    assert main(holdout) == 0
    shutil.copytree(RECORDS / f"sys{split}", out)
    argv = ["logic", "compare", *GRID, "--threads", "1", "--no-progress", "--data", str(data), "--out", str(out)]
    code, said = main([*argv, "--finished-only"]), capsys.readouterr()
    assert code == 0, said.err[-2000:]
    assert "to evaluate" not in said.out, "a kept score was not read back:\n" + said.out
    assert (out / "table.md").read_text() == published.read_text()
