"""``logic trees``: the trees of a formula's brackets (hand-checked), the trees an ON-LSTM classifier induces (the
brackets dropped from the greedy builder's tree; batched as one by one), the files written for
``parsing compare-trees``, and the refusals (an LSTM has no master gates; a folder of the user's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from onlstm.checkpoint import CheckpointError
from onlstm.cli import main
from onlstm.data.trees import build_tree, leaves, parse_tree_lines
from onlstm.logic.config import LogicModelConfig
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.logic.model import LogicClassifier, token_ids
from onlstm.logic.trees import GATES, formula_distances, formula_tree, induced_trees, without_brackets

TINY = dict(emb_size=8, hidden_size=16, chunk_size=4, mlp_hidden=16)


def _model(cell: str = "onlstm") -> LogicClassifier:
    torch.manual_seed(0)
    return LogicClassifier(LogicModelConfig(cell=cell, **TINY))


def test_the_brackets_give_the_tree_by_hand():
    assert formula_tree("( a ( and b ) )".split()) == ("a", ("and", "b"))
    assert formula_tree("( not a )".split()) == ("not", "a")
    assert formula_tree(["c"]) == "c"
    both = "( ( not a ) ( or ( b ( and c ) ) ) )".split()
    assert formula_tree(both) == (("not", "a"), ("or", ("b", ("and", "c"))))
    for bad in ("( a ( and b )", "a )", "( )"):
        with pytest.raises(ValueError):
            formula_tree(bad.split())


def test_the_brackets_are_dropped_from_the_induced_tree_by_hand():
    tokens = "( a ( and b ) )".split()
    # split before the inner bracket (or at 'a'): a ( and b ); at 'b': ( a and ) b
    assert without_brackets(build_tree(tokens, [0, 0, 5, 0, 0, 0, 0])) == ("a", ("and", "b"))
    assert without_brackets(build_tree(tokens, [0, 0, 0, 0, 5, 0, 0])) == (("a", "and"), "b")
    assert without_brackets(build_tree(["(", ")"], [0, 0])) is None


@pytest.mark.parametrize("gate", GATES)
def test_distances_in_batches_equal_one_by_one_and_the_mode_is_kept(gate):
    model = _model().train()
    formulas = ["( a ( and b ) )", "( not c )", "( ( not a ) ( or ( b ( and c ) ) ) )", "d"]
    together = formula_distances(model, formulas, batch_size=3, gate=gate)
    alone = [formula_distances(model, [f], gate=gate)[0] for f in formulas]
    assert [len(d) for d in together] == [len(f.split(" ")) for f in formulas]
    assert all(t == pytest.approx(a, abs=1e-6) for t, a in zip(together, alone)) and model.training
    trees = induced_trees(model, formulas, gate=gate)
    assert [leaves(t) if not isinstance(t, str) else [t] for t in trees] == [
        [w for w in f.split(" ") if w not in "()"] for f in formulas
    ]


def test_each_gate_gives_its_own_distance_by_hand_at_the_first_token():
    """From the zero state the first token's pre-activation is ``W_ih x + b_ih + b_hh``; its rows begin with the
    master input's then the master forget's logits (n = 4 chunks). By the paper: forget ``1 - mean(cumax(l_f))``,
    input ``mean(1 - cumax(l_i))``, cumax the cumulative sum of a softmax."""
    model, n = _model().eval(), 4
    rnn = model.encoder.rnn
    formulas = ["( a ( and b ) )", "( not c )", "d"]
    with torch.no_grad():
        for f in formulas:
            x = model.embedding.weight[token_ids(f)[0]]
            pre = rnn.weight_ih_l0 @ x + rnn.bias_ih_l0 + rnn.bias_hh_l0
            cumax = lambda logits: torch.cumsum(torch.softmax(logits, -1), -1)
            want = {"forget": 1 - cumax(pre[n : 2 * n]).mean(), "input": (1 - cumax(pre[:n])).mean()}
            for gate in GATES:
                assert formula_distances(model, [f], gate=gate)[0][0] == pytest.approx(want[gate].item(), abs=1e-6)
    with pytest.raises(ValueError, match="gate must be one of forget, input"):
        formula_distances(model, formulas, gate="output")


def test_an_encoder_without_master_gates_is_refused():
    with pytest.raises(CheckpointError, match="no master gates"):
        formula_distances(_model("lstm"), ["( a ( and b ) )"])


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trees-data")
    generate_dataset(out, GenerateConfig(per_length=12, seed=5, max_ops=5, test_count=6))
    return out


def test_the_command_writes_the_trees_line_for_line_and_compare_trees_reads_them(data, tmp_path, capsys):
    _model().save_pretrained(tmp_path / "model")
    out = tmp_path / "trees"
    argv = ["logic", "trees", "--checkpoint", str(tmp_path / "model"), "--data", str(data), "--out", str(out)]
    assert main([*argv, "--threads", "1"]) == 0
    assert "score them with: onlstm parsing compare-trees" in capsys.readouterr().out
    gold = parse_tree_lines((out / "gold.txt").read_text().splitlines(), "unlabelled")
    induced = parse_tree_lines((out / "induced.txt").read_text().splitlines(), "unlabelled")
    formulas = (out / "formulas.txt").read_text().splitlines()
    operators = [int(k) for k in (out / "operators.txt").read_text().split()]
    assert len(gold) == len(induced) == len(formulas) == len(operators) == len(set(formulas)) > 0
    assert all(leaves(g) == leaves(p) and len(leaves(g)) >= 3 for g, p in zip(gold, induced))
    assert [formula_tree(f.split(" ")) for f in formulas] == gold
    for k in set(operators):  # the same trees by operator count
        assert len((out / f"gold.{k}.txt").read_text().splitlines()) == operators.count(k)
    assert main(["parsing", "compare-trees", str(out / "gold.txt"), str(out / "induced.txt")]) == 0
    assert main([*argv, "--threads", "1"]) == 0  # its own earlier output is replaced
    by_input = tmp_path / "trees-input"
    assert main([*argv[:-1], str(by_input), "--gate", "input", "--threads", "1"]) == 0
    assert (by_input / "gold.txt").read_text() == (out / "gold.txt").read_text()
    induced_in = parse_tree_lines((by_input / "induced.txt").read_text().splitlines(), "unlabelled")
    assert [leaves(t) for t in induced_in] == [leaves(t) for t in induced]
    assert sum(a != b for a, b in zip(induced_in, induced)) > len(induced) // 4  # the flag reads the other gate


def test_the_command_refuses_an_lstm_and_a_folder_of_the_users(data, tmp_path, capsys):
    _model("lstm").save_pretrained(tmp_path / "lstm")
    argv = ["logic", "trees", "--checkpoint", str(tmp_path / "lstm"), "--data", str(data), "--out"]
    assert main([*argv, str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "no master gates" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    _model().save_pretrained(tmp_path / "onlstm")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    argv = ["logic", "trees", "--checkpoint", str(tmp_path / "onlstm"), "--data", str(data), "--out", str(mine)]
    assert main(argv) == 2
    assert (mine / "notes.txt").read_text() == "the user's" and len(list(mine.iterdir())) == 1


@pytest.mark.parametrize("command", ["eval", "trees"])
def test_split_valid_of_a_model_saved_without_its_training_settings_is_one_line(command, data, tmp_path, capsys):
    _model().save_pretrained(tmp_path / "model")  # from Python: no training settings in its config.json
    argv = ["logic", command, "--checkpoint", str(tmp_path / "model"), "--data", str(data), "--split", "valid"]
    assert main([*argv, *(["--out", str(tmp_path / "out")] if command == "trees" else [])]) == 2
    err = capsys.readouterr().err
    assert "does not hold" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("text", ["( and or not )", "( a and b )", "a and b", "( a b )", "( not a b )"])
def test_formula_trees_refuses_a_text_that_is_no_formula(text):
    from onlstm.logic.formulas import FormulaSyntaxError
    from onlstm.logic.trees import formula_trees

    with pytest.raises(FormulaSyntaxError, match=r"formula 1 \(.*\) is not in the notation"):
        formula_trees(_model(), ["( a ( and b ) )", text])
    assert formula_trees(_model(), ["( a ( and b ) )"]).operators == [1]


def test_formula_trees_reads_any_list_and_refuses_one_text_or_a_batch_size_below_one():
    """One formula given alone was read character by character (``formula 0 ('(') is not in the notation``), a
    generator failed with ``TypeError: object of type 'generator' has no len()``, and ``batch_size=0`` or ``-1``
    with Python's own ``range()``/``zip()`` messages."""
    from onlstm.errors import InputError
    from onlstm.logic.trees import formula_trees

    model, formulas = _model(), ["( a ( and b ) )", "( not ( c ( or d ) ) )", "a"]
    expected = formula_trees(model, formulas).induced
    assert formula_trees(model, (f for f in formulas)).induced == expected
    assert induced_trees(model, (f for f in formulas)) == expected
    assert formula_trees(model, tuple(formulas), batch_size=1).induced == expected
    with pytest.raises(InputError, match="formulas must be a list of formulas .* got str; put one formula in a list"):
        formula_trees(model, "( a ( and b ) )")
    for batch_size in (0, -1, 1.5, True):
        with pytest.raises(InputError, match="batch_size must be a whole number of at least 1"):
            formula_trees(model, formulas, batch_size=batch_size)
