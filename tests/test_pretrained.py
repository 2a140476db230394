"""Sharing models (issue 13): save_pretrained / from_pretrained in Hugging Face's layout for the language
model and the logic classifier, `onlstm export` from a run with a model card, every loader reading both
layouts, and a clear message for a Hub id without huggingface_hub. Local directories only (no network)."""

from __future__ import annotations

import shlex
import sys

import pytest
import torch

from onlstm.checkpoint import CheckpointError, config_header, read_json, save_weights
from onlstm.cli import build_parser, main
from onlstm.config import flags_given
from onlstm.data.vocab import Vocab
from onlstm.files import MARKER, write_json
from onlstm.lm.config import TrainConfig, load_config, train_command
from onlstm.logic.config import LogicModelConfig, LogicTrainConfig
from onlstm.logic.model import TOKENS, LogicClassifier, pad_batch, token_ids
from onlstm.models import LanguageModel, LMConfig

WORDS = ["<eos>", "<unk>", "the", "cat", "sat", "on", "mat", "a", "dog", "ran"]
SHARED = {"config.json", "model.safetensors", "vocab.json", "README.md", MARKER}  # the marker: an export's folder


def small_lm(seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    cfg = LMConfig(vocab_size=len(WORDS), emb_size=8, hidden_sizes=[12, 12, 8], chunk_size=4, cell="onlstm")
    return LanguageModel(cfg).eval()


def lm_outputs(model: LanguageModel) -> torch.Tensor:
    tokens = torch.tensor([[2, 3, 4, 5, 2, 6]]).T  # (T, 1)
    with torch.no_grad():
        out, _, extras = model(tokens, return_distances=True)
    return torch.cat([model.logits(out).flatten(), extras["distances"][1].forget.flatten()])


def test_language_model_round_trip(tmp_path):
    model = small_lm()
    model.save_pretrained(tmp_path / "m", Vocab(WORDS), command="onlstm lm train ...", results={"test": {"ppl": 9.5}})
    assert {p.name for p in (tmp_path / "m").iterdir()} == SHARED
    config = read_json(tmp_path / "m" / "config.json")
    assert config["kind"] == "lm" and config["model"]["hidden_sizes"] == [12, 12, 8]
    back = LanguageModel.from_pretrained(tmp_path / "m")
    assert not back.training and back.vocab.words == WORDS
    assert torch.equal(lm_outputs(back), lm_outputs(model))
    assert not torch.equal(lm_outputs(small_lm(seed=1)), lm_outputs(model))  # the comparison can fail
    card = (tmp_path / "m" / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: onlstm\n") and "onlstm lm train ..." in card and "ppl: 9.5" in card
    with pytest.raises(ValueError, match="the vocabulary has 3 words but the model expects 10"):
        model.save_pretrained(tmp_path / "bad", ["a", "b", "c"])


def write_run(run, model: LanguageModel, **extra) -> None:
    """A run directory as `lm train` lays it out (model.best.safetensors, config.json, vocab.json)."""
    save_weights(run / "model.best.safetensors", model)
    Vocab(WORDS).save(run / "vocab.json")
    write_json(run / "config.json", config_header("lm", model.config.to_dict(), text_normalisation="lower", **extra))


def test_parse_reads_both_layouts_alike(tmp_path, capsys):
    model = small_lm()
    write_run(tmp_path / "run", model)
    model.save_pretrained(tmp_path / "shared", Vocab(WORDS), run_config=read_json(tmp_path / "run" / "config.json"))
    (tmp_path / "in.txt").write_text("the cat sat on the mat\na dog ran\n")
    outputs = []
    for where in ("run", "shared"):
        capsys.readouterr()
        assert main(["parsing", "parse", str(tmp_path / "in.txt"), "--checkpoint", str(tmp_path / where)]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].count("\n") == 2 and "(" in outputs[0]


def test_export_writes_a_card_with_a_command_that_reproduces_the_settings(tmp_path, capsys):
    model = small_lm()
    train = TrainConfig(epochs=3, lr=20.0, averaging=False, bptt=35, threads=1).to_dict()
    write_run(tmp_path / "run", model, train=train, data={"data_dir": "/data/ptb"})
    write_json(tmp_path / "run" / "results.json", {"test": {"ppl": 123.4}})
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--to", str(tmp_path / "out")]) == 0
    assert {p.name for p in (tmp_path / "out").iterdir()} == SHARED
    card = (tmp_path / "out" / "README.md").read_text()
    command = train_command(read_json(tmp_path / "run" / "config.json"))
    assert command in card and "ppl: 123.4" in card
    # the command, read by the real parser, gives back exactly the saved settings
    args = build_parser().parse_args(shlex.split(command)[1:])
    rebuilt = load_config(None, args)
    assert rebuilt.train.to_dict() == train and str(args.data_dir) == "/data/ptb"
    assert rebuilt.model_config(len(WORDS)) == model.config
    assert torch.equal(lm_outputs(LanguageModel.from_pretrained(tmp_path / "out")), lm_outputs(model))
    # a run directory is never overwritten by an export
    assert main(["export", "--checkpoint", str(tmp_path / "out"), "--to", str(tmp_path / "run")]) == 2
    assert "holds a training run (model.best.safetensors)" in capsys.readouterr().err
    # the last weights are not the ones the run's results were measured on: their card does not show those
    save_weights(tmp_path / "run" / "model.last.safetensors", small_lm(seed=1))
    for given in (["--weights", "last"], []):
        checkpoint = str(tmp_path / "run") if given else str(tmp_path / "run" / "model.last.safetensors")
        out = tmp_path / f"last{len(given)}"
        assert main(["export", "--checkpoint", checkpoint, *given, "--to", str(out)]) == 0
        card = (out / "README.md").read_text()
        assert "ppl: 123.4" not in card and "the run's results are those of model.best.safetensors" in card


def test_logic_classifier_round_trip_and_export(tmp_path):
    from onlstm.logic.cli import train_command as logic_command
    from onlstm.logic.model import load_classifier

    torch.manual_seed(0)
    model = LogicClassifier(LogicModelConfig(emb_size=8, hidden_size=12, chunk_size=4, mlp_hidden=6)).eval()
    a, la = pad_batch([token_ids("( a and b )"), token_ids("not c")])
    b, lb = pad_batch([token_ids("a"), token_ids("( not c ) or d")])
    train = LogicTrainConfig(epochs=2, lr=0.01).to_dict()
    header = config_header(
        "logic-classifier", model.config.to_dict(), train=train, data={"path": "/d"}, result={"acc": 0.5}
    )
    model.save_pretrained(tmp_path / "m", run_config=header, command=logic_command(header), results=header["result"])
    assert {p.name for p in (tmp_path / "m").iterdir()} == SHARED
    assert read_json(tmp_path / "m" / "vocab.json") == list(TOKENS)
    back = LogicClassifier.from_pretrained(tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(back(a, la, b, lb), model(a, la, b, lb))
    assert load_classifier(tmp_path / "m")[1]["train"] == train  # the evaluation loader reads it too
    args = build_parser().parse_args(shlex.split(logic_command(header))[1:])
    assert LogicTrainConfig.from_dict(flags_given(args, "train")).to_dict() == train
    assert LogicModelConfig.from_dict(flags_given(args, "model")) == model.config


def test_the_card_says_the_results_in_words_and_offers_what_the_model_can_do(tmp_path):
    """A card's reader gets the perplexities with their protocols and why training stopped in words (results.json's
    ``best`` is a score, minus a loss); parsing is offered only to a model with master gates."""
    from onlstm.runs.engine import STATUS
    from onlstm.sharing import STOPPED_BY

    results = {"stopped_by": "patience", "best": -4.6, "epochs": 12.5, "test": {"ppl": 80.0258, "protocol": "paper",
               "batch_size": 1, "bptt": 35}, "valid": {"ppl": 83.1, "protocol": "batched", "batch_size": 10, "bptt": 35}}  # fmt: skip
    small_lm().save_pretrained(tmp_path / "on", Vocab(WORDS), results=results)
    card = (tmp_path / "on" / "README.md").read_text()
    assert (
        "Validation perplexity **83.10** (protocol batched: 10 columns, each from a zero state, segments of 35)."
        in card
    )
    assert "Test perplexity **80.03** (protocol paper: one stream, batch 1, segments of 35)." in card
    assert "Trained 12.5 epochs, stopped by its patience" in card and "onlstm parsing parse" in card
    torch.manual_seed(0)
    lstm = LanguageModel(LMConfig(vocab_size=len(WORDS), emb_size=8, hidden_sizes=[12, 8], cell="lstm"))
    lstm.save_pretrained(tmp_path / "lstm", Vocab(WORDS), results={"test": {"ppl": 9.5}})
    card = (tmp_path / "lstm" / "README.md").read_text()
    assert "Test perplexity **9.50**." in card and "Trained" not in card  # nothing said that the file does not hold
    assert "onlstm parsing parse" not in card and "onlstm lm surprisal" in card  # an LSTM induces no trees
    # every way a run can end with a result has its words (interrupted runs are resumed, not shared)
    assert set(STATUS) - {"interrupted", "aborted"} == set(STOPPED_BY)
    clf = LogicClassifier(LogicModelConfig(emb_size=8, hidden_size=12, chunk_size=4, mlp_hidden=6))
    clf.save_pretrained(tmp_path / "logic", results={"best_valid_accuracy": 0.971, "n_valid": 1200, "epochs": 20.0,
                                                    "stopped_by": "epochs"})  # fmt: skip
    card = (tmp_path / "logic" / "README.md").read_text()
    assert (
        "Best validation accuracy **97.10%** on 1,200 pairs. Trained 20 epochs, stopped by its limit of epochs." in card
    )


def test_hub_id_without_huggingface_hub_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as on a machine without it
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match=r"install huggingface_hub \(pip install huggingface_hub\)"):
        LanguageModel.from_pretrained("someone/onlstm-ptb")
    with pytest.raises(CheckpointError, match=r"nowhere/at/all does not exist"):
        LogicClassifier.from_pretrained("nowhere/at/all")


def test_export_refuses_what_it_cannot_export(tmp_path, capsys):
    write_json(tmp_path / "cmp" / "config.json", {"kind": "logic-compare"})
    save_weights(tmp_path / "cmp" / "model.best.safetensors", torch.nn.Linear(1, 1))
    assert main(["export", "--checkpoint", str(tmp_path / "cmp"), "--to", str(tmp_path / "o")]) == 2
    assert "cannot export a run of kind 'logic-compare'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_export_to_a_file_or_an_unwritable_directory_is_one_line(tmp_path, capsys):
    import os

    model = small_lm()
    write_run(tmp_path / "run", model)
    (tmp_path / "file").write_text("x")
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--to", str(tmp_path / "file")]) == 2
    assert "is a file; save_pretrained needs a directory" in capsys.readouterr().err
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere: the unwritable case cannot be made here")
    (tmp_path / "ro").mkdir(mode=0o500)
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--to", str(tmp_path / "ro" / "m")]) == 2
    assert "cannot write in" in capsys.readouterr().err


def test_exporting_a_logic_run_does_not_import_the_demo(tmp_path, monkeypatch, capsys):
    """Only a demo's run takes its command from onlstm.demo (which needs nltk): a logic run exports without nltk."""
    torch.manual_seed(0)
    model = LogicClassifier(LogicModelConfig(emb_size=8, hidden_size=12, chunk_size=4, mlp_hidden=6))
    header = config_header("logic-classifier", model.config.to_dict(), train=LogicTrainConfig().to_dict())
    model.save_pretrained(tmp_path / "m", run_config=header)
    for name in ("onlstm.demo", "onlstm.data.grammar"):  # imported afresh, and now without nltk
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, "nltk", None)  # as on a machine without nltk
    assert main(["export", "--checkpoint", str(tmp_path / "m"), "--to", str(tmp_path / "out")]) == 0
    assert "saved" in capsys.readouterr().out
    back = LogicClassifier.from_pretrained(tmp_path / "out").state_dict()
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())


