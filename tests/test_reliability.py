"""Issue 13, "loses data or gives wrong numbers": every training command refuses a directory holding a run
(items 1), one training per run directory (2), a diverged run stops and is never saved as best (4).
Each test reproduces a command that lost data or exited 0 before the fix (docs/cli.md, "Bad input")."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from onlstm.checkpoint import config_header, read_json
from onlstm.cli import main
from onlstm.errors import EXIT_DIVERGED, RunDirError
from onlstm.files import write_json
from onlstm.lock import RunLock
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.logic.model import KIND as LOGIC_KIND
from onlstm.runs import RunDir, check_output_dir
from support import TINY_LM, write_corpus

LOGIC_TINY = ["--emb-size", "8", "--hidden-size", "16", "--chunk-size", "4", "--mlp-hidden", "16"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def logic_data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("logic-data")
    generate_dataset(out, GenerateConfig(per_length=12, seed=3, max_ops=6, test_count=3))
    return out


def lm_args(corpus: Path, out: Path, *extra: str) -> list[str]:
    return [
        "lm",
        "train",
        "--config",
        str(TINY_LM),
        "--data-dir",
        str(corpus),
        "--out",
        str(out),
        "--epochs",
        "1",
        *extra,
    ]


def logic_args(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "logic",
        "train",
        "--data",
        str(data),
        "--out",
        str(out),
        *LOGIC_TINY,
        "--epochs",
        "1",
        "--no-progress",
        *extra,
    ]


def snapshot(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir())}


def fake_run(run: Path, kind: str, interrupted: bool) -> Path:
    """A run directory as a trainer leaves it: config.json, best weights and (interrupted) the resume file."""
    write_json(run / "config.json", config_header(kind, {}))
    write_json(run / "results.json", {"kind": kind, "status": "interrupted" if interrupted else "finished"})
    (run / "model.best.safetensors").write_bytes(b"weights that must survive")
    write_json(run / "history.json", [{"step": k} for k in range(68)])
    if interrupted:
        (run / "resume.safetensors").write_bytes(b"resume state that must survive")
    return run


# --------------------------------------------------------------------------- item 1: no silent overwrite


@pytest.mark.parametrize("kind", [LOGIC_KIND, "lm"])
def test_logic_train_refuses_a_directory_holding_a_run(logic_data, tmp_path, capsys, kind):
    run = fake_run(tmp_path / "run", kind, interrupted=True)
    before = snapshot(run)
    assert main(logic_args(logic_data, run)) == 2
    err = capsys.readouterr().err
    assert "already holds a run; pass --resume" in err and "interrupted" in err
    assert ("language-model" in err) == (kind == "lm")
    assert snapshot(run) == before  # nothing deleted, nothing overwritten


def test_lm_train_refuses_a_logic_run(corpus, tmp_path, capsys):
    run = fake_run(tmp_path / "run", LOGIC_KIND, interrupted=False)
    before = snapshot(run)
    assert main(lm_args(corpus, run)) == 2
    assert "found: a finished logic run" in capsys.readouterr().err
    assert snapshot(run) == before


def test_out_that_is_a_file_or_unwritable_is_refused_before_any_work(corpus, logic_data, tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("keep")
    for argv in (
        lm_args(corpus, file),
        logic_args(logic_data, file),
        ["logic", "generate", "--out", str(file), "--per-length", "2"],
        ["demo", "--out", str(file), "--seconds", "1"],
    ):
        assert main(argv) == 2, argv
        assert "is a file, not a directory" in capsys.readouterr().err
    assert file.read_text() == "keep"
    # /proc refuses new files even to root (a chmod'ed folder would not stop root)
    for argv in (lm_args(corpus, Path("/proc/onlstm-run")), logic_args(logic_data, Path("/proc/onlstm-run"))):
        assert main(argv) == 2
        assert "cannot write in /proc" in capsys.readouterr().err


def test_an_output_that_is_a_link_to_nothing_or_a_file_is_bad_input(corpus, logic_data, tmp_path, capsys):
    """Issue #48: a dangling --out was a FileExistsError traceback; a file as --out (curves) or --to (download)
    was a refused write (exit 4), where the input is at fault (2). Nothing is made at the link's target."""
    link, file = tmp_path / "link", tmp_path / "a-file"
    link.symlink_to(tmp_path / "nowhere" / "run")
    file.write_text("keep")
    cases = [(lm_args(corpus, link), "is a symbolic link to nothing"), (logic_args(logic_data, link), "to nothing")]
    cases += [(["logic", "curves", str(tmp_path), "--out", str(file)], "--out"), (["data", "download", "ptb"], "--to")]
    cases[-1][0].extend(["--to", str(file), "--url", f"file://{tmp_path}/nowhere"])
    for argv, said in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert file.read_text() == "keep" and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("flag", ["--eval-batch-size", "--test-batch-size"])
def test_an_eval_batch_size_too_large_for_its_split_is_refused_before_anything_is_written(
    flag, corpus, tmp_path, capsys
):
    """Issue #48: it was refused at the first validation (after an epoch) or at the final test (after the whole
    training), once the run directory was written. The valid and test splits have 16 short sentences: far fewer
    than 2 x 100,000 tokens."""
    run = tmp_path / "run"
    assert main(lm_args(corpus, run, flag, "100000")) == 2
    err = capsys.readouterr().err
    assert f"({flag}) does not fit the" in err and f"use a smaller {flag}" in err and "Traceback" not in err
    assert not run.exists()


