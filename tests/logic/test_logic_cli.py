"""What `onlstm logic` tells its user: the hint at the end of training names a command that works on the data
it trained on, and the error for data without test files says what to do instead."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest

from onlstm.cli import main
from onlstm.logic.generate import GenerateConfig, generate_dataset

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--emb-size", "8", "--hidden-size", "8", "--chunk-size", "4", "--mlp-hidden", "8", "--no-progress"]
RUN = [*TINY, "--batch-size", "8", "--epochs", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def train_files_only(tmp_path_factory):
    """Data laid out like Bowman et al.'s original files: train{k} only, no test{k}."""
    d = tmp_path_factory.mktemp("original-like")
    generate_dataset(d, GenerateConfig(per_length=10, seed=2, max_ops=6, test_count=2))
    for p in d.glob("test*"):
        p.unlink()
    return d


def test_the_end_hint_works_on_data_without_test_files(train_files_only, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["logic", "train", "--data", str(train_files_only), "--out", str(out), *RUN]) == 0
    hint = capsys.readouterr().out.strip().splitlines()[-1]
    assert hint.startswith("evaluate with: onlstm logic eval") and hint.endswith("--split valid"), hint
    assert main(shlex.split(hint.removeprefix("evaluate with: onlstm "))) == 0  # the hint, as given, runs
    assert "majority label" in capsys.readouterr().out
    # without --split valid: one line that says what to do
    assert main(["logic", "eval", "--checkpoint", str(out), "--data", str(train_files_only)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no file matches split='test'" in err and "--split valid" in err


class Panel:
    """Stands for a matplotlib axis: records the spans shaded on it."""

    def __init__(self):
        self.spans: list[tuple[float, float]] = []

    def axvspan(self, start, end, **style):
        self.spans.append((start, end))


def test_a_curriculum_stopped_early_is_shaded_to_the_runs_end():
    pytest.importorskip("matplotlib")
    from onlstm.logic.plots import _shade_curriculum

    # stages 1, 2, 3 of a curriculum to 6 operators; the run stopped at step 500, still on <= 3
    stopped = [{"step": s, "train_ops": k} for s, k in ((100, 1), (200, 2), (300, 2), (400, 3), (500, 3))]
    panels = [Panel(), Panel()]
    _shade_curriculum(panels, stopped, max_train_ops=6)
    assert [p.spans for p in panels] == [[(0, 500)]] * 2  # every step trained on fewer than 6 operators
    finished = stopped + [{"step": 600, "train_ops": 6}, {"step": 700, "train_ops": 6}]
    _shade_curriculum(panels := [Panel()], finished, max_train_ops=6)
    assert panels[0].spans == [(0, 500)]  # the last check before the curriculum reached 6
    _shade_curriculum(panels := [Panel()], [{"step": 100, "train_ops": 6}], max_train_ops=6)
    assert panels[0].spans == []  # no curriculum


def test_logic_curves_shades_with_the_runs_own_setting(train_files_only, tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    import onlstm.logic.plots as plots

    seen = []
    monkeypatch.setattr(plots, "_shade_curriculum", lambda axes, history, max_ops=None: seen.append(max_ops))
    run = tmp_path / "run"
    argv = ["logic", "train", "--data", str(train_files_only), "--out", str(run), *RUN, "--valid-every", "5"]
    assert main([*argv, "--max-train-ops", "5", "--curriculum-start", "1", "--curriculum-steps", "1000"]) == 0
    assert main(["logic", "curves", str(run), "--out", str(tmp_path / "plots")]) == 0
    assert seen == [5]


def test_the_no_data_hint_never_suggests_writing_into_a_folder_of_other_files(tmp_path, capsys):
    from support import write_corpus

    ptb = write_corpus(tmp_path / "ptb")  # the user's PTB folder, given to logic train by mistake
    assert main(["logic", "train", "--data", str(ptb), "--out", str(tmp_path / "run"), *RUN]) == 2
    err = capsys.readouterr().err
    assert "no train{k}/test{k} files here" in err and f"--out {ptb}" not in err
    assert "onlstm logic generate --out runs/logic/data` and pass --data runs/logic/data" in err
    assert sorted(p.name for p in ptb.iterdir()) == ["ptb.test.txt", "ptb.train.txt", "ptb.valid.txt"]
    (tmp_path / "empty").mkdir()
    assert main(["logic", "train", "--data", str(tmp_path / "empty"), "--out", str(tmp_path / "run"), *RUN]) == 2
    assert f"onlstm logic generate --out {tmp_path / 'empty'}`" in capsys.readouterr().err


def test_a_tag_chosen_for_a_checkpoint_naming_other_weights_is_refused(train_files_only, tmp_path, capsys):
    """logic eval's --tag, as lm eval's --weights, chooses among a run directory's weights: with a --checkpoint
    that names one file of other weights it is refused in one line, not ignored; the file it names itself passes."""
    out = tmp_path / "run"
    assert main(["logic", "train", "--data", str(train_files_only), "--out", str(out), *RUN]) == 0
    best = out / "model.best.safetensors"
    argv = ["logic", "eval", "--checkpoint", str(best), "--data", str(train_files_only), "--split", "valid"]
    capsys.readouterr()
    assert main([*argv, "--tag", "last"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"--tag last chooses among a run directory's weights, but --checkpoint {best} is one weights file" in err
    assert main([*argv, "--tag", "best"]) == 0 and main(argv) == 0


def test_a_tag_the_run_does_not_hold_is_refused(train_files_only, tmp_path, capsys):
    """--tag NAME names one weights file of the run: a name it does not hold is refused, never scored with the last
    weights (the audit found `--tag nonexist` print the last weights' accuracy); only the default best falls back."""
    out = tmp_path / "run"
    assert main(["logic", "train", "--data", str(train_files_only), "--out", str(out), *RUN]) == 0
    argv = ["logic", "eval", "--checkpoint", str(out), "--data", str(train_files_only), "--split", "valid"]
    capsys.readouterr()
    assert main([*argv, "--tag", "nonexist"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no model.nonexist.safetensors (weights 'nonexist'); it holds" in err
    assert "model.last.safetensors" in err


@pytest.fixture(scope="module")
def run_on(train_files_only, tmp_path_factory):
    """A run trained on the original-like data (its validation hold-out: pairs of train0-6)."""
    run = tmp_path_factory.mktemp("run") / "run"
    assert main(["logic", "train", "--data", str(train_files_only), "--out", str(run), *RUN]) == 0
    return run


def test_eval_split_valid_refuses_data_the_run_was_not_trained_on(train_files_only, run_on, tmp_path, capsys):
    """--split valid rebuilds the run's hold-out from --data's training files: other files (the folder generated
    again with another seed) would score other pairs as its hold-out; the same files elsewhere are the same data."""
    other = tmp_path / "other"
    generate_dataset(other, GenerateConfig(per_length=10, seed=5, max_ops=6, test_count=2))
    argv = ["logic", "eval", "--checkpoint", str(run_on), "--split", "valid", "--lengths", "0-6", "--json"]
    capsys.readouterr()
    assert main([*argv, "--data", str(other)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"does not hold the training files {run_on} was trained on ({train_files_only})" in err
    assert f"give --data {train_files_only}" in err
    moved = shutil.copytree(train_files_only, tmp_path / "moved")
    assert main([*argv, "--data", str(moved)]) == 0
    assert capsys.readouterr().err == ""
    # a run written before fingerprints were recorded: checked by its path, a note when that differs
    older = shutil.copytree(run_on, tmp_path / "older")
    header = json.loads((older / "config.json").read_text())
    del header["data"]["train_sha256"]
    (older / "config.json").write_text(json.dumps(header))
    assert main([*argv[:3], str(older), *argv[4:], "--data", str(moved)]) == 0
    assert "records no fingerprint of its training files (an older run)" in capsys.readouterr().err


def test_curves_say_why_a_test_table_is_empty(run_on, tmp_path, capsys):
    """--table test reads the test scores --score-test records at each check: a run trained without it has none,
    which is said (naming the flag) rather than printing a table of headers alone."""
    capsys.readouterr()
    argv = ["logic", "curves", str(run_on), "--out", str(tmp_path / "plots"), "--at-steps", "10"]
    assert main([*argv, "--table", "test"]) == 0
    out, err = capsys.readouterr()
    assert "| run |" not in out and "recorded no test scores (--score-test records" in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("onlstm logic curves: --table test: ")
    assert main(argv) == 2  # the figures of the first call are there: replaced only when asked
    assert "curves_by_ops.png exist; choose another --out or pass --overwrite" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("| run | step |") and err == ""


def test_resume_takes_the_runs_own_settings_as_lm_train_does(train_files_only, tmp_path, capsys):
    """`logic train --out RUN --resume` goes on with the run's model, training settings and data (the line at a stop
    says so); it needed every flag again, and the defaults in their place were a clash. Given values over the run's:
    a budget may change, what is learned may not."""
    import json

    run = tmp_path / "run"
    argv = ["logic", "train", "--data", str(train_files_only), "--out", str(run), *TINY, "--batch-size", "8"]
    assert main([*argv, "--max-steps", "2", "--threads", "1"]) == 0
    assert f"to train further: onlstm logic train --out {run} --resume --max-steps N (N > 2)" in capsys.readouterr().out
    assert main(["logic", "train", "--out", str(run), "--resume", "--max-steps", "4", "--no-progress"]) == 0
    header = json.loads((run / "config.json").read_text())
    assert header["model"]["hidden_size"] == 8 and header["train"]["max_steps"] == 4
    assert json.loads((run / "results.json").read_text())["steps"] == 4
    assert main(["logic", "train", "--out", str(run), "--resume", "--hidden-size", "16"]) == 2
    err = capsys.readouterr().err
    assert "cannot change model.hidden_size (run: 8, given: 16)" in err and "emb_size" not in err
