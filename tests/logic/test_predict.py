"""A classifier's predictions for pairs of formulas: ``LogicClassifier.predict`` / ``relation_probabilities`` from
Python and ``onlstm logic predict`` from the command line (docs/logic.md, "Predicting relations")."""

from __future__ import annotations

import json

import pytest
import torch

from onlstm.cli import main
from onlstm.logic.config import LogicModelConfig
from onlstm.logic.data import read_examples
from onlstm.logic.formulas import FormulaSyntaxError, to_text
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.logic.model import LogicClassifier, encode_examples, predict_encoded
from onlstm.logic.relations import RELATIONS


def _model(seed: int = 0) -> LogicClassifier:
    torch.manual_seed(seed)
    return LogicClassifier(LogicModelConfig(emb_size=8, hidden_size=16, chunk_size=4, mlp_hidden=16))


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    out = tmp_path_factory.mktemp("predict-data")
    generate_dataset(out, GenerateConfig(per_length=10, seed=3, max_ops=4, test_count=5), log=None)
    return read_examples(out, split="test")


def test_predict_is_the_evaluations_prediction_in_the_relations_order(examples):
    """The texts read again give what scoring the encoded pairs gives (the path `logic eval` takes)."""
    model = _model()
    pairs = [(to_text(ex.a), to_text(ex.b)) for ex in examples]
    want = [RELATIONS[k] for k in predict_encoded(model, encode_examples(examples))]
    assert model.predict(pairs) == want
    assert model.predict([(ex.a, ex.b) for ex in examples]) == want  # Formula objects too
    probabilities = model.relation_probabilities(pairs, batch_size=3)
    torch.testing.assert_close(probabilities.sum(1), torch.ones(len(pairs)))
    single = torch.cat([model.relation_probabilities([p]) for p in pairs[:6]])
    torch.testing.assert_close(single, probabilities[:6], rtol=1e-5, atol=1e-6)  # batches change no result


def test_a_float64_model_gives_its_probabilities_in_float64(examples):
    """They were cast to float32: a user who made the model float64 for exact values got 7 digits back."""
    model, pairs = _model().double(), [(to_text(ex.a), to_text(ex.b)) for ex in examples]
    got = model.relation_probabilities(pairs)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.sum(1), torch.ones(len(pairs), dtype=torch.float64), rtol=0, atol=1e-12)
    assert model.float().relation_probabilities(pairs).dtype == torch.float32
    assert model.predict(pairs) == model.double().predict(pairs)


@pytest.mark.parametrize("k", range(len(RELATIONS)))
def test_the_column_of_each_relation_by_injected_weights(k):
    model = _model()
    last = [m for m in model.mlp if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.nn.functional.one_hot(torch.tensor(k), len(RELATIONS)) * 20.0)
    assert model.predict([("a", "b"), ("( not a )", "( a ( or b ) )")]) == [RELATIONS[k]] * 2


def test_predict_gives_the_model_back_in_its_mode_and_names_a_bad_pair():
    model = _model().train()
    model.predict([("a", "b")])
    assert model.training
    with pytest.raises(FormulaSyntaxError, match=r"pair 1, second formula: .*'\( a and b \)'"):
        model.predict([("a", "b"), ("a", "( a and b )")])
    for bad, match in (("a b", "list of"), ([("a",)], "pair 0 must be two formulas"), ([], "empty")):
        with pytest.raises(ValueError, match=match):
            model.predict(bad)


def test_the_command_writes_the_data_files_format_in_the_order_read(examples, tmp_path, capsys):
    model = _model()
    model.save_pretrained(tmp_path / "m")
    pairs = [(to_text(ex.a), to_text(ex.b)) for ex in examples[:8]]
    (tmp_path / "pairs.txt").write_text("\n".join(f"{a}\t{b}" for a, b in pairs[:4]) + "\n\n" +
                                        "\n".join(f"{a}\t{b}" for a, b in pairs[4:]) + "\n")  # fmt: skip
    assert main(["logic", "predict", "--checkpoint", str(tmp_path / "m"), str(tmp_path / "pairs.txt")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{r}\t{a}\t{b}" for r, (a, b) in zip(model.predict(pairs), pairs)]
    args = ["logic", "predict", "--checkpoint", str(tmp_path / "m"), str(tmp_path / "pairs.txt"), "--json"]
    assert main(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["relation"] for r in rows] == model.predict(pairs)
    assert all(abs(sum(r["probabilities"].values()) - 1) < 1e-5 and list(r["probabilities"]) == list(RELATIONS)
               for r in rows)  # fmt: skip


@pytest.mark.parametrize(
    "text,message",
    [
        ("=\ta\tb\n", "line 1: expected A<TAB>B, found 3 TAB-separated fields; a labelled line"),
        ("a\tb\n( a and b )\ta\n", "line 2: the first formula is not in the notation"),
        ("\n\n", "holds no pair of formulas"),
    ],
)
def test_the_command_refuses_bad_lines_in_one_line(text, message, tmp_path, capsys):
    _model().save_pretrained(tmp_path / "m")
    (tmp_path / "pairs.txt").write_text(text)
    assert main(["logic", "predict", "--checkpoint", str(tmp_path / "m"), str(tmp_path / "pairs.txt")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