def test_settings_are_checked_before_anything_is_created(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    for flag, value in (("--dropout-out", "1.5"), ("--dropout-emb", "-0.5"), ("--dropconnect", "1")):
        assert main(lm_args(corpus, run, flag, value)) == 2
        err = capsys.readouterr().err
        assert "must be in [0, 1)" in err and "Traceback" not in err
        assert not run.exists()  # the corrected command is not blocked by a half-made run directory


# --------------------------------------------------------------------------- item 2: one training per directory


def test_a_live_lock_refuses_a_second_training(corpus, logic_data, tmp_path, capsys):
    run = tmp_path / "run"
    with RunLock(run, "onlstm lm train"):
        owner = read_json(run / RunDir.LOCK)
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        for argv in (lm_args(corpus, run), logic_args(logic_data, run)):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert f"in use by another training: pid {os.getpid()}" in err and "onlstm lm train" in err
        assert sorted(p.name for p in run.iterdir()) == [RunDir.LOCK]  # the refused trainings wrote nothing
    assert not run.exists()  # the lock made the directory and, left empty, removes it again


CHILD = """
import sys, time
from onlstm.lock import RunLock
with RunLock(sys.argv[1], "child training"):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_a_lock_held_by_another_process_then_stale_after_it_dies(logic_data, tmp_path, capsys):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "locked"
        assert main(logic_args(logic_data, run)) == 2
        assert f"in use by another training: pid {child.pid}" in capsys.readouterr().err
    finally:
        child.kill()  # SIGKILL: the lock file stays behind, as after a crash
        child.wait()
        child.stdout.close()
    assert read_json(run / RunDir.LOCK)["pid"] == child.pid
    assert main(logic_args(logic_data, run)) == 0  # the stale lock is taken over, and said so
    out = capsys.readouterr().out
    assert f"stale lock of pid {child.pid}" in out and "no longer running" in out
    assert not (run / RunDir.LOCK).exists() and (run / "model.best.safetensors").exists()


def test_a_lock_from_another_host_is_explained(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_json(run / RunDir.LOCK, {"pid": 1, "host": "elsewhere.example", "command": "onlstm lm train", "started": 0})
    with pytest.raises(RunDirError, match=f"cannot be checked from this host; .*delete {run / RunDir.LOCK}"):
        RunLock(run, "test").acquire()
    assert check_output_dir(run) == run  # the lock alone is not a run


# --------------------------------------------------------------------------- item 4: divergence


def test_a_diverged_lm_run_stops_and_is_not_saved_as_best(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(lm_args(corpus, run, "--lr", "1e9", "--clip", "0")) == EXIT_DIVERGED
    err = capsys.readouterr().err
    assert "training diverged" in err and "lower --lr" in err
    assert not (run / "model.best.safetensors").exists()
    result = read_json(run / "results.json")  # the record says so, as a logic run's does; no test was run
    assert (result["status"], result["stopped_by"], result["best"]) == ("diverged", "diverged", None)
    assert "test" not in result and not (run / RunDir.LOCK).exists()


def test_a_non_finite_validation_is_never_the_best(corpus, tmp_path, monkeypatch):
    from onlstm.lm import train as lm_train

    real = lm_train.Trainer.validate
    seen = []

    def validate(self):
        result = real(self)
        seen.append(result.loss)
        if len(seen) == 1:  # the first epoch's validation overflows
            result.loss = float("inf")
        return result

    monkeypatch.setattr(lm_train.Trainer, "validate", validate)
    run = tmp_path / "run"
    assert main(lm_args(corpus, run, "--epochs", "2")) == 0
    log = (run / "log.csv").read_text().splitlines()
    rows = [dict(zip(log[0].split(","), line.split(","))) for line in log[1:]]
    assert rows[0]["valid_loss"] == "inf" and rows[0]["best_valid_ppl"] == "nan"
    assert float(rows[1]["best_valid_ppl"]) == pytest.approx(torch.tensor(seen[1]).exp().item(), rel=1e-3)


def test_a_diverged_logic_run_stops_with_its_status(logic_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(logic_args(logic_data, run, "--lr", "1e30", "--clip", "0", "--batch-size", "8", "--epochs", "3"))
        == EXIT_DIVERGED
    )
    assert "training diverged" in capsys.readouterr().err
    assert read_json(run / "results.json")["status"] == "diverged"
    assert not (run / RunDir.LOCK).exists()


# --------------------------------------------------------------------------- tracebacks -> one-line errors


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--seconds", "-5"], "demo.seconds must be > 0, got -5.0"),
        (["demo", "--seconds", "nan"], "demo.seconds must be a finite number, got nan"),
        (["demo", "--train-sentences", "0"], "demo.train_sentences must be >= 1, got 0"),
        (["demo", "--dropout", "1.5"], "demo.dropout must be in [0, 1), got 1.5"),
    ],
)
def test_bad_demo_settings_are_one_line_errors(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing created (not even demo_out/)


def test_demo_refuses_a_run_it_did_not_make(tmp_path, capsys):
    run = fake_run(tmp_path / "run", "lm", interrupted=False)
    before = snapshot(run)
    assert main(["demo", "--out", str(run), "--seconds", "1"]) == 2
    assert "the demo did not make" in capsys.readouterr().err
    assert snapshot(run) == before


def test_compare_replaces_its_own_logic_runs_but_never_another_kind(logic_data, tmp_path, capsys):
    out = tmp_path / "cmp"
    lm_run = fake_run(out / "lstm-seed0", "lm", interrupted=False)
    before = snapshot(lm_run)
    sizes = [f for f in LOGIC_TINY if f not in ("--chunk-size", "4")]  # lstm: a typed --chunk-size is refused
    args = ["logic", "compare", "--data", str(logic_data), "--out", str(out), *sizes, "--epochs", "1"]
    assert main([*args, "--no-progress", "--cells", "lstm", "--lengths", "1-6"]) == 2
    assert "found: a finished language-model run" in capsys.readouterr().err
    assert snapshot(lm_run) == before
