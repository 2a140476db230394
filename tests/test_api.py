"""The Python API (docs/sharing.md, "From Python"): what the commands do, a notebook does in a few lines. A
model's parse, score and perplexity agree with the commands and with the model read token by token; the train
functions make the runs the commands make."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest
import torch

import onlstm.lm
import onlstm.logic
from onlstm.checkpoint import config_header, read_json, save_weights
from onlstm.cli import main
from onlstm.data.vocab import Vocab
from onlstm.errors import InputError
from onlstm.files import write_json
from onlstm.models import LanguageModel, LMConfig
from onlstm.runs import RunDir
from support import TINY_LM, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = "<eos> <unk> the cat sat on mat a dog ran".split()
SENTENCES = ["The cat sat on the mat .", "a dog ran", "the cat ran on a mat"]


@pytest.fixture
def run(tmp_path):
    torch.manual_seed(0)
    model = LanguageModel(LMConfig(vocab_size=len(WORDS), emb_size=8, hidden_sizes=[12, 12, 8], chunk_size=4))
    save_weights(tmp_path / "run" / "model.best.safetensors", model)
    Vocab(WORDS).save(tmp_path / "run" / "vocab.json")
    write_json(tmp_path / "run" / "config.json", config_header("lm", model.config.to_dict()))
    return tmp_path / "run"


def test_parse_gives_what_the_parse_command_prints(run, tmp_path, capsys):
    lm = LanguageModel.from_pretrained(run)
    parsed = lm.parse(SENTENCES)
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    assert main(["parsing", "parse", "--checkpoint", str(run), "--format", "json", str(tmp_path / "in.txt")]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    for p, row in zip(parsed, printed, strict=True):
        assert p.words == row["words"] and p.brackets == row["tree"] and p.layer == 2
        assert torch.allclose(p.distances, torch.tensor(row["distances"]), atol=1e-5)  # (layers, words)
        assert p.nltk().leaves() == p.words and p.drawing().splitlines()[-1].split() == p.words
    assert parsed[0].words == "the cat sat on the mat".split()  # lower case, punctuation dropped, as the command
    assert [p.layer for p in lm.parse(SENTENCES, layer=1)] == [1, 1, 1]
    with pytest.raises(ValueError, match="^layer must be between 1 and 3"):  # the argument, not the flag
        lm.parse(SENTENCES, layer=4)
    with pytest.raises(ValueError, match="sentence 1 has no word"):
        lm.parse(["a dog", ". ,"])


def stepwise_log_probability(model: LanguageModel, ids: list[int], eos: int) -> float:
    """The sentence read one token at a time, the state carried by hand: another path than score's."""
    state, total = None, 0.0
    with torch.no_grad():
        for prev, nxt in zip([eos, *ids], [*ids, eos]):
            out, state, _ = model(torch.tensor([[prev]]), state)
            total += float(torch.log_softmax(model.logits(out)[0, 0].double(), -1)[nxt])
    return total