def test_save_pretrained_names_its_arguments_not_the_commands_flags(tmp_path):
    """#48: a refusal raised from Python names save_pretrained's argument (overwrite=True), never --to/--overwrite."""
    from onlstm.errors import InputError
    from onlstm.models.language_model import LanguageModel, LMConfig

    model = LanguageModel(LMConfig(vocab_size=5, emb_size=4, hidden_sizes=[8, 4], chunk_size=4))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    with pytest.raises(InputError) as refused:
        model.save_pretrained(tmp_path / "mine", ["<unk>", "<eos>", "a", "b", "c"])
    assert "overwrite=True" in str(refused.value) and "--" not in str(refused.value)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "the user's"
    assert str(refused.value).startswith("save_pretrained: directory ") and "new or empty directory," in str(
        refused.value
    )


def test_the_scorers_give_the_model_back_in_its_mode():
    """score, perplexity, surprisals and parse run in eval mode; called inside a training loop, they used to leave
    the model in eval mode, its dropout off for the rest of the training."""
    model = small_lm()
    model.vocab, model.run_config = Vocab(WORDS), {"text_normalisation": "lower"}
    for use in (
        lambda: model.score("the cat sat"),
        lambda: model.perplexity(["the cat", "a dog ran"]),
        lambda: model.surprisals("the cat"),
        lambda: model.parse("the cat sat on the mat"),
    ):
        model.train()
        use()
        assert model.training
        model.eval()
        use()
        assert not model.training


