"""What a training says between its validation checks (the engine's reports, onlstm.runs.engine): a plain log
line every few steps when its progress bar would not be seen (stderr or stdout is not a terminal; here both are
captured), a row of the run's steps.csv at every report, TensorBoard when asked for and installed, one line when
asked for and not installed."""

from __future__ import annotations

import csv
import json
import math
import re
import sys
import types

import pytest

import onlstm.runs.report as report
from onlstm.cli import main
from onlstm.runs import RunDir
from onlstm.runs.report import Report
from support import TINY_LM, quiet, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")

LOGIC = ["--emb-size", "8", "--hidden-size", "8", "--chunk-size", "4", "--mlp-hidden", "8", "--batch-size", "8"]
LINE = re.compile(
    r"^(?P<desc>\w+ )?step (?P<step>\d+) \| epoch (?P<epoch>[\d.]+) \| loss [\d.]+ \| (?P<figures>.*) \| "
    r"elapsed \d+:\d\d \| left (\d+:\d\d|\?)$"
)


@pytest.fixture(scope="module")
def logic_data(tmp_path_factory):
    from onlstm.logic.generate import GenerateConfig, generate_dataset

    d = tmp_path_factory.mktemp("logic")
    generate_dataset(d, GenerateConfig(per_length=10, seed=1, max_ops=6, test_count=2))
    return d


def rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_logic_train_reports_every_n_steps_in_the_log_and_steps_csv(logic_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "LINE_SECONDS", 0.0)  # a line at every report (a real run: at most one in 30 s)
    run = tmp_path / "run"
    argv = ["logic", "train", "--data", str(logic_data), "--out", str(run), *LOGIC, "--epochs", "2", "--progress"]
    assert main([*argv, "--log-every", "5", "--threads", "1"]) == 0
    lines = [m for line in capsys.readouterr().out.splitlines() if (m := LINE.match(line))]
    history = RunDir(run).header()
    table = rows(RunDir(run).steps_path)
    steps = [int(r["step"]) for r in table]
    per_epoch = steps[-1] // 2
    assert per_epoch * 2 == steps[-1] and RunDir(run).results()["status"] == "finished"
    expected = sorted({*range(5, 2 * per_epoch + 1, 5), per_epoch, 2 * per_epoch})  # and at each pass's end
    assert steps == expected and [int(m["step"]) for m in lines] == expected
    assert all(m["desc"] == "onlstm " and re.match(r"accuracy [\d.]+% \| pairs/s [\d,]+$", m["figures"]) for m in lines)
    # the windows between reports cover every pair once: their pair-weighted mean loss over the first epoch is
    # what the first validation check recorded as the epoch's training loss
    first = [r for r in table if int(r["step"]) <= per_epoch]
    bounds = [0, *(int(r["step"]) for r in first)]
    n_train = history["data"]["n_train"]
    pairs = lambda step: 8 if step < per_epoch else n_train - 8 * (per_epoch - 1)  # the pass's last batch: the rest
    weights = [sum(map(pairs, range(a + 1, b + 1))) for a, b in zip(bounds, bounds[1:])]
    mean = sum(w * float(r["loss"]) for w, r in zip(weights, first)) / sum(weights)
    checks = json.loads(RunDir(run).history_path.read_text())
    assert mean == pytest.approx(checks[0]["train_loss"], rel=1e-5)
    assert all(0 <= float(r["accuracy"]) <= 1 and float(r["pairs_per_s"]) > 0 for r in table)


def test_lm_train_reports_loss_perplexity_and_speed(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "LINE_SECONDS", 0.0)
    corpus, run = write_corpus(tmp_path / "corpus"), tmp_path / "run"
    argv = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--out", str(run)]
    assert main([*argv, "--epochs", "1", "--progress", "--log-every", "3"]) == 0
    lines = [m for line in capsys.readouterr().out.splitlines() if (m := LINE.match(line))]
    table = rows(RunDir(run).steps_path)
    assert len(lines) == len(table) >= 3 and [int(m["step"]) for m in lines] == [int(r["step"]) for r in table]
    assert all(re.match(r"ppl [\d.]+ \| tokens/s [\d,]+$", m["figures"]) for m in lines)
    for r in table:
        assert float(r["ppl"]) == pytest.approx(math.exp(float(r["loss"])), rel=1e-4)
    assert [int(r["step"]) % 3 for r in table[:-1]] == [0] * (len(table) - 1)  # the last: the pass's end


