"""Language models over encoders that carry no state across segments (the registry's ``stateful=False``:
the Transformer) and over one that is not causal (the Sliced RNN, refused): segments independent in
training and in both evaluation protocols, exact resume, the length limit checked before training,
syntactic-evaluation scoring batched == alone, and the commands."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from onlstm.checkpoint import read_json
from onlstm.cli import main
from onlstm.lm import LanguageModel, LMConfig
from onlstm.lm.config import explicit_settings
from onlstm.lm.data import batchify
from onlstm.lm.evaluate import perplexity, stream_loss
from onlstm.lm.train import train
from onlstm.models.prefix_tree import prefix_token_logprobs
from onlstm.syneval.evaluate import token_logprobs
from support import TINY_LM, quiet, with_train, write_corpus

TRANSFORMER = {"cell": "transformer", "encoder_options": {"heads": 2, "block_dropout": 0.1}}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def tiny_transformer(vocab: int = 11, seed: int = 0, **options) -> LanguageModel:
    torch.manual_seed(seed)
    cfg = LMConfig(vocab_size=vocab, emb_size=8, hidden_sizes=[12, 8], **{**TRANSFORMER, **options})
    return LanguageModel(cfg).eval()


def settings(model: dict | None = None, **train) -> dict:
    return explicit_settings(TINY_LM, {"train": train, "model": {**TRANSFORMER, **(model or {})}})


# --------------------------------------------------------------------------- the model and evaluation


def test_segment_two_does_not_depend_on_segment_one():
    m = tiny_transformer()
    seg1, seg2 = torch.randint(0, 11, (6, 3)), torch.randint(0, 11, (5, 3))
    other1 = (seg1 + 1) % 11
    _, state, _ = m(seg1)
    assert state is None  # nothing to carry
    after, _, _ = m(seg2, state)
    _, other_state, _ = m(other1)  # another first segment
    after_other, _, _ = m(seg2, other_state)
    alone, _, _ = m(seg2)
    assert torch.equal(after, alone) and torch.equal(after_other, alone)
    with pytest.raises(ValueError, match="carries no state across calls; pass state=None"):
        m(seg2, [None, None])


def test_evaluation_reads_every_segment_afresh():
    m = tiny_transformer()
    ids = torch.randint(0, 11, (61,))
    paper = perplexity(m, ids, "paper", bptt=5)
    # the stream's loss is the sum of each segment scored alone (its own inputs, its own targets)
    alone = sum(stream_loss(m, batchify(ids[i : i + 6], 1), 5)[0] for i in range(0, 60, 5))
    assert paper.loss * paper.tokens == pytest.approx(alone, rel=1e-9) and paper.tokens == 60
    # and a token's prediction depends on its own segment only: change segment 1, segment 2 scores the same
    changed = ids.clone()
    changed[:5] = (changed[:5] + 3) % 11
    a = stream_loss(m, batchify(ids[:11], 1), 5)[0] - stream_loss(m, batchify(ids[:6], 1), 5)[0]
    b = stream_loss(m, batchify(changed[:11], 1), 5)[0] - stream_loss(m, batchify(changed[:6], 1), 5)[0]
    assert a == pytest.approx(b, rel=1e-9)
    # an encoder with state gives a different total when segments are cut (the test can tell the two apart)
    torch.manual_seed(0)
    lstm = LanguageModel(LMConfig(vocab_size=11, emb_size=8, hidden_sizes=[12, 8], cell="lstm")).eval()
    carried = perplexity(lstm, ids, "paper", bptt=5)
    cold = sum(stream_loss(lstm, batchify(ids[i : i + 6], 1), 5)[0] for i in range(0, 60, 5))
    assert abs(carried.loss * carried.tokens - cold) > 1e-3


def test_syneval_scoring_batched_equals_alone():
    m = tiny_transformer(encoder_options={"heads": 2, "positions": "learned"})
    seqs = [[0, 3, 4, 5], [0, 2], [0, 7, 1, 9, 9, 4, 2], [0, 5, 5]]
    batched = token_logprobs(m, seqs, batch_size=4)
    for s, lp in zip(seqs, batched):
        torch.testing.assert_close(lp, token_logprobs(m, [s], batch_size=1)[0], rtol=1e-6, atol=1e-6)


def test_prefix_tree_scoring_of_a_stateless_model_reads_each_prefix_whole():
    # the prefix tree continues each prefix from its parent's state; a Transformer carries none, so it is read
    # padded instead (before, each token was read without the words before it)
    m = tiny_transformer()
    seqs = [[0, 3, 4, 5], [0, 3, 4, 2], [0, 7, 1, 9, 9, 4, 2]]
    for s, lp in zip(seqs, prefix_token_logprobs(m, seqs)):
        torch.testing.assert_close(lp, token_logprobs(m, [s], batch_size=1)[0], rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- training


def test_training_carries_no_state_and_resumes_exactly(tmp_path, corpus):
    s = settings(momentum=0.3)
    seen = []
    full = train(tmp_path / "full", corpus, s, on_step=lambda t: seen.append(t.hidden), log=quiet)
    assert full.status == "finished" and seen and all(h is None for h in seen)
    part = train(tmp_path / "part", corpus, with_train(s, max_steps=len(seen) // 2 + 3), log=quiet)  # in epoch 2
    assert part.status == "stopped"
    assert not any(k.startswith("hidden.") for k in load_file(str(tmp_path / "part" / "resume.safetensors")))
    assert train(tmp_path / "part", corpus, with_train(s, max_steps=None), resume=True, log=quiet).status == "finished"
    for name in ("model.last", "model.best", "resume"):
        a, b = (load_file(str(tmp_path / r / f"{name}.safetensors")) for r in ("full", "part"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    results = read_json(tmp_path / "full" / "results.json")
    assert results["test"]["protocol"] == "paper" and results["test"]["batch_size"] == 1  # tiny.yaml: batch 1
    assert results == read_json(tmp_path / "part" / "results.json") | {"seconds": results["seconds"]}


def test_learned_positions_shorter_than_the_schedule_are_refused_before_training(tmp_path, corpus, capsys):
    out = tmp_path / "run"
    argv = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--out", str(out), "--cell"]
    argv += ["transformer", "--encoder-options", "heads=2", "positions=learned", "max_length=8"]
    assert main(argv) == 2  # tiny.yaml: bptt 8 with bptt_std 2, so some segments are longer than 8
    err = capsys.readouterr().err.strip()
    assert err.startswith("onlstm lm train: the training schedule has segments of up to") and "\n" not in err
    assert "max_length" in err and "positions=sinusoidal" in err
    assert not (out / "config.json").exists()


# --------------------------------------------------------------------------- commands


def test_transformer_lm_trains_and_evaluates_from_the_command_line(tmp_path, corpus, capsys):
    out = tmp_path / "run"
    argv = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--out", str(out), "--epochs", "1"]
    assert main([*argv, "--cell", "transformer", "--encoder-options", "heads=2", "positions=learned"]) == 0
    saved = read_json(out / "config.json")
    assert saved["model"]["cell"] == "transformer"
    assert saved["model"]["encoder_options"] == {"heads": 2, "positions": "learned"}
    capsys.readouterr()
    assert main(["lm", "eval", "--checkpoint", str(out), "--data-dir", str(corpus), "--protocol", "paper"]) == 0
    assert "perplexity" in capsys.readouterr().out
    assert main(["parsing", "parse", "--checkpoint", str(out), str(tmp_path / "none.txt")]) == 2  # no master gates
    assert "'transformer' model has no master gates" in capsys.readouterr().err


def test_sliced_rnn_is_refused_as_a_language_model(tmp_path, corpus, capsys):
    argv = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--out", str(tmp_path / "r")]
    assert main([*argv, "--cell", "sliced"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("onlstm lm train: ") and "\n" not in err
    assert "encoder 'sliced' is not causal per step" in err and "cannot be a language model" in err
    assert "choose a causal one: " in err and "transformer" in err.split("choose a causal one: ")[1]
    assert "sliced" not in err.split("choose a causal one: ")[1]
    assert not (tmp_path / "r" / "config.json").exists()