def test_the_scorers_give_every_submodule_back_its_own_mode():
    """A training model with a part frozen in eval mode (``model.layers[0].eval()``): the scorers used to give back
    ``model.train()`` as a whole, switching the frozen part's dropout on."""
    from onlstm.logic.model import LogicClassifier, LogicModelConfig

    model = small_lm()
    model.vocab, model.run_config = Vocab(WORDS), {"text_normalisation": "lower"}
    classifier = LogicClassifier(LogicModelConfig(emb_size=8, hidden_size=8, chunk_size=4))
    for net, use in (
        (model, lambda: model.score("the cat sat")),
        (model, lambda: model.surprisals("the cat")),
        (model, lambda: model.parse("the cat sat on the mat")),
        (classifier, lambda: classifier.predict([("a", "( not a )")])),
    ):
        net.train()
        frozen = next(m for m in net.modules() if m is not net)
        frozen.eval()
        modes = [m.training for m in net.modules()]
        use()
        assert [m.training for m in net.modules()] == modes


def test_the_python_api_refuses_what_it_would_misread(tmp_path):
    from onlstm.errors import InputError

    model = small_lm()
    model.run_config = {"text_normalisation": "lower"}
    model.vocab = Vocab(["x", *WORDS[1:]])  # no <eos>: every sentence's end would be read as <unk>
    with pytest.raises(InputError, match="has no <eos>"):
        model.score("the cat")
    with pytest.raises(InputError, match="has no <eos>"):
        model.surprisals("the cat")
    model.vocab = Vocab(WORDS)
    for words in (["the", "", "cat"], ["the", 3], ["the", "  "]):
        with pytest.raises(InputError, match="sentence 0: each word of a list must be a non-empty string"):
            model.score([words])
    assert model.score([["the", "cat"]]) == model.score("the cat")


