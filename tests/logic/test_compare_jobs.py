"""``logic compare --jobs N``: the runs trained as N processes at once give the runs one process gives, a run that
fails is named with its one-line reason (and nothing of the user's is touched), and Ctrl-C stops every run with
its resume file saved (issue #32: "all seeds as parallel processes on one GPU")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from onlstm.cli import main
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.runs import RunDir
from support import fault_cases

FLAGS = ["--emb-size", "8", "--hidden-size", "16", "--chunk-size", "4", "--mlp-hidden", "16", "--threads", "1"]
FLAGS += ["--batch-size", "32", "--no-progress", "--lengths", "1-6", "--cells", "onlstm", "lstm"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("logic-data")
    generate_dataset(out, GenerateConfig(per_length=24, seed=3, max_ops=6, test_count=6))
    return out


def _compare(data: Path, out: Path, *extra: str) -> int:
    return main(["logic", "compare", "--data", str(data), "--out", str(out), *FLAGS, *extra])


def _scores(out: Path) -> list[tuple]:
    rep = json.loads((out / "compare.json").read_text())
    return [(r["cell"], r["seed"], r["train"]["best_valid_accuracy"], r["test"]["by_length"]) for r in rep["runs"]]


def test_runs_trained_in_processes_equal_the_runs_of_one_process(data, tmp_path, capsys):
    """Same settings, seeds and threads: the processes compute what one process does, run for run (the same
    code and arithmetic on the same machine), and each run's output goes to its log."""
    assert _compare(data, tmp_path / "one", "--epochs", "2", "--seeds", "0", "1") == 0
    assert _compare(data, tmp_path / "four", "--epochs", "2", "--seeds", "0", "1", "--jobs", "4") == 0
    text = capsys.readouterr().out
    assert _scores(tmp_path / "one") == _scores(tmp_path / "four")
    # test pairs of 1-6 operators only (a systematicity split's kind): the verdict is taken on all of them
    verdict = json.loads((tmp_path / "four" / "compare.json").read_text())["differences"][0]
    assert (
        verdict["pool"] == "all" and verdict["seeds"] == [2, 2] and verdict["verdict"] in ("ahead", "behind", "level")
    )
    assert text.count("in a process of its own") == 4 and text.count(": finished") == 4
    for name in ("onlstm-seed0", "lstm-seed0", "onlstm-seed1", "lstm-seed1"):
        assert "valid acc" in (tmp_path / "four" / f"{name}.log").read_text()
    # a second call reuses the finished runs: no process is started
    assert _compare(data, tmp_path / "four", "--epochs", "2", "--seeds", "0", "1", "--jobs", "4") == 0
    assert "in a process of its own" not in capsys.readouterr().out


