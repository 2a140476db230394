"""`logic compare` for a study whose runs are trained elsewhere and still going (issue #32): `--finished-only`
scores the finished runs and lists the others with how far they got, `--test-data` scores on another folder's
test files, and the verdict on the pooled 7-12 difference (ahead/behind only beyond two standard errors)."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import signal
from pathlib import Path

import pytest

from onlstm.cli import main
from onlstm.logic.compare import _progress, difference, difference_line, verdict_pool
from onlstm.logic.config import LogicTrainConfig
from onlstm.logic.data import TRAIN_FINGERPRINT, training_fingerprint
from onlstm.logic.evaluate import LengthAccuracy
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.runs.dirs import RunDir

FLAGS = ["--emb-size", "8", "--hidden-size", "16", "--chunk-size", "4", "--mlp-hidden", "16", "--no-progress"]
FLAGS += ["--epochs", "1", "--batch-size", "32", "--lengths", "1-9"]


def pooled(*accuracies: float) -> list[LengthAccuracy]:
    """One result per seed whose pooled 7-12 accuracy is the given value (1,000 pairs of length 8)."""
    return [LengthAccuracy({8: round(1000 * a)}, {8: 1000}) for a in accuracies]


def test_the_verdict_needs_a_difference_beyond_two_standard_errors():
    a, b = [0.80, 0.82, 0.84], [0.70, 0.71, 0.72]
    d = difference(pooled(*a), pooled(*b))
    se = math.sqrt(0.02**2 / 3 + 0.01**2 / 3)  # sample std 0.02 and 0.01, by hand
    assert d["difference"] == pytest.approx(0.11) and d["se"] == pytest.approx(se)
    assert d["verdict"] == "ahead" and d["seeds"] == [3, 3]
    assert difference(pooled(*b), pooled(*a))["verdict"] == "behind"
    assert difference(pooled(0.80, 0.90), pooled(0.80, 0.84))["verdict"] == "level"  # +0.03, SE 0.036
    one = difference(pooled(0.9), pooled(0.5, 0.6))
    assert one["difference"] is None and one["verdict"].startswith("not decided")
    assert "+11.00 points" in difference_line("onlstm", "lstm", d) and ": ahead" in difference_line("x", "y", d)


def test_the_verdict_is_on_7_to_12_operators_when_the_scored_pairs_have_them_else_on_all():
    assert verdict_pool(LengthAccuracy({3: 5, 8: 1}, {3: 10, 8: 2})) == "7-12"
    assert verdict_pool(LengthAccuracy({2: 1, 6: 5}, {2: 2, 6: 10})) == "all"  # held-out pairs of a split
    d = difference(pooled(0.8, 0.82), pooled(0.7, 0.71), verdict_pool(pooled(0.5)[0]))
    assert d["pool"] == "7-12" and d["verdict"] == "ahead"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    """Training data (with its test files) and a second folder whose test files differ (another seed)."""
    root = tmp_path_factory.mktemp("study-data")
    generate_dataset(root / "a", GenerateConfig(per_length=24, seed=3, max_ops=9, test_count=6))
    generate_dataset(root / "b", GenerateConfig(per_length=10, seed=4, max_ops=9, test_count=4))
    return root / "a", root / "b"


def test_finished_only_scores_the_finished_runs_and_lists_the_rest(data, tmp_path, capsys):
    train_data, other = data
    out = tmp_path / "study"
    base = ["logic", "compare", "--data", str(train_data), "--out", str(out), *FLAGS, "--cells", "onlstm", "lstm"]
    assert main([*base, "--seeds", "0"]) == 0  # trains both seed-0 runs
    capsys.readouterr()
    record = out / "lstm-seed0" / "results.json"
    record.write_text(json.dumps(json.loads(record.read_text()) | {"status": "interrupted"}))  # as if still going
    assert main([*base, "--seeds", "0", "1", "--finished-only"]) == 0
    text = capsys.readouterr().out
    assert not (out / "onlstm-seed1").exists() and not (out / "lstm-seed1").exists()  # nothing trained
    rep = json.loads((out / "compare.json").read_text())
    assert [(r["cell"], r["seed"]) for r in rep["runs"]] == [("onlstm", 0)]
    status = {(u["cell"], u["seed"]): u["status"] for u in rep["unfinished"]}
    assert status[("lstm", 0)].startswith("interrupted: epoch 1 of 1, best validation ")
    with RunDir(out / "lstm-seed0").lock("onlstm logic train"):  # a live process trains it: that, not its record
        held = _progress(out / "lstm-seed0", "interrupted", LogicTrainConfig(epochs=1))
    assert held.startswith(f"training now (pid {os.getpid()} on host ") and held.endswith(status[("lstm", 0)][11:])
    assert status[("onlstm", 1)] == status[("lstm", 1)] == "not started"
    assert "not scored: lstm, seed 0: interrupted" in text and "reusing" not in text
    assert "pooled 7-12: not decided" in (out / "table.md").read_text()
    # the finished run scored on another folder's test pairs: their count, not the training folder's
    assert main([*base, "--seeds", "0", "--finished-only", "--test-data", str(other)]) == 0
    rep = json.loads((out / "compare.json").read_text())
    assert rep["test_data"] == str(other)
    assert sum(v["total"] for v in rep["runs"][0]["test"]["by_length"].values()) == 4 * 9
    assert json.loads(record.read_text())["status"] == "interrupted"  # the listed run was left as it was
    # the study kept small (no weights: what outlives its machine): a kept score stands, other pairs need weights
    small, rep = tmp_path / "small", json.loads((out / "compare.json").read_text())
    shutil.copytree(out, small, ignore=shutil.ignore_patterns("*.safetensors"))
    small_base = [*base[:5], str(small), *base[6:]]
    assert main([*small_base, "--seeds", "0", "--finished-only", "--test-data", str(other)]) == 0
    kept = json.loads((small / "compare.json").read_text())["runs"]
    assert [r["test"]["by_length"] for r in kept] == [r["test"]["by_length"] for r in rep["runs"]]
    capsys.readouterr()
    assert main([*small_base, "--seeds", "0", "--finished-only"]) == 2
    assert "holds no weights and no kept score on these pairs" in capsys.readouterr().err


def test_finished_only_with_no_finished_run_says_so(data, tmp_path, capsys):
    train_data, _ = data
    out = tmp_path / "empty"
    argv = ["logic", "compare", "--data", str(train_data), "--out", str(out), *FLAGS, "--finished-only"]
    assert main(argv) == 0
    assert "no run is finished yet" in capsys.readouterr().out
    assert json.loads((out / "compare.json").read_text())["unfinished"]


# --------------------------------------------------------------------------- the audit of #50: what a run is, whose
# folder --out is, one run per cell and seed, and how to go on after a Ctrl-C


def _generate(folder: Path, seed: int) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    generate_dataset(folder, GenerateConfig(per_length=24, seed=seed, max_ops=9, test_count=6))
    return folder


def test_a_run_counts_for_the_same_training_files_however_the_path_is_spelled(tmp_path, capsys, monkeypatch):
    """The data a run was trained on is the bytes of its training files (their fingerprint in config.json), not the
    text of the path: the folder generated again with another seed is other data (refused, never scored as the old
    run on the new test pairs), the same folder spelled relative is the same data (reused)."""
    monkeypatch.chdir(tmp_path)
    data, out = _generate(tmp_path / "data", seed=3), tmp_path / "study"
    base = ["logic", "compare", "--out", str(out), *FLAGS, "--cells", "onlstm", "--seeds", "0"]
    assert main([*base, "--data", str(data)]) == 0
    header = json.loads((out / "onlstm-seed0" / "config.json").read_text())
    assert header["data"][TRAIN_FINGERPRINT] == training_fingerprint(data, LogicTrainConfig())
    capsys.readouterr()
    assert main([*base, "--data", "data"]) == 0  # relative: the same files
    assert "reusing the finished run" in capsys.readouterr().out
    _generate(data, seed=4)  # the same path, other pairs: the run is not this data's, and is never deleted
    assert main([*base, "--data", "data"]) == 2
    assert "holds a run trained on other data" in capsys.readouterr().err
    assert (out / "onlstm-seed0" / "model.best.safetensors").exists()
    shutil.rmtree(out / "onlstm-seed0")  # moved away by the user: trained again
    assert main([*base, "--data", "data"]) == 0
    text = capsys.readouterr().out
    assert "reusing" not in text and "training into" in text
    header = json.loads((out / "onlstm-seed0" / "config.json").read_text())
    assert header["data"][TRAIN_FINGERPRINT] == training_fingerprint(data, LogicTrainConfig())
    # a run written before fingerprints were recorded: its path, resolved, is what there is to compare
    del header["data"][TRAIN_FINGERPRINT]
    (out / "onlstm-seed0" / "config.json").write_text(json.dumps(header))
    assert main([*base, "--data", str(data), "--finished-only"]) == 0
    assert json.loads((out / "compare.json").read_text())["runs"][0]["seed"] == 0
    assert main([*base, "--data", str(_generate(tmp_path / "copy", seed=4)), "--finished-only"]) == 0
    assert "not scored, trained on other data (data)" in capsys.readouterr().out


def test_a_cell_or_seed_named_twice_is_refused(data, tmp_path, capsys):
    """One run per cell and seed: a seed named twice would count one run as two seeds (a verdict on a fake one)."""
    base = ["logic", "compare", "--data", str(data[0]), "--out", str(tmp_path / "s"), *FLAGS, "--finished-only"]
    assert main([*base, "--seeds", "0", "0"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--seeds (compare.seeds) gives 0 more than once; name each" in err
    assert main([*base, "--cells", "onlstm", "lstm", "onlstm"]) == 2
    assert "--cells (compare.cells) gives onlstm more than once" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_a_folder_holding_the_users_files_is_refused(data, tmp_path, capsys):
    """compare writes compare.json, table.md and its figures into --out: a folder holding anything but what a
    comparison writes is the user's, refused before any work, whatever the files are called."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "table.md").write_text("MY NOTES\n")
    (out / "compare.json").write_text('{"mine": true}\n')
    base = ["logic", "compare", "--data", str(data[0]), "--out", str(out), *FLAGS, "--finished-only"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "holds files logic compare did not write (compare.json, table.md)" in err and len(err.splitlines()) == 1
    assert (out / "table.md").read_text() == "MY NOTES\n" and (out / "compare.json").read_text() == '{"mine": true}\n'
    # a comparison's own folder: its record, its table, its runs and their logs
    (out / "compare.json").write_text('{"kind": "logic-compare"}\n')
    (out / "onlstm-seed0.log").write_text("")
    (out / "lstm-seed0").mkdir()
    assert main(base) == 0
    assert [u["status"] for u in json.loads((out / "compare.json").read_text())["unfinished"]] == ["not started"] * 2
    (out / "notes.txt").write_text("mine")
    assert main(base) == 2
    assert "(notes.txt)" in capsys.readouterr().err and (out / "notes.txt").read_text() == "mine"


def ctrl_c_at_batch(monkeypatch, n: int):
    """A Ctrl-C (a real SIGINT) while the ``n``-th batch is made; returns the real ``collate`` to put back."""
    from onlstm.logic import model as M

    real, calls = M.collate, {"n": 0}

    def collate(batch):
        calls["n"] += 1
        if calls["n"] == n:
            signal.raise_signal(signal.SIGINT)
        return real(batch)

    monkeypatch.setattr(M, "collate", collate)
    return real


def test_ctrl_c_says_to_go_on_with_the_comparison(data, tmp_path, monkeypatch, capsys):
    """Ctrl-C in a run of a comparison: the run saves its resume file and the line says to run the comparison again
    (which resumes it), not `logic train --resume`; the command ends as every command does (`: interrupted`, 130)."""
    from onlstm.logic import model as M

    real = ctrl_c_at_batch(monkeypatch, 9)
    out = tmp_path / "s p a c e"
    argv = ["logic", "compare", "--data", str(data[0]), "--out", str(out), *FLAGS, "--cells", "onlstm"]
    assert main([*argv, "--epochs", "3", "--valid-every", "3", "--lr", "0.002"]) == 130
    monkeypatch.setattr(M, "collate", real)
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == "onlstm logic compare: interrupted"
    (go_on,) = re.findall(r"continue with: (onlstm logic compare .*)$", captured.out, re.MULTILINE)
    assert "logic train --resume" not in captured.out
    assert main(shlex.split(go_on)[1:]) == 0  # the line, as given, goes on
    assert "resuming the interrupted run in" in capsys.readouterr().out


def test_two_comparisons_over_one_grid_meet_at_a_run_one_is_training(data, tmp_path, monkeypatch, capsys):
    """Two processes over one grid (one taking it from the far end): the one reaching the run the other trains
    stops there in one line naming that process, and leaves the run as it was; its log said "resuming" before."""
    from onlstm.logic import model as M

    real = ctrl_c_at_batch(monkeypatch, 9)
    out = tmp_path / "study"
    argv = ["logic", "compare", "--data", str(data[0]), "--out", str(out), *FLAGS, "--cells", "onlstm", "--seeds", "0"]
    assert main([*argv, "--epochs", "3", "--valid-every", "3"]) == 130  # a run with its resume file, as in training
    monkeypatch.setattr(M, "collate", real)
    run = out / "onlstm-seed0"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    capsys.readouterr()
    with RunDir(run).lock("onlstm logic compare"):
        assert main([*argv, "--epochs", "3", "--valid-every", "3"]) == 2
        after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != RunDir.LOCK}
    said = capsys.readouterr()
    assert f"== onlstm, seed 0: training now (pid {os.getpid()} on host " in said.out and "resuming" not in said.out
    assert f"in use by another training: pid {os.getpid()}" in said.err and len(said.err.strip().splitlines()) == 1
    assert after == before