def test_a_vocabulary_set_by_hand_is_read_as_save_pretrained_reads_it():
    """``model.vocab = [words]`` (a list, as save_pretrained takes) used to fail deep inside (AttributeError:
    'list' object has no attribute 'encode'), and a vocabulary longer than the model's output an IndexError."""
    from onlstm.errors import InputError

    model = small_lm()
    model.run_config = {"text_normalisation": "lower"}
    model.vocab = Vocab(WORDS)
    expected = (model.score("the cat sat"), model.surprisals("the cat")[0], model.parse("the cat sat")[0].tree)
    model.vocab = list(WORDS)
    got = (model.score("the cat sat"), model.surprisals("the cat")[0], model.parse("the cat sat")[0].tree)
    assert got[0] == expected[0] and torch.equal(got[1], expected[1]) and got[2] == expected[2]
    for vocab, message in (
        ([*WORDS, "zebra"], "model.vocab has 11 words but the model expects 10"),
        (WORDS[:-1], "model.vocab has 9 words but the model expects 10"),
        ("the cat", "model.vocab must be a Vocab or a list of words, got str"),
        ([*WORDS[:-1], "the"], "duplicate words"),
        (None, "the model has no vocabulary"),
    ):
        model.vocab = vocab
        for use in (lambda: model.score("saw the zebra"), lambda: model.surprisals("the"), lambda: model.parse("a b")):
            with pytest.raises(InputError, match=message):
                use()