def test_a_run_that_fails_is_named_with_its_reason_and_the_others_are_scored(data, tmp_path, capsys):
    out = tmp_path / "cmp"
    (out / "lstm-seed0").mkdir(parents=True)
    mine = out / "lstm-seed0" / "notes.txt"
    mine.write_text("the user's")  # a folder that is not a run: the run refuses it
    assert _compare(data, out, "--epochs", "1", "--seeds", "0", "--jobs", "2") == 2
    err = capsys.readouterr().err
    assert "onlstm logic compare: lstm, seed 0: failed (exit 2): onlstm logic train:" in err
    assert "Traceback" not in err and mine.read_text() == "the user's"
    rep = json.loads((out / "compare.json").read_text())
    assert [r["cell"] for r in rep["runs"]] == ["onlstm"] and rep["failed"][0]["code"] == 2


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and sessions")
def test_ctrl_c_stops_every_run_with_its_resume_file(data, tmp_path):
    """The runs' processes are in sessions of their own (a terminal's Ctrl-C reaches only the comparison), which
    passes on one stop request: each run saves and the command exits 130."""
    out = tmp_path / "cmp"
    cmd = [sys.executable, "-m", "onlstm", "logic", "compare", "--data", str(data), "--out", str(out), *FLAGS]
    cmd += ["--epochs", "100000", "--patience", "100000", "--seeds", "0", "--jobs", "2"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"), *sys.path])}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    logs = [out / "onlstm-seed0.log", out / "lstm-seed0.log"]
    deadline = time.monotonic() + 240
    while not all(p.exists() and "valid acc" in p.read_text() for p in logs):  # both are training
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    text = proc.communicate(timeout=240)[0]
    assert proc.returncode == 130, text
    # how to go on: the comparison again (it resumes every run), and the line every interrupted command ends with
    assert "continue with: onlstm logic compare --data" in text
    assert all("continue with: onlstm logic compare --data" in log.read_text() for log in logs)  # each run's own
    assert text.strip().splitlines()[-1] == "onlstm logic compare: interrupted"
    for name in ("onlstm-seed0", "lstm-seed0"):
        run = out / name
        assert RunDir(run).results()["status"] == "interrupted"
        assert (run / "resume.safetensors").exists()
        assert "interrupted (its resume file saved)" in text


def test_each_run_directory_is_read_once_to_plan_its_job(tmp_path, monkeypatch):
    """Planning a run's job asks two things of its folder (finished with these settings? can it go on?); both
    answers come from one read of its header (the question in the #32 note of stop 41)."""
    from onlstm.checkpoint import config_header
    from onlstm.logic import compare
    from onlstm.logic.config import LogicTrainConfig
    from onlstm.logic.model import KIND, LogicModelConfig

    mcfg, tcfg = LogicModelConfig(cell="lstm", emb_size=8, hidden_size=16), LogicTrainConfig(seed=5, epochs=1)
    run = RunDir(tmp_path / "lstm-seed5")
    run.path.mkdir()
    data = {"path": "data", "n_train": 1, "n_valid": 1, "max_ops": 6}  # a run started, killed before its first save
    run.write_config(config_header(KIND, mcfg.to_dict(), train=tcfg.to_dict(), data=data))
    reads, real = [], compare.run_header
    monkeypatch.setattr(compare, "run_header", lambda *args: reads.append(args[0]) or real(*args))
    job = compare._job(tmp_path, mcfg, tcfg, "data", jobs=1)
    # --resume: with nothing saved it starts from step 0 in the run's own folder (runs.engine.resume_refusal)
    assert job is not None and job.run_dir == run.path and job.resume
    assert reads == [run.path]


def test_a_run_killed_by_a_signal_is_named_with_it_and_the_status_is_130(data, tmp_path, monkeypatch, capsys):
    """Issue #48: a run's process killed by a signal (Popen's status -9) made the comparison exit 247 (-9 modulo
    256), which no command documents; it is an interrupted run (status 130), named with its signal."""
    from onlstm.logic import compare as compare_module
    from onlstm.logic.config import LogicTrainConfig
    from onlstm.logic.model import LogicModelConfig
    from onlstm.logic.parallel import logic_job
    from onlstm.studies import parallel

    said: list[str] = []
    job = logic_job(tmp_path / "lstm-seed0", LogicModelConfig(cell="lstm"), LogicTrainConfig(seed=0), "data", False)
    ended = parallel._ended(job, -signal.SIGKILL, said.append)
    assert (ended.code, ended.signal) == (130, "SIGKILL") and "killed by SIGKILL" in ended.why and said
    monkeypatch.setattr(compare_module, "train_in_processes", lambda *args: [ended])
    assert _compare(data, tmp_path / "cmp", "--epochs", "1", "--seeds", "0", "--jobs", "2") == 130
    err = capsys.readouterr().err
    assert f"onlstm logic compare: {job.name}: killed by SIGKILL" in err and "Traceback" not in err


def test_what_an_ended_run_kept_is_said_as_it_is(tmp_path):
    """A run stopped or killed before its first save has no checkpoint to go on from: not said to have one."""
    from onlstm.logic.config import LogicTrainConfig
    from onlstm.logic.model import LogicModelConfig
    from onlstm.logic.parallel import logic_job
    from onlstm.saved import RunFiles
    from onlstm.studies import parallel

    job = logic_job(tmp_path / "lstm-seed0", LogicModelConfig(cell="lstm"), LogicTrainConfig(seed=0), "data", False)
    said: list[str] = []
    assert parallel._ended(job, 130, said.append).why == "stopped before it saved anything"
    assert "nothing saved: it starts again" in parallel._ended(job, -signal.SIGKILL, said.append).why
    job.run_dir.mkdir()
    RunFiles(job.run_dir).resume_path.write_bytes(b"")
    assert parallel._ended(job, 130, said.append).why == "interrupted (its resume file saved)"
    assert "its last checkpoint is kept" in parallel._ended(job, -signal.SIGKILL, said.append).why


def _wait_until_it_catches(pid: int, signum: int) -> None:
    """Until the process has a handler for ``signum`` (Linux: ``SigCgt`` in /proc/PID/status, a mask of the caught
    signals); elsewhere, or should it end first, a twentieth of a second."""
    status = Path(f"/proc/{pid}/status")
    for _ in range(3000):
        try:
            caught = next(line for line in status.read_text().splitlines() if line.startswith("SigCgt:"))
        except (OSError, StopIteration):
            time.sleep(0.05)
            return
        if int(caught.split()[1], 16) >> (signum - 1) & 1:
            return
        time.sleep(0.001)


@pytest.mark.parametrize(
    ("phase", "ignored"),
    STOPS := fault_cases(["starting", "importing"], [False, True]),
    ids=[f"{phase}-SIGINT {'ignored' if ignored else 'default'}" for phase, ignored in STOPS],
)
def test_a_stop_while_a_runs_process_starts_is_one_line_in_its_log(tmp_path, monkeypatch, ignored, phase):
    """The parent passes a Ctrl-C on to its runs at once. A run still starting (its interpreter up) or importing
    its trainer (torch: seconds; here an entry whose import takes 3 s, the stop sent once it began) ended in a
    KeyboardInterrupt's traceback in its log, was said to be killed with a checkpoint kept, or, landing inside
    torch's C++ start-up, went on or failed (exit 2, exit 1). A comparison started in the background (`cmd &`,
    nohup) has SIGINT ignored and its children inherited that: the stop request (a SIGINT) was lost."""
    from onlstm.studies import parallel

    started = tmp_path / "entry-import-started"
    entry = f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(3)\n\ndef run(payload):\n    return 0\n"
    (tmp_path / "slow_entry.py").write_text(entry)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    job = parallel.Job("slow, seed 0", tmp_path / "slow-seed0", False, "slow_entry:run", {}, "onlstm logic train")
    before = signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.default_int_handler)
    try:
        proc = parallel._start(job)
    finally:
        signal.signal(signal.SIGINT, before)
    if phase == "starting":  # importing torch, the stop requests held (SIGTERM caught: Python catches only SIGINT);
        _wait_until_it_catches(proc.pid, signal.SIGTERM)  # a SIGINT ignored before that is lost to any program
    while phase == "importing" and not started.exists() and proc.poll() is None:  # importing the entry (3 s)
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130  # the stop is acted on once the import is done: not a run (0)
    text = job.log_path.read_text()
    assert "Traceback" not in text and "nothing saved" in text, text
    assert parallel._ended(job, proc.returncode, lambda line: None).why == "stopped before it saved anything"
