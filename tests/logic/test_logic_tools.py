"""``logic holdout`` (systematicity splits) and ``logic stats`` (structural statistics) from the command line."""

from __future__ import annotations

import random
import re

import pytest

from onlstm.cli import main
from onlstm.logic.data import read_examples, write_file
from onlstm.logic.generate import random_formula_text


def _data(tmp_path):
    rng = random.Random(3)
    for k in range(4):
        rows = [
            ("#", random_formula_text(k, rng)[0], random_formula_text(rng.randrange(k + 1), rng)[0]) for _ in range(60)
        ]
        write_file(tmp_path / "in" / f"train{k}", rows)
    return tmp_path / "in"


@pytest.mark.parametrize(
    ("split", "pattern"),
    [
        ("C", r"\( (and|or) \( not "),  # the published split: any negated sub-formula (issue #50)
        ("C-var", r"\( (and|or) \( not [a-f] \) \)"),  # the reading before #50: negated variables only
    ],
)
def test_holdout_moves_exactly_the_pairs_with_the_pattern(tmp_path, split, pattern):
    data = _data(tmp_path)
    assert main(["logic", "holdout", "--data", str(data), "--split", split, "--out", str(tmp_path / "out")]) == 0
    held = read_examples(tmp_path / "out", split="test")
    kept = read_examples(tmp_path / "out", split="train")
    regex = re.compile(pattern)
    assert held and all(regex.search(ex.text_a) or regex.search(ex.text_b) for ex in held)
    assert not any(regex.search(ex.text_a) or regex.search(ex.text_b) for ex in kept)
    assert len(held) + len(kept) == 240
    assert all(ex.file_number == ex.bucket for ex in held + kept)


def test_holdout_needs_one_rule_and_stats_prints_each_file(tmp_path, capsys):
    data = _data(tmp_path)
    assert main(["logic", "holdout", "--data", str(data), "--out", str(tmp_path / "x")]) == 2
    assert "--split" in capsys.readouterr().err
    assert main(["logic", "holdout", "--data", str(data), "--pattern", "(", "--out", str(tmp_path / "y")]) == 2
    assert "not a regular expression" in capsys.readouterr().err
    assert main(["logic", "stats", str(data), "--against", str(data)]) == 0
    out = capsys.readouterr().out
    assert "| train3 |" in out.splitlines()[0] and "distinct variables per pair" in out


def test_the_test_table_reads_the_scores_recorded_at_each_check():
    from onlstm.logic.evaluate import history_table

    history = [
        {
            "step": 10,
            "valid_accuracy": 0.5,
            "valid_by_ops": {"1": 0.5},
            "test_by_length": {"1": 0.9, "7": 0.6, "8": 0.4},
        },
        {
            "step": 20,
            "valid_accuracy": 0.7,
            "valid_by_ops": {"1": 0.7},
            "test_by_length": {"1": 1.0, "7": 0.8, "8": 0.6},
        },
    ]
    rows = history_table([("run", history)], [15, 20], split="test").splitlines()
    assert rows[0].endswith("| 1 | 7 | 8 | mean 7-12 |")
    assert rows[2] == "| run | 15 | 10 | 90.0 | 60.0 | 40.0 | 50.0 |" and rows[3].endswith("| 70.0 |")


def test_resume_advice_for_a_run_stopped_before_its_first_check_is_one_that_works(tmp_path):
    """A run stopped before its first save has nothing to lose: --resume starts it again from step 0, whether it
    was interrupted (its stop recorded) or killed (none recorded); a finished run without a resume file is refused."""
    from onlstm.files import write_json
    from onlstm.logic.compare import resume_refusal
    from onlstm.logic.config import LogicTrainConfig
    from onlstm.runs import RunDir

    assert resume_refusal(tmp_path, "", LogicTrainConfig()) == ""  # killed, or a full disk at its first check
    write_json(RunDir(tmp_path).results_path, {"status": "interrupted", "steps": 3, "stopped_by": "interrupted"})
    assert resume_refusal(tmp_path, "", LogicTrainConfig()) == ""
    write_json(RunDir(tmp_path).results_path, {"status": "finished", "steps": 9, "stopped_by": "epochs"})
    assert "new --out" in resume_refusal(tmp_path, "", LogicTrainConfig())


def test_holdout_and_generate_never_replace_each_others_folder(tmp_path, capsys):
    """Each command replaces only its own earlier output (its own marker kind): holdout never writes its split over
    a generated set, nor over the folder it reads (--out is --data, or inside it), and generate never over a split."""
    gen, split = tmp_path / "gen", tmp_path / "split"
    make = ["logic", "generate", "--per-length", "6", "--max-ops", "3", "--test-count", "2", "--quiet"]
    assert main([*make, "--out", str(gen)]) == 0
    before = {p.name: p.read_bytes() for p in gen.iterdir()}
    for out in (gen, gen / "sub"):
        assert main(["logic", "holdout", "--data", str(gen), "--split", "C", "--out", str(out), "--overwrite"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "choose an --out outside --data" in err
    assert main(["logic", "holdout", "--data", str(gen), "--split", "C", "--out", str(tmp_path / "gen2")]) == 0
    assert main([*make, "--out", str(tmp_path / "gen2")]) == 2  # a split is not generate's to replace
    assert main(["logic", "holdout", "--data", str(gen), "--split", "C", "--out", str(split)]) == 0
    assert main(["logic", "holdout", "--data", str(gen), "--split", "B", "--out", str(split)]) == 0  # its own: again
    assert main([*make, "--out", str(gen), "--seed", "1"]) == 0  # generate's own: again
    assert main(["logic", "holdout", "--data", str(split), "--split", "C", "--out", str(gen)]) == 2
    assert "was not written by this command" in capsys.readouterr().err
    assert {p.name for p in gen.iterdir()} == set(before)


def test_the_stats_table_escapes_the_alternation_label(tmp_path, capsys):
    """The label '|' in a cell ends the cell unless escaped: the row would have one column too many."""
    data = _data(tmp_path)
    assert main(["logic", "stats", str(data)]) == 0
    rows = capsys.readouterr().out.splitlines()
    columns = [len(re.split(r"(?<!\\)\|", row)) for row in rows]
    assert set(columns) == {columns[0]}, rows
    assert any(row.startswith("| % label \\| | ") for row in rows)