def test_the_python_apis_bad_arguments_are_the_librarys_input_errors(tmp_path):
    """Pairs that are not pairs, a language model without master gates asked for trees, a dtype that is not a
    floating-point torch.dtype: these raised a plain ValueError, which the library's own error types (the
    ``OnlstmError`` a notebook or the command line catches as "used wrongly") did not cover."""
    from onlstm.errors import InputError
    from onlstm.logic.model import LogicModelConfig

    classifier = LogicClassifier(LogicModelConfig(emb_size=8, hidden_size=8, chunk_size=4))
    for pairs in ("a", [], [("a",)], [(None, "a")], None):
        with pytest.raises(InputError, match="pair"):
            classifier.predict(pairs)
    with pytest.raises(InputError, match="unknown token 'z'"):
        token_ids("z")
    with pytest.raises(InputError, match="batch_size must be a whole number"):
        classifier.relation_probabilities([("a", "b")], batch_size=0)
    lstm = LanguageModel(LMConfig(vocab_size=len(WORDS), emb_size=8, hidden_sizes=[8], cell="lstm"))
    lstm.vocab, lstm.run_config = Vocab(WORDS), {"text_normalisation": "lower"}
    with pytest.raises(InputError, match="a 'lstm' model has no master gates"):
        lstm.parse("the cat")
    with pytest.raises(InputError, match="the vocabulary has 3 words but the model expects 10"):
        lstm.save_pretrained(tmp_path / "bad", ["a", "b", "c"])
    lstm.save_pretrained(tmp_path / "m")
    with pytest.raises(InputError, match="dtype must be a floating-point torch.dtype"):
        LanguageModel.from_pretrained(tmp_path / "m", dtype="float64")


def test_loading_a_model_leaves_the_callers_random_numbers_alone(tmp_path):
    """from_pretrained built the model (random initial weights, then replaced by the saved ones) from the global RNG,
    so ``torch.manual_seed(0); from_pretrained(...); torch.rand(3)`` drew other numbers than without the load."""
    from onlstm.logic.model import LogicModelConfig

    small_lm().save_pretrained(tmp_path / "lm", WORDS)
    LogicClassifier(LogicModelConfig(emb_size=8, hidden_size=8, chunk_size=4)).save_pretrained(tmp_path / "logic")
    torch.manual_seed(0)
    expected = torch.rand(3)
    for load in (
        lambda: LanguageModel.from_pretrained(tmp_path / "lm"),
        lambda: LogicClassifier.from_pretrained(tmp_path / "logic"),
    ):
        torch.manual_seed(0)
        load()
        assert torch.equal(torch.rand(3), expected)


