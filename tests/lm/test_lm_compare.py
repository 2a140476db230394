"""``onlstm lm compare`` (#45): the grid trained as processes and measured by the project's own commands, reused when
finished; the tables' statistics against hand-computed values; the verdict's direction (lower perplexity is better)."""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest

from onlstm.cli import main
from onlstm.files import sha256_file
from onlstm.lm import compare as study
from onlstm.lm.config import TrainConfig
from onlstm.runs.dirs import RunDir
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
    res.runs = []  # none finished: a line says so, not a table of headers
    assert study.tables(res, ["onlstm", "lstm"]).splitlines()[0] == "No run finished yet."


def test_the_parsing_claim_is_each_layer_against_right_branching_and_an_lstm_row_has_no_verdict():
    """The paper's parsing claim (its trees beat right-branching) is tested per layer over the ON-LSTM's seeds, by
    hand: layer 2 at 60, 62, 64 against right-branching's 50 (the same trees every run): +12, SE 2/sqrt(3), ahead;
    layer 1 at 49, 51, 50: level. The LSTM has no trees: its parsing rows compare nothing ("-"), and the Marvin &
    Linzen coverage is stated once when every run covers the same share."""
    res = study.StudyResult(out_dir=None)  # type: ignore[arg-type]
    for seed, (one, two) in enumerate(((49.0, 60.0), (51.0, 62.0), (50.0, 64.0))):
        wsj10 = {"layers": {"layer 1": one / 100, "layer 2": two / 100}, "baselines": {"right-branching": 0.5}}
        ml = {"simple_agrmt": {"accuracy": 0.9, "coverage": 0.75}}
        res.runs.append({"cell": "onlstm", "seed": seed, "figures": {"wsj10": wsj10, "marvin_linzen": ml}})
        res.runs.append({"cell": "lstm", "seed": seed, "figures": {"marvin_linzen": ml}})
    text = study.tables(res, ["onlstm", "lstm"])
    lines = text.splitlines()
    two = next(line for line in lines if line.startswith("| onlstm, WSJ10, layer 2 |"))
    assert two == f"| onlstm, WSJ10, layer 2 | +12.00 ({2 / math.sqrt(3):.2f}): ahead |"
    assert next(line for line in lines if line.startswith("| onlstm, WSJ10, layer 1 |")).endswith(": level |")
    assert next(line for line in lines if line.startswith("| WSJ10 sentence F1, layer 2 |")).endswith("| - | - |")
    assert "- Marvin & Linzen pairs covered by the vocabulary: simple_agrmt 75%" in lines


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
    # Hu et al.'s SG score and circuits, as syneval's report gives them, each a row; what it averages, a note
    sg = {"score": 0.75, "suites": 2, "of": 3, "left_out": ["nn-nv-rpl"], "by_circuit": {"Agreement": {"score": 0.5}}}
    got = study.measures(figures | {"sg_score": sg})
    assert got["SyntaxGym SG score (Hu et al. 2020)"] == (75.0, True)
    assert got["SyntaxGym circuit: Agreement"] == (50.0, True)
    res.runs = [{"cell": c, "seed": 1, "figures": figures | {"sg_score": sg}} for c in ("onlstm", "lstm")]
    text = study.tables(res, ["onlstm", "lstm"])
    assert "| SyntaxGym SG score (Hu et al. 2020) | 75.00 (1) | 75.00 (1) |" in text
    assert "- SyntaxGym SG score: the mean over Hu et al.'s suites scored (2 of 3), as their analysis takes it; left " \
           "out by their rule: nn-nv-rpl" in text  # fmt: skip


