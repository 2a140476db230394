"""The examples outside the package (``examples/``): they run as scripts; the layer demo uses the public layer only,
the copy task is a third trainer on the shared engine (issue #47).

``examples/layer_demo.py`` was ``onlstm layer-demo``; its checks moved here with it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from onlstm.checkpoint import read_safetensors
from onlstm.errors import EXPERIMENT_PACKAGES
from support import REPO
from test_light_core import BLOCKER

LAYER_DEMO = REPO / "examples" / "layer_demo.py"
COPY_TASK = REPO / "examples" / "copy_task.py"


def load_example(path):
    """An example imported by path (it is no module of the package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def layer_demo():
    return load_example(LAYER_DEMO)


@pytest.fixture(scope="module")
def copy_task():
    return load_example(COPY_TASK)


@pytest.mark.parametrize("seconds", ["nan", "-5", "inf", "0"])
def test_layer_demo_refuses_a_bad_time_budget_in_one_line(layer_demo, capsys, seconds):
    with pytest.raises(SystemExit) as exc:
        layer_demo.main(["--seconds", seconds])
    err = capsys.readouterr().err.splitlines()  # one line: the usage is left to --help
    assert exc.value.code == 2 and len(err) == 1 and "--seconds: must be a finite number of seconds > 0" in err[0]


def test_layer_demo_runs_as_a_script_with_the_layer_only(tmp_path):
    """`python examples/layer_demo.py` with the experiments' packages hidden (as `pip install onlstm` without the
    extra): it trains, and prints one JSON object with its numbers."""
    site = tmp_path / "blocker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(EXPERIMENT_PACKAGES)))
    env = dict(os.environ)  # HOME and TORCH_EXTENSIONS_DIR included: the C++ kernel built once is found again
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), str(REPO / "src"), env.get("PYTHONPATH")]))
    argv = [sys.executable, str(LAYER_DEMO), "--seconds", "0.5", "--json"]
    r = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["steps"] >= 1 and len(result["examples"]) <= 3
    assert -1.0 <= result["corr_distance_depth"] <= 1.0 and result["held_out_perplexity"] >= 1.0


def test_logic_mix_counts_a_file_written_by_hand(tmp_path):
    """``examples/logic_mix.py`` on a file whose shares are known: 3 pairs, 2 of them '#', 1 'not' of 3 operators."""
    mix = load_example(REPO / "examples" / "logic_mix.py")
    lines = ["#\t( a ( and b ) )\tc", "#\t( not d )\te", ">\t( a ( or b ) )\ta"]
    (tmp_path / "train1").write_text("\n".join(lines) + "\n")
    (row,) = mix.describe(str(tmp_path), "train", 1, 1)
    assert row.startswith("train1: n=3 '#'=0.667 '<'+'>'=0.333 ")
    assert "not-share=0.333" in row and "smaller-side 0/1=1.00/0.00" in row


