"""``onlstm lm compare`` (#45): the grid trained as processes and measured by the project's own commands, reused when
finished; the tables' statistics against hand-computed values; the verdict's direction (lower perplexity is better)."""

from __future__ import annotations

import json
import math

import pytest

from onlstm.cli import main
from onlstm.lm import compare as study
from onlstm.studies.stats import mean_std, seed_difference
from support import TINY_LM, write_corpus

MRG = "( (S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat))))) )\n"
PAIRS = "simple_agrmt\tthe cat sat on the mat\tthe cat sat on the on\nsent_comp\ta dog ran\ta dog a\n"


def test_seed_difference_by_hand():
    assert mean_std([1.0, 3.0]) == (2.0, math.sqrt(2.0))
    d = seed_difference([10.0, 12.0, 14.0], [1.0, 2.0, 3.0])  # diff 10, se sqrt(4/3 + 1/3)
    assert d["difference"] == 10.0 and d["se"] == pytest.approx(math.sqrt(5 / 3)) and d["verdict"] == "ahead"
    assert seed_difference([10.0, 12.0, 14.0], [1.0, 2.0, 3.0], higher_is_better=False)["verdict"] == "behind"
    assert seed_difference([1.0, 3.0], [2.0, 2.5])["verdict"] == "level"  # diff -0.75, se 1.01
    assert seed_difference([1.0], [2.0, 3.0])["difference"] is None


def test_tables_compare_the_first_cell_with_lower_perplexity_as_better():
    res = study.StudyResult(out_dir=None)  # type: ignore[arg-type]
    for cell, ppls in (("onlstm", [100.0, 101.0, 102.0]), ("lstm", [110.0, 111.0, 112.0])):
        res.runs += [{"cell": cell, "seed": s, "figures": {"test_ppl": p}} for s, p in enumerate(ppls)]
    res.unfinished.append({"cell": "lstm", "seed": 9, "status": "interrupted after 2.00 epochs"})
    text = study.tables(res, ["onlstm", "lstm"])
    row = next(line for line in text.splitlines() if line.startswith("| PTB test perplexity"))
    assert "101.00 ± 1.00 (3)" in row and "111.00 ± 1.00 (3)" in row and "-10.00 (0.82): ahead" in row
    assert "not measured: lstm, seed 9: interrupted after 2.00 epochs" in text


def test_a_suite_the_model_cannot_score_is_named_apart_not_averaged():
    """npz_ambig's comma conditions hold a region of a lone comma, which a PTB model reads nothing of: the suite
    has no accuracy (issue #45: never scored as 0); the mean runs over the suites scored, and a note names it."""
    suites = {"a": {"accuracy": 0.5}, "b": {"accuracy": 1.0}, "npz_ambig": {"accuracy": None}}
    figures = {"test_ppl": 80.0, "syntaxgym": suites, "marvin_linzen": {"x": {"accuracy": None}}}
    got = study.measures(figures)
    assert got["SyntaxGym, mean over the suites scored"] == (75.0, True)
    assert got["SyntaxGym npz_ambig"] == (None, True) and got["Marvin & Linzen, mean over cases"] == (None, True)
    res = study.StudyResult(out_dir=None)  # type: ignore[arg-type]
    res.runs += [{"cell": c, "seed": 1, "figures": figures} for c in ("onlstm", "lstm")]
    text = study.tables(res, ["onlstm", "lstm"])
    assert "- SyntaxGym suites not scored by onlstm, seed 1 (no item it can read): npz_ambig" in text
    assert "- Marvin & Linzen cases not scored by lstm, seed 1 (no item it can read): x" in text
    row = next(line for line in text.splitlines() if line.startswith("| SyntaxGym npz_ambig"))
    assert row.startswith("| SyntaxGym npz_ambig | - | - |")


@pytest.mark.slow
def test_the_grid_is_trained_measured_and_reused(tmp_path, capsys):
    data = write_corpus(tmp_path / "corpus")
    (tmp_path / "bank").mkdir()
    (tmp_path / "bank" / "wsj_0001.mrg").write_text(MRG * 3)
    (tmp_path / "pairs.tsv").write_text(PAIRS)
    out = tmp_path / "study"
    argv = ["lm", "compare", "--config", str(TINY_LM), "--data-dir", str(data), "--out", str(out), "--epochs", "1"]
    argv += ["--seeds", "1", "--jobs", "2", "--treebank", str(tmp_path / "bank")]  # the statistics: tested above
    argv += ["--syneval-data", str(tmp_path / "pairs.tsv"), "--no-progress"]
    assert main(argv) == 0, capsys.readouterr()
    record = json.loads((out / "compare.json").read_text())
    assert [(r["cell"], r["seed"]) for r in record["runs"]] == [("onlstm", 1), ("lstm", 1)]
    for run in record["runs"]:
        figures = run["figures"]
        got = json.loads((out / f"{run['cell']}-seed{run['seed']}" / "results.json").read_text())
        assert figures["test_ppl"] == got["test"]["ppl"] > 1  # the run's own final test
        if run["cell"] == "onlstm":  # an LSTM has no master gates: no trees
            assert set(figures["wsj10"]["layers"]) == {"layer 1", "layer 2"}
            # by hand: right-branching finds 3 of the gold spans (sat..mat, on..mat, the mat) and misses "the cat";
            # it proposes 4 spans (cat..mat, sat..mat, on..mat, the mat): precision = recall = 3/4
            assert figures["wsj10"]["baselines"]["right-branching"] == pytest.approx(0.75)
        else:
            assert "wsj10" not in figures
        assert set(figures["marvin_linzen"]) == {"simple_agrmt", "sent_comp"}
    tables = (out / "tables.md").read_text()
    assert "| PTB test perplexity | " in tables and "(1)" in tables and "not decided (< 2 seeds a side)" in tables
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")}
    assert main(argv + ["--finished-only"]) == 0  # nothing trained or measured again: the same files
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")} == stamps
    assert (out / "tables.md").read_text() == tables
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_finished_only_lists_runs_not_started(tmp_path, capsys):
    data = write_corpus(tmp_path / "corpus")
    argv = ["lm", "compare", "--config", str(TINY_LM), "--data-dir", str(data), "--out", str(tmp_path / "s")]
    assert main([*argv, "--seeds", "1", "--finished-only"]) == 0
    out = capsys.readouterr().out
    assert "not measured: onlstm, seed 1: not started" in out and "not measured: lstm, seed 1: not started" in out


def test_curve_band_is_over_the_runs_that_reached_each_epoch(tmp_path):
    from onlstm.lm.plots import band, plot_validation_curves, read_curve

    log = tmp_path / "log.csv"
    log.write_text("epoch,steps,valid_ppl,train_ppl\n1,10,200.0,300.0\n2,20,150.0,220.0\n")
    first = read_curve(log)
    assert first == [(1, 200.0), (2, 150.0)] and read_curve(tmp_path / "none.csv") == []
    rows = band([first, [(1, 180.0)]])  # the second run is still in its second epoch: nothing projected
    assert rows[0][:2] == (1, 190.0) and rows[0][2] == pytest.approx(math.sqrt(200.0)) and rows[0][3] == 2
    assert rows[1][:2] == (2, 150.0) and math.isnan(rows[1][2]) and rows[1][3] == 1
    path = plot_validation_curves({"onlstm": [(first, True), ([(1, 180.0)], False)], "lstm": [([], False)]},
                                  tmp_path / "c.png")  # fmt: skip
    assert path.read_bytes()[:4] == b"\x89PNG"