@pytest.mark.slow
def test_the_per_run_table_has_a_row_a_run_with_how_it_ended(tmp_path):
    """Each measured run is a row (cells, then seeds, in order): its epochs and what stopped it, NT-ASGD's switch
    read from its log.csv, its perplexities and headline figures; a figure it lacks (an LSTM's trees) is "-"."""
    log = tmp_path / "log.csv"
    log.write_text("epoch,valid_ppl,averaging\n1,300,0\n2,200,0\n3,150,1\n4,140,1\n")
    assert study.averaging_from(log) == 3 and study.averaging_from(tmp_path / "none.csv") is None
    log.write_text("epoch,valid_ppl,averaging\n1,300,0\n")
    assert study.averaging_from(log) is None  # SGD still
    res = study.StudyResult(out_dir=None)  # type: ignore[arg-type]
    wsj10 = {"layers": {"layer 2": 0.6125}, "baselines": {}}
    base = {"epochs": 30.0, "stopped_by": "epochs", "averaging_from": 15, "valid_ppl": 83.456, "test_ppl": 80.0}
    res.runs.append({"cell": "lstm", "seed": 2, "figures": dict(base, stopped_by="patience", epochs=27.0)})
    res.runs.append({"cell": "onlstm", "seed": 1, "figures": dict(base, wsj10=wsj10)})
    lines = study.tables(res, ["onlstm", "lstm"]).splitlines()
    start = lines.index(next(line for line in lines if line.startswith("| run |")))
    head, _, first, second = lines[start : start + 4]
    assert head.count("|") == first.count("|") == second.count("|") == 10
    assert first.startswith("| lstm, seed 2 | 27 (patience) | 15 | 83.46 | 80.00 | - | - | - | - |")
    assert second.startswith("| onlstm, seed 1 | 30 (epochs) | 15 | 83.46 | 80.00 | 61.25 | - |")


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
        assert figures["valid_ppl"] == got["valid"]["ppl"] > 1  # and its best validation
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
    # the study kept small (no weights, no resume files: what outlives its machine) reads the same tables
    small = tmp_path / "small"
    shutil.copytree(out, small, ignore=shutil.ignore_patterns("*.safetensors", "*.lock", "vocab.json"))
    assert main([*argv[:7], str(small), *argv[8:], "--finished-only"]) == 0
    assert (small / "tables.md").read_text() == tables
    # a run trained otherwise is neither counted nor trained over: refused, nothing changed
    assert main([*argv, "--lr", "3"]) == 2
    assert "cannot change train.lr (run: 10.0, given: 3.0)" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")} == stamps
    # a larger budget trains the runs further; what is measured is the best weights they hold then (one cell of
    # the two: the same code for both, and a training process fewer)
    assert main([*argv, "--epochs", "2", "--cells", "lstm"]) == 0  # the last --epochs given wins
    record = json.loads((out / "compare.json").read_text())
    (ppl,) = [row for row in record["summary"] if row["measure"] == "PTB test perplexity"]  # the tables' figures
    assert ppl["values"]["lstm"] == [r["figures"]["test_ppl"] for r in record["runs"] if r["cell"] == "lstm"]
    assert ppl["cells"]["lstm"]["n"] == 1 and [r["cell"] for r in record["runs"]] == ["lstm"]
    for run in record["runs"]:
        assert run["figures"]["epochs"] == 2
        best = sha256_file(out / f"{run['cell']}-seed1" / "model.best.safetensors")
        assert (
            json.loads((out / "evals" / f"{run['cell']}-seed1" / "marvin_linzen.json").read_text())["inputs"]["weights"]
            == best
        )


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


def _compare_argv(tmp_path, out, *extra):
    data = write_corpus(tmp_path / "corpus")
    return ["lm", "compare", "--config", str(TINY_LM), "--data-dir", str(data), "--out", str(out), *extra]


def test_a_seed_or_cell_given_twice_is_refused(tmp_path, capsys):
    """One run per cell and seed: a seed named twice would count one run as two seeds (a false verdict)."""
    assert main(_compare_argv(tmp_path, tmp_path / "s", "--seeds", "1", "1", "--finished-only")) == 2
    assert "--seeds gives 1 more than once; name each once" in capsys.readouterr().err
    assert main(_compare_argv(tmp_path, tmp_path / "s", "--cells", "lstm", "lstm", "--finished-only")) == 2
    assert not (tmp_path / "s").exists()


