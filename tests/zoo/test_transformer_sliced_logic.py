"""The logic task with the `transformer` and `sliced` encoders: training from the command line (packed
formulas, the pooled encoding), evaluation of the saved run, a comparison naming both, and the classifier's
encoding of a formula alone == in a batch."""

from __future__ import annotations

import json
import math

import pytest
import torch

from onlstm.cli import main
from onlstm.logic.config import LogicModelConfig
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.logic.model import LogicClassifier, pad_batch, token_ids

SMALL = ["--emb-size", "8", "--hidden-size", "16", "--mlp-hidden", "16", "--batch-size", "16", "--no-progress"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("logic")
    generate_dataset(d, GenerateConfig(per_length=16, seed=5, max_ops=8, test_count=4))
    return d


@pytest.mark.parametrize("cell, options", [("sliced", ["slice_length=3"]), ("transformer", ["pooling=mean"])])
def test_logic_train_and_eval(cell, options, data, tmp_path, capsys):
    run = tmp_path / cell
    argv = ["logic", "train", "--data", str(data), "--out", str(run), "--cell", cell, "--epochs", "2", *SMALL]
    assert main([*argv, "--encoder-options", *options]) == 0
    saved = json.loads((run / "config.json").read_text())
    assert saved["model"]["cell"] == cell and json.loads((run / "results.json").read_text())["status"] == "finished"
    history = json.loads((run / "history.json").read_text())
    assert len(history) == 2 and all(math.isfinite(h["train_loss"]) for h in history)
    capsys.readouterr()
    assert main(["logic", "eval", "--checkpoint", str(run), "--data", str(data), "--lengths", "1-8"]) == 0
    assert cell in capsys.readouterr().out


def test_logic_compare_accepts_both(data, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["logic", "compare", "--data", str(data), "--out", str(out), "--cells", "transformer", "sliced"]
    argv += ["--epochs", "1", "--lengths", "1-8", *SMALL]
    # encoder_options go to every compared encoder: one that an encoder does not accept is an error
    assert main([*argv, "--encoder-options", "heads=2"]) == 2
    assert "does not accept the option(s) heads" in capsys.readouterr().err
    assert main(argv) == 0
    assert json.loads((out / "compare.json").read_text())["cells"] == ["transformer", "sliced"]


@pytest.mark.parametrize("cell", ["transformer", "sliced"])
def test_a_formula_gets_the_same_encoding_alone_and_in_a_batch(cell):
    torch.manual_seed(0)
    model = LogicClassifier(LogicModelConfig(cell=cell, emb_size=8, hidden_size=16, mlp_hidden=8)).eval()
    formulas = ["( a and b )", "not c", "( ( a or b ) and ( not d ) )", "e"]
    tokens, lengths = pad_batch([token_ids(f) for f in formulas])
    batch = model.encode(tokens, lengths)
    for j, f in enumerate(formulas):
        alone = model.encode(*pad_batch([token_ids(f)]))
        torch.testing.assert_close(batch[j], alone[0], rtol=1e-5, atol=1e-6)


def test_learned_positions_shorter_than_the_formulas_are_refused_before_training(data, tmp_path, capsys):
    from onlstm.logic.config import LogicTrainConfig
    from onlstm.logic.data import load_test_examples, load_training_examples

    longest = lambda examples: max(len(token_ids(f)) for ex in examples for f in (ex.a, ex.b))
    trained, tested = longest(load_training_examples(data, LogicTrainConfig())), longest(load_test_examples(data))
    assert trained < tested  # the test files hold longer formulas: only --score-test reads them
    out = tmp_path / "run"
    argv = ["logic", "train", "--data", str(data), "--out", str(out), "--cell", "transformer", "--max-steps", "1"]
    argv += [*SMALL, "--encoder-options", "heads=2", "positions=learned"]
    for limit, extra in ((trained - 1, []), (trained, ["--score-test"])):
        assert main([*argv, f"max_length={limit}", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("onlstm logic train: the training") and "\n" not in err
        assert f"up to {tested if extra else trained} tokens" in err and "positions=sinusoidal" in err
        assert not out.exists()
    assert main([*argv, f"max_length={trained}"]) == 0  # without --score-test the training formulas fit