def test_no_progress_means_no_lines_but_steps_csv_still(logic_data, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["logic", "train", "--data", str(logic_data), "--out", str(run), *LOGIC, "--epochs", "1"]
    assert main([*argv, "--no-progress", "--log-every", "5", "--threads", "1"]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if LINE.match(line)]
    assert len(rows(RunDir(run).steps_path)) >= 2


def test_lines_only_when_the_bar_is_not_beside_the_log(monkeypatch, tmp_path):
    run = RunDir(tmp_path)
    for stderr, stdout, lines in ((True, True, False), (False, True, True), (True, False, True)):
        monkeypatch.setattr(report, "_is_terminal", lambda s, e=stderr, o=stdout: e if s is sys.stderr else o)
        assert Report(run, 10, progress=True, tensorboard=False).lines is lines
        assert Report(run, 10, progress=False, tensorboard=False).lines is False
    other = Report(run, 10, True, True, main=False)  # another process: no line, no file
    assert (other.lines, other.show_bar, other.csv, other.board) == (False, False, None, None)


def test_a_resumed_run_keeps_its_rows_up_to_where_it_resumes(tmp_path):
    run = RunDir(tmp_path)

    def session(from_step: int, reports: dict[int, float]) -> None:
        steps = Report(run, 5, progress=False, tensorboard=False, log=quiet)
        steps.open(from_step, 0.0)
        steps.start_pass(20, from_step, "epoch 1/1")
        for step, loss in reports.items():
            steps.log(step, {"loss": loss}, epoch=step / 10, elapsed=step / 2, left=None, end=False)
        steps.close()

    session(0, {5: 0.2, 10: 0.1, 15: 1 / 15})
    assert [r["step"] for r in rows(run.steps_path)] == ["5", "10", "15"]
    session(10, {15: 0.5})  # resumed at step 10: step 15 again
    assert [(r["step"], r["loss"]) for r in rows(run.steps_path)] == [("5", "0.2"), ("10", "0.1"), ("15", "0.5")]
    session(0, {})  # a new run in the directory: the file begins anew
    assert not run.steps_path.exists()


def test_board_when_installed_and_one_line_when_not(logic_data, tmp_path, monkeypatch, capsys):
    argv = ["logic", "train", "--data", str(logic_data), *LOGIC, "--epochs", "1", "--no-progress", "--tensorboard"]
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as without the tensorboard package
    assert main([*argv, "--out", str(tmp_path / "without"), "--log-every", "5"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "TensorBoard" in line]
    assert said == [
        "no TensorBoard logs: the tensorboard package is not installed (pip install tensorboard); the training "
        f"figures are in {tmp_path / 'without' / 'steps.csv'}"
    ]
    scalars: list[tuple[str, float, int]] = []

    class Writer:  # records what TensorBoard's SummaryWriter is given
        def __init__(self, logdir):
            self.logdir = logdir

        def add_scalar(self, tag, value, step):
            scalars.append((tag, value, step))

        def close(self):
            scalars.append(("closed", 0, 0))

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=Writer))
    assert main([*argv, "--out", str(tmp_path / "with"), "--log-every", "5"]) == 0
    table = rows(RunDir(tmp_path / "with").steps_path)
    assert [(step, value) for tag, value, step in scalars if tag == "train/loss"] == [
        (int(r["step"]), pytest.approx(float(r["loss"]), abs=1e-6)) for r in table
    ]
    assert any(tag == "check/valid_accuracy" for tag, _, _ in scalars) and scalars[-1][0] == "closed"
    assert "TensorBoard" not in capsys.readouterr().out