def test_the_grid_sets_each_run_cell_and_seed(tmp_path, capsys):
    """The study has no one-run --cell and --seed (they were taken and ignored): both now read as the grid's
    --cells and --seeds, as argparse reads a flag's prefix; a config file's cell and seed are the grid's to set."""
    assert main(_compare_argv(tmp_path, tmp_path / "s", "--cell", "lstm", "--seed", "5", "--finished-only")) == 0
    record = json.loads((tmp_path / "s" / "compare.json").read_text())
    assert record["cells"] == ["lstm"] and record["seeds"] == [5]
    assert "cell" not in record["settings"]["model"] and "seed" not in record["settings"]["train"]


def test_a_folder_holding_the_users_files_is_refused(tmp_path, capsys):
    """The study writes compare.json and tables.md into --out: a folder holding anything else is not its own."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "tables.md").write_text("MY NOTES\n")
    (out / "compare.json").write_text('{"mine": true}\n')
    assert main(_compare_argv(tmp_path, out, "--seeds", "1", "--finished-only")) == 2
    assert "holds files lm compare did not write (compare.json, tables.md)" in capsys.readouterr().err
    assert (out / "tables.md").read_text() == "MY NOTES\n"
    (out / "compare.json").write_text('{"kind": "lm-compare"}\n')  # the study's own: read again, written again
    (out / "onlstm-seed1.log").write_text("")
    assert main(_compare_argv(tmp_path, out, "--seeds", "1", "--finished-only")) == 0
    assert "not measured: onlstm, seed 1" in (out / "tables.md").read_text()


def test_finished_only_reads_a_study_while_it_trains(tmp_path, capsys):
    """The lock keeps a second training study out; reading the finished runs (--finished-only) needs none."""
    from onlstm.lock import RunLock

    out = tmp_path / "s"
    with RunLock(out, "onlstm lm compare"):
        assert main(_compare_argv(tmp_path, out, "--seeds", "1", "--finished-only")) == 0
        assert main(_compare_argv(tmp_path, out, "--seeds", "1", "--epochs", "1")) == 2
    assert "in use by another training" in capsys.readouterr().err


def test_one_cell_table_is_well_formed():
    res = study.StudyResult(out_dir=None)  # type: ignore[arg-type]
    res.runs.append({"cell": "onlstm", "seed": 1, "figures": {"test_ppl": 90.0}})
    head, rule, row = study.tables(res, ["onlstm"]).splitlines()[:3]
    assert head == "| measure | onlstm |" and rule == "|---|---|" and row == "| PTB test perplexity | 90.00 (1) |"


def test_a_kept_measurement_is_reused_only_for_the_same_inputs(tmp_path, monkeypatch):
    """evals/ keeps each command's output with what it read (the measure, the weights, the data's bytes): another
    suite folder or other weights measure again; the same inputs read the kept file."""
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "a.json").write_text("{}")
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        return type("Done", (), {"returncode": 0, "stdout": json.dumps({"n": len(calls)}), "stderr": ""})()

    monkeypatch.setattr(study.subprocess, "run", run)
    path, key = tmp_path / "evals" / "sg.json", study._inputs("sg", [], "w1", suites)
    assert study._command(path, ["syneval"], key, print) == {"n": 1}
    assert study._command(path, ["syneval"], study._inputs("sg", [], "w1", suites), print) == {"n": 1}
    (suites / "b.json").write_text("{}")  # another suite in the folder
    assert study._command(path, ["syneval"], study._inputs("sg", [], "w1", suites), print) == {"n": 2}
    assert study._command(path, ["syneval"], study._inputs("sg", [], "w2", suites), print) == {"n": 3}
    (suites / "b.json").write_text('{"x": 1}')  # the same names, other bytes
    assert study._command(path, ["syneval"], study._inputs("sg", [], "w2", suites), print) == {"n": 4}
    path.write_text(json.dumps({"n": 0}))  # an earlier version's file: the bare report, inputs unknown
    assert study._command(path, ["syneval"], study._inputs("sg", [], "w2", suites), print) == {"n": 5}
    # a SyntaxGym record is kept without its region rows and item outcomes (about 10 MB for the 34 published
    # suites): what the tables read of it stays
    suite = {"suite": "a", "accuracy": 0.5, "items": 2, "not_scorable_items": 0, "regions": [{}] * 9, "outcomes": {}}
    report = {"models": [{"sg_score": {"score": 0.5}, "suites": [suite]}]}
    done = type("Done", (), {"returncode": 0, "stdout": json.dumps(report), "stderr": ""})()
    monkeypatch.setattr(study.subprocess, "run", lambda cmd, **kw: done)
    sg = tmp_path / "evals" / "syntaxgym.json"
    kept = study._command(sg, ["syneval"], study._inputs("sg", [], "w3", suites), print, keep=study._without_regions)
    assert '"regions"' not in sg.read_text() and '"outcomes"' not in sg.read_text()
    assert study._suites(kept) == study._suites(report) and kept["models"][0]["sg_score"] == {"score": 0.5}


def test_a_run_trained_on_another_text_is_refused_and_an_older_one_said(tmp_path, capsys):
    """A study counts a run only when it was trained on the study's --data-dir text (its fingerprint); a run that
    records none (written before fingerprints) is said, not refused: there is nothing to compare."""
    out, argv = tmp_path / "s", _compare_argv(tmp_path, tmp_path / "s", "--cells", "lstm", "--seeds", "1")
    data = tmp_path / "corpus"
    train = ["lm", "train", "--config", str(TINY_LM), "--cell", "lstm", "--seed", "1", "--max-steps", "1"]
    assert main([*train, "--data-dir", str(data), "--out", str(out / "lstm-seed1"), "--no-progress"]) == 0
    assert main([*argv, "--finished-only"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    with (data / "ptb.train.txt").open("a") as f:
        f.write("the cat sat\n")  # the same words: only the fingerprint tells the texts apart
    assert main([*argv, "--finished-only"]) == 2
    err = capsys.readouterr().err
    assert "--data-dir: " in err and "is not the training text of the run in" in err and "give the study's" in err
    config = out / "lstm-seed1" / "config.json"
    header = json.loads(config.read_text())
    del header["data"]["train_sha256"]
    config.write_text(json.dumps(header))
    assert main([*argv, "--finished-only"]) == 0
    assert "records no fingerprint of its training text" in capsys.readouterr().out


def test_an_unfinished_run_says_how_far_it_got(tmp_path):
    """A study in progress says of each run not measured yet how many epochs it has done and its best validation
    perplexity so far, from its log.csv (a row cut short is left out), and whether it may be training now."""
    run = tmp_path / "onlstm-seed1"
    run.mkdir()
    assert study._status(tmp_path / "none", TrainConfig()) == "not started"
    (run / "config.json").write_text(json.dumps({"kind": "lm", "train": {"epochs": 30}}))
    assert study._status(run, TrainConfig()) == "unfinished (training now, or killed): no validation yet"
    (run / "log.csv").write_text("epoch,steps,valid_ppl\n1,10,150.5\n2,20,nan\n3,30,140.25\n4,40\n")
    assert study._status(run, TrainConfig()) == (
        "unfinished (training now, or killed): 3 of 30 epochs done, best validation perplexity 140.25"
    )
    (run / "results.json").write_text(json.dumps({"status": "interrupted", "epochs": 3.5}))
    assert study._status(run, TrainConfig()).startswith(
        "unfinished (interrupted, or training again): 3 of 30 epochs done"
    )
    with RunDir(run).lock("onlstm lm train"):  # a live process holds its lock: training now, and who
        assert study._status(run, TrainConfig()).startswith(f"unfinished (training now, pid {os.getpid()} on host")
    (run / "results.json").write_text(json.dumps({"status": "stopped", "epochs": 3.5, "stopped_by": "max_steps"}))
    assert study._status(run, TrainConfig()) == "stopped after 3.50 epochs (by max_steps)"


def test_an_interrupted_study_ends_with_the_commands_line(tmp_path, monkeypatch, capsys):
    """A Ctrl-C (the runs stop and save) ends `lm compare` as every command: `onlstm lm compare: interrupted`, 130."""
    from onlstm.studies.parallel import Ended

    data = write_corpus(tmp_path / "corpus")
    stopped = lambda todo, jobs, log: [Ended(job.name, 130, "interrupted (its resume file saved)") for job in todo]
    monkeypatch.setattr(study, "train_in_processes", stopped)
    argv = ["lm", "compare", "--config", str(TINY_LM), "--data-dir", str(data), "--out", str(tmp_path / "s")]
    assert main([*argv, "--seeds", "1"]) == 130
    assert capsys.readouterr().err.strip().endswith("onlstm lm compare: interrupted")


def test_a_run_past_the_studys_budget_is_neither_measured_nor_reused(tmp_path, capsys):
    """A study of 1 epoch reused runs of 2 and showed their figures under "epochs: 1"; --max-steps or --time-limit
    stopped every run without a final test, so the tables stayed empty and the command said 0."""
    out = tmp_path / "s"
    argv = _compare_argv(tmp_path, out, "--cells", "lstm", "--seeds", "1", "--no-progress")
    assert main([*argv, "--epochs", "2"]) == 0
    capsys.readouterr()
    assert main([*argv, "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "holds a run trained past this study's budget (2 epochs, over its 1)" in err
    assert main([*argv, "--epochs", "1", "--finished-only"]) == 0
    record = json.loads((out / "compare.json").read_text())
    assert record["runs"] == [] and "past this study's budget" in record["unfinished"][0]["status"]
    for flag in ("--max-steps", "--time-limit"):
        assert main([*argv, flag, "5"]) == 2
        assert "has no final test" in capsys.readouterr().err


def test_a_word_outside_the_vocabulary_is_one_line_before_any_run_starts(tmp_path, capsys):
    """Every run's process failed on the same word, a dozen lines, and the folder kept four logs and the tables."""
    out = tmp_path / "s"
    argv = _compare_argv(tmp_path, out, "--seeds", "1", "2", "--no-progress", "--jobs", "2")
    with (tmp_path / "corpus" / "ptb.train.txt").open("a") as f:
        f.write("the <unk> sat\n")  # <unk> in the training text: a closed vocabulary, as PTB's
    with (tmp_path / "corpus" / "ptb.test.txt").open("a") as f:
        f.write("the zyzzyva sat\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "'zyzzyva' is not in the training vocabulary" in err
    assert not out.exists() or not any(out.iterdir())


def test_a_figure_of_another_test_file_is_not_measured(tmp_path, capsys):
    """The tables showed a run's final test perplexity after --data-dir's test file had changed; the run now keeps
    the fingerprint of the file its final test read."""
    out = tmp_path / "s"
    argv = _compare_argv(tmp_path, out, "--cells", "lstm", "--seeds", "1", "--no-progress", "--epochs", "1")
    assert main(argv) == 0
    test = tmp_path / "corpus" / "ptb.test.txt"
    assert json.loads((out / "lstm-seed1" / "results.json").read_text())["test"]["sha256"] == sha256_file(test)
    test.write_text("\n".join(test.read_text().splitlines()[:4]) + "\n")
    capsys.readouterr()
    assert main([*argv, "--finished-only"]) == 0
    record = json.loads((out / "compare.json").read_text())
    assert record["runs"] == [] and "read another test file" in record["unfinished"][0]["status"]
