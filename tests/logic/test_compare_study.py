"""`logic compare` for a study whose runs are trained elsewhere and still going (issue #32): `--finished-only`
scores the finished runs and lists the others with how far they got, `--test-data` scores on another folder's
test files, and the verdict on the pooled 7-12 difference (ahead/behind only beyond two standard errors)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from onlstm.cli import main
from onlstm.logic.compare import difference, difference_line, verdict_pool
from onlstm.logic.evaluate import LengthAccuracy
from onlstm.logic.generate import GenerateConfig, generate_dataset

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
    assert status[("onlstm", 1)] == status[("lstm", 1)] == "not started"
    assert "not scored: lstm, seed 0: interrupted" in text and "reusing" not in text
    assert "pooled 7-12: not decided" in (out / "table.md").read_text()
    # the finished run scored on another folder's test pairs: their count, not the training folder's
    assert main([*base, "--seeds", "0", "--finished-only", "--test-data", str(other)]) == 0
    rep = json.loads((out / "compare.json").read_text())
    assert rep["test_data"] == str(other)
    assert sum(v["total"] for v in rep["runs"][0]["test"]["by_length"].values()) == 4 * 9
    assert json.loads(record.read_text())["status"] == "interrupted"  # the listed run was left as it was


def test_finished_only_with_no_finished_run_says_so(data, tmp_path, capsys):
    train_data, _ = data
    out = tmp_path / "empty"
    argv = ["logic", "compare", "--data", str(train_data), "--out", str(out), *FLAGS, "--finished-only"]
    assert main(argv) == 0
    assert "no run is finished yet" in capsys.readouterr().out
    assert json.loads((out / "compare.json").read_text())["unfinished"]
