"""What `onlstm logic` tells its user: the hint at the end of training names a command that works on the data
it trained on, and the error for data without test files says what to do instead."""

from __future__ import annotations

import shlex

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