def test_a_finished_run_is_never_deleted_to_train_it_again_with_other_settings(data, tmp_path, capsys):
    """A rerun with another --lr, or a lower budget, deleted every finished run and trained it again, its only line
    the one of a new run (forgetting --config paper wiped a study)."""
    out = tmp_path / "study"
    base = ["logic", "compare", "--data", str(data[0]), "--out", str(out), *FLAGS, "--cells", "onlstm", "--seeds", "0"]
    assert main([*base, "--epochs", "2"]) == 0
    before = (out / "onlstm-seed0" / "model.best.safetensors").read_bytes()
    capsys.readouterr()
    for change, why in (
        (["--lr", "0.006"], "with other settings (cannot change"),
        (["--epochs", "1"], "past this budget"),
    ):
        assert main([*base, "--epochs", "2", *change]) == 2
        err = capsys.readouterr().err
        assert why in err and "onlstm-seed0 holds a run trained" in err and len(err.strip().splitlines()) == 1
    assert (out / "onlstm-seed0" / "model.best.safetensors").read_bytes() == before


def test_an_interrupted_comparison_lists_every_run_it_did_not_score_and_its_table_says_so(
    data, tmp_path, monkeypatch, capsys
):
    """After a Ctrl-C, compare.json said "unfinished": [] and table.md was left from an earlier call."""
    out = tmp_path / "study"
    argv = ["logic", "compare", "--data", str(data[0]), "--out", str(out), *FLAGS, "--cells", "onlstm", "lstm"]
    assert main([*argv, "--seeds", "0"]) == 0
    assert (out / "accuracy_by_length.png").exists()
    ctrl_c_at_batch(monkeypatch, 5)
    assert main([*argv, "--seeds", "1"]) == 130  # another grid in the same folder: nothing of it is scored
    capsys.readouterr()
    rep = json.loads((out / "compare.json").read_text())
    assert {(u["cell"], u["seed"]) for u in rep["unfinished"]} == {("onlstm", 1), ("lstm", 1)} and rep["interrupted"]
    table = (out / "table.md").read_text()
    assert "No run of the comparison is scored" in table and "not scored: lstm, seed 1: not started" in table
    assert not (out / "accuracy_by_length.png").exists()  # the seed-0 grid's figure is not this call's


def test_a_bad_training_file_is_one_line_before_any_run_starts(data, tmp_path, capsys):
    """With --jobs 2 every run's process failed on the same line; with --jobs 1 an empty folder was left."""
    bad = tmp_path / "bad"
    shutil.copytree(data[0], bad)
    with (bad / "train1").open("a") as f:
        f.write("?\ta\tb\n")
    out = tmp_path / "study"
    for jobs in ("1", "2"):
        argv = ["logic", "compare", "--data", str(bad), "--out", str(out), *FLAGS, "--seeds", "0", "--jobs", jobs]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "train1" in err, err
        assert not out.exists()