def test_score_and_perplexity_are_the_sentences_probabilities(run):
    lm = LanguageModel.from_pretrained(run)
    scores = lm.score(SENTENCES)
    words = lm.words(SENTENCES)
    eos = lm.vocab.index["<eos>"]
    for s, w in zip(scores, words):
        assert s == pytest.approx(stepwise_log_probability(lm, lm.vocab.encode(w)[0], eos), abs=1e-4)
    assert lm.score(SENTENCES, batch_size=1) == pytest.approx(scores, abs=1e-5)  # batched = one by one
    tokens = sum(len(w) + 1 for w in words)
    assert lm.perplexity(SENTENCES) == pytest.approx(math.exp(-sum(scores) / tokens), rel=1e-9)
    assert lm.score("a dog ran") == pytest.approx(scores[1:2])  # one string is one sentence
    with pytest.raises(ValueError, match="no vocabulary"):
        LanguageModel(lm.config).score(["a dog"])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda lm: lm.score(SENTENCES, batch_size=-1), "batch_size must be a whole number of at least 1, got -1"),
        (lambda lm: lm.score(SENTENCES, batch_size=0), "batch_size must be a whole number of at least 1, got 0"),
        (lambda lm: lm.score(SENTENCES, batch_size=2.0), "batch_size must be a whole number"),
        (lambda lm: lm.perplexity(SENTENCES, batch_size=0), "batch_size must be"),
        (lambda lm: lm.surprisals(SENTENCES, batch_size=0), "batch_size must be"),
        (lambda lm: lm.parse(SENTENCES, batch_size=-3), "batch_size must be"),
        (lambda lm: lm.parse(SENTENCES, layer=1.5), "layer must be a whole number (1 to 3), got 1.5"),
        (lambda lm: lm.parse(SENTENCES, layer=True), "layer must be a whole number"),
        (lambda lm: lm.perplexity([]), "sentences is empty: perplexity needs at least one sentence"),
        (lambda lm: lm.score(42), "sentences must be a string or a list of sentences, got int"),
        (lambda lm: lm.score([b"a dog"]), "each sentence must be a string or a list of words, got bytes"),
    ],
)
def test_the_python_api_refuses_bad_arguments_naming_them(run, call, message):
    """Each bad argument is one InputError (a ValueError) naming the argument and the rule, never a flag; before,
    batch_size=-1 returned log-probability 0 and the others raised errors about something else."""
    lm = LanguageModel.from_pretrained(run)
    with pytest.raises(InputError) as err:
        call(lm)
    assert isinstance(err.value, ValueError) and str(err.value).startswith(message.split(",")[0])
    assert message in str(err.value) and "--" not in str(err.value)


def test_the_sharing_guide_uses_what_the_train_functions_return():
    """docs/sharing.md's ``result.X`` and ``run.X`` name attributes that exist on the returned TrainResult."""
    from pathlib import Path

    from onlstm.runs.engine import TrainResult

    text = (Path(__file__).parents[1] / "docs" / "sharing.md").read_text(encoding="utf-8")
    used = set(re.findall(r"\b(?:result|run)\.(\w+)", text))
    assert used >= {"best", "model", "status", "figures", "record"}
    fields = {f.name for f in dataclasses.fields(TrainResult)} | set(dir(TrainResult))
    assert used <= fields, used - fields


def test_lm_train_function_makes_the_commands_run(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    config = onlstm.lm.load_config(TINY_LM, {"train": {"epochs": 1}})
    run = onlstm.lm.train_language_model(config, corpus, tmp_path / "run", log=lambda _: None)
    assert run.status == "finished"
    # the figure it returns is the best weights' test perplexity: measured again here from the saved run
    from onlstm.data.ptb import load_corpus
    from onlstm.lm.evaluate import perplexity

    model, test = run.model(), run.figures["test"]
    ids = load_corpus(corpus, vocab=model.vocab)["test"].ids
    again = perplexity(model, ids, test["protocol"], test["batch_size"], test["bptt"]).ppl
    assert test["ppl"] == pytest.approx(again, rel=1e-5)
    assert read_json(tmp_path / "run" / "results.json") == run.record()
    assert math.isfinite(run.model().perplexity(["the cat sat on the mat"]))
    # the same settings through the command: the same weights
    argv = ["lm", "train", "--config", str(TINY_LM), "--epochs", "1", "--data-dir", str(corpus)]
    assert main([*argv, "--out", str(tmp_path / "cli")]) == 0
    by_cli = LanguageModel.from_pretrained(tmp_path / "cli")
    assert all(torch.equal(a, b) for a, b in zip(run.model().parameters(), by_cli.parameters()))


def test_logic_train_function_returns_the_run(tmp_path):
    data = tmp_path / "data"
    onlstm.logic.generate_dataset(data, onlstm.logic.GenerateConfig(per_length=10, seed=1, max_ops=4, test_count=2))
    model_cfg, train_cfg = onlstm.logic.load_config("smoke", {"train": {"epochs": 1, "threads": 1}})
    assert (model_cfg.hidden_size, train_cfg.batch_size) == (32, 32)  # the preset's
    result = onlstm.logic.train_classifier(model_cfg, train_cfg, data, tmp_path / "run", log=None)
    assert result.stopped_by == "epochs" and result.best == result.figures["best_valid_accuracy"]
    assert 0 <= result.best <= 1 and RunDir(tmp_path / "run").results() == result.record()
    assert result.model().config == model_cfg