def test_logic_mix_reads_file_0_and_one_length_and_refuses_bad_lengths_in_one_line(tmp_path, capsys):
    """train0 holds pairs of bare variables (no operator: no 'not' share, it was a ZeroDivisionError); one file
    number alone is a span of one (it was a ValueError's traceback); bad lengths are one line, status 2."""
    mix = load_example(REPO / "examples" / "logic_mix.py")
    (tmp_path / "train0").write_text("#\ta\tb\n=\tc\tc\n")
    (tmp_path / "train5").write_text("#\t( not ( not ( not ( not ( not a ) ) ) ) )\tb\n")
    assert mix.main([str(tmp_path), "train", "0-6"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("train0: n=2 ") and "not-share=n/a" in rows[0] and rows[1].startswith("train5: n=1 ")
    assert mix.main([str(tmp_path), "train", "5"]) == 0
    assert capsys.readouterr().out.startswith("train5: n=1 ") and "not-share=1.000" in rows[1]
    for bad in ("x", "6-1", "-3", "1-", "13", "1-100000000000"):  # the last one was a MemoryError's traceback
        assert mix.main([str(tmp_path), "train", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "give first-last file numbers from 0 to 12, e.g. 1-6, or one" in err, err
    assert mix.main([str(tmp_path), "train", "0-12"]) == 0
    assert mix.main([str(tmp_path), "test", "1-6"]) == 2  # no test files: the reader's one line
    assert capsys.readouterr().err.startswith("logic_mix.py: ")


@pytest.mark.parametrize("seed", [str(2**64), "-1", "x"])
def test_layer_demo_refuses_a_seed_torch_cannot_take_in_one_line(layer_demo, capsys, seed):
    with pytest.raises(SystemExit) as exc:
        layer_demo.main(["--seed", seed])  # 2**64 was an overflow's traceback
    err = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "--seed: " in err[0]


def test_layer_demo_takes_the_largest_seed(layer_demo, one_thread, capsys):
    assert layer_demo.run(seconds=0.01, seed=2**64 - 1, as_json=True)["steps"] >= 1


def test_copy_task_takes_every_advertised_seed(copy_task, tmp_path, one_thread):
    """``--help`` says the seed may be up to 2**64 - 1; the sequences' seed is derived from it (an overflow it was)."""
    for seed in (18446744073709, 2**64 - 1):
        done = copy_task.train(tmp_path / str(seed), {"seed": seed, "max_steps": 1, "batches": 1}, log=lambda _m: None)
        assert (done.status, done.steps) == ("stopped", 1)


def test_copy_task_says_how_to_go_on_with_the_runs_own_folder(copy_task, tmp_path, one_thread):
    lines: list[str] = []
    out = tmp_path / "a run"  # a space: the folder is quoted for the shell
    copy_task.train(out, {"max_steps": 1, "batches": 2, "progress": False}, log=lines.append)
    stop = next(line for line in lines if "to train further" in line)
    assert f"python examples/copy_task.py --resume --out '{out}' --max-steps N" in stop and "DIR" not in stop


def test_copy_task_refuses_a_delay_that_leaves_every_target_blank(copy_task, tmp_path, capsys):
    out = tmp_path / "run"
    assert copy_task.main(["--out", str(out), "--delay", "10", "--length", "10"]) == 2
    err = capsys.readouterr().err
    assert err == "copy_task: --delay 10 leaves every target blank: give one below --length 10\n"
    assert not out.exists()


def test_copy_task_fits_in_150_lines():
    """Issue #47's claim: a third trainer on the engine takes at most 150 lines, its docstring included."""
    assert len(COPY_TASK.read_text(encoding="utf-8").splitlines()) <= 150


def test_copy_task_trains_as_a_script(tmp_path):
    """`python examples/copy_task.py` trains 2 epochs of 3 updates: a check after each epoch in history.json (its
    loss and accuracy), the run's result and its weights."""
    argv = [sys.executable, str(COPY_TASK), "--out", str(tmp_path / "run"), "--epochs", "2", "--batches", "3"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([*argv, "--threads", "1"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert [row["step"] for row in history] == [3, 6]
    assert all(0 <= row["valid_accuracy"] <= 1 and row["train_loss"] > 0 and row["valid_loss"] > 0 for row in history)
    result = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (result["status"], result["stopped_by"], result["steps"]) == ("finished", "epochs", 6)
    assert (tmp_path / "run" / "model.best.safetensors").is_file() and (
        tmp_path / "run" / "model.last.safetensors"
    ).is_file()


def test_copy_task_resumes_exactly(copy_task, tmp_path, one_thread):
    """A run stopped by --max-steps 5 in the middle of its second pass and resumed with --max-steps 10 ends with the
    weights of a run that trained its 10 updates at one go, and the same validation figures after the stop."""
    quiet, small = (lambda _msg: None), {"batches": 4, "epochs": 3, "progress": False}
    copy_task.train(tmp_path / "straight", {**small, "max_steps": 10}, log=quiet)
    first = copy_task.train(tmp_path / "resumed", {**small, "max_steps": 5}, log=quiet)
    assert (first.status, first.steps) == ("stopped", 5)
    at_stop, _ = read_safetensors(tmp_path / "resumed" / "model.last.safetensors")
    assert copy_task.main(["--out", str(tmp_path / "resumed"), "--resume", "--max-steps", "10"]) == 0
    straight, _ = read_safetensors(tmp_path / "straight" / "model.last.safetensors")
    resumed, _ = read_safetensors(tmp_path / "resumed" / "model.last.safetensors")
    assert straight.keys() == resumed.keys() and all(torch.equal(straight[k], resumed[k]) for k in straight)
    assert not all(torch.equal(at_stop[k], resumed[k]) for k in at_stop)  # the resumed run did train further
    rows = [json.loads((tmp_path / run / "history.json").read_text()) for run in ("straight", "resumed")]
    assert [r["step"] for r in rows[0]] == [4, 8, 10] and [r["step"] for r in rows[1]] == [4, 5, 8, 10]
    same = ("step", "valid_loss", "valid_accuracy")
    assert [{k: r[k] for k in same} for r in rows[0][1:]] == [{k: r[k] for k in same} for r in rows[1][2:]]
    model = copy_task.CopyModel.from_pretrained(tmp_path / "resumed")  # the run kind opens its best weights
    assert model(torch.zeros(2, 10, dtype=torch.long)).shape == (2, 10, 7)


def test_copy_task_refuses_a_bad_setting_in_one_line(copy_task, tmp_path, capsys):
    assert copy_task.main(["--out", str(tmp_path / "run"), "--symbols", "1"]) == 2
    err = capsys.readouterr().err
    assert err == "copy_task: --symbols must be >= 2, got 1\n" and not (tmp_path / "run").exists()


def test_a_task_whose_step_returns_no_figures_is_named(copy_task, tmp_path, monkeypatch, one_thread):
    """Task.train_step returns its running figures (a dict): a third-party task that returns anything else is told
    which method broke the contract, not an AttributeError from inside the engine."""
    monkeypatch.setattr(copy_task.CopyTask, "train_step", lambda self, batch, prog: None)
    with pytest.raises(TypeError, match=r"CopyTask\.train_step returned NoneType, not a dict of its running figures"):
        copy_task.train(tmp_path / "run", {"batches": 2, "epochs": 1, "progress": False}, log=lambda _msg: None)


@pytest.mark.parametrize("example", ["layer_demo", "logic_mix", "copy_task"])
def test_an_examples_bad_flag_is_one_line(example, capsys):
    """argparse's own refusal printed the usage first; the examples refuse as the commands do."""
    with pytest.raises(SystemExit) as exc:
        load_example(REPO / "examples" / f"{example}.py").main(["--no-such-flag"])
    err = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "--help)" in err[0], err  # the first problem argparse finds