def test_save_pretrained_refuses_what_from_pretrained_could_not_read(tmp_path):
    from onlstm.errors import InputError

    model = small_lm()
    with pytest.raises(InputError, match="must be non-empty strings, got 0"):
        model.save_pretrained(tmp_path / "ints", list(range(len(WORDS))))
    with pytest.raises(InputError, match="duplicate words"):
        model.save_pretrained(tmp_path / "dup", [*WORDS[:-1], "the"])
    with pytest.raises(InputError, match="run_config must hold JSON values only"):
        model.save_pretrained(tmp_path / "obj", WORDS, run_config={"x": object()})
    with pytest.raises(InputError, match="run_config must be a dict"):
        model.save_pretrained(tmp_path / "list", WORDS, run_config=[1, 2])
    assert not any(tmp_path.iterdir())  # nothing written
    model.save_pretrained(tmp_path / "first", WORDS, run_config={"text_normalisation": "lower", "note": 1})
    back = LanguageModel.from_pretrained(tmp_path / "first")
    back.save_pretrained(tmp_path / "second")  # its vocabulary and header by default
    assert read_json(tmp_path / "second" / "config.json")["note"] == 1


UNUSABLE = ["tpu9", "cuda:99", "meta"] + ([] if torch.cuda.is_available() else ["cuda"])
# a backend torch knows but this machine lacks (its own RuntimeError came from deep inside the load)
UNUSABLE += [] if torch.backends.mps.is_available() else ["mps"]


@pytest.mark.parametrize("device", UNUSABLE, ids=[f"device{k}" for k in range(len(UNUSABLE))])  # not "cuda"
def test_a_device_that_cannot_be_used_is_one_line(tmp_path, device):
    from onlstm.errors import InputError

    small_lm().save_pretrained(tmp_path / "m", WORDS)
    with pytest.raises(InputError, match=f"device '{device}'"):
        LanguageModel.from_pretrained(tmp_path / "m", device=device)
    with pytest.raises(InputError, match=f"device '{device}'"):
        LogicClassifier.from_pretrained(tmp_path / "m", device=device)


def test_a_mistyped_local_path_is_not_only_taken_for_a_hub_id(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(CheckpointError, match=r"runs/nonexist is not a local directory \(though runs is: mistyped\?\)"):
        LanguageModel.from_pretrained("runs/nonexist")


def test_an_evaluation_stopped_midway_gives_the_model_back_in_its_mode():
    """The mode is given back on every way out of an evaluation, a stop request (Ctrl-C) included; inside it the
    model reads without its dropouts (on by default: two reads in a training loop agree)."""
    from onlstm.lm.evaluate import stream_loss
    from onlstm.runs.engine import Interrupted

    model = small_lm()
    data = torch.randint(0, len(WORDS), (30, 2))
    model.train()
    first, second = stream_loss(model, data, 5), stream_loss(model, data, 5)
    assert model.training and first == second
    with pytest.raises(Interrupted):
        stream_loss(model, data, 5, should_stop=lambda: True)
    assert model.training


def test_a_model_comes_back_in_the_dtype_it_was_saved_in_or_the_one_asked(tmp_path):
    """A float64 model used to come back rounded to float32 without a word: its outputs differed from the saved
    model's at 1e-8, which a gradient check or a float64 comparison notices."""
    from onlstm.logic.model import LogicClassifier, LogicModelConfig

    model = small_lm().double()
    model.vocab, model.run_config = Vocab(WORDS), {"text_normalisation": "lower"}
    model.save_pretrained(tmp_path / "lm")
    back = LanguageModel.from_pretrained(tmp_path / "lm")
    assert back.embedding.weight.dtype == torch.float64 and torch.equal(lm_outputs(back), lm_outputs(model))
    single = LanguageModel.from_pretrained(tmp_path / "lm", dtype=torch.float32)
    assert single.embedding.weight.dtype == torch.float32
    assert torch.allclose(lm_outputs(single).double(), lm_outputs(model), atol=1e-5)
    classifier = LogicClassifier(LogicModelConfig(emb_size=8, hidden_size=8, chunk_size=4)).double()
    classifier.save_pretrained(tmp_path / "logic")
    assert next(LogicClassifier.from_pretrained(tmp_path / "logic").parameters()).dtype == torch.float64
    with pytest.raises(ValueError, match="floating-point torch.dtype"):
        LanguageModel.from_pretrained(tmp_path / "lm", dtype=torch.int64)
    with pytest.raises(ValueError, match="floating-point torch.dtype"):
        LanguageModel.from_pretrained(tmp_path / "lm", dtype="float64")
