"""``lm eval``'s two conventions on a model whose every loss is known by hand: ours divides the summed loss by
the tokens scored, the authors' ``evaluate()`` by the length of the stream read (docs/lm.md, "Evaluation
protocols")."""

from __future__ import annotations

import json
import math

import pytest
import torch

from onlstm.checkpoint import config_header, save_weights
from onlstm.cli import main
from onlstm.data.vocab import Vocab
from onlstm.files import write_json
from onlstm.lm.evaluate import perplexity
from onlstm.models.language_model import LanguageModel, LMConfig

WORDS = ["<eos>", "<unk>", "a", "b", "c"]
PROBS = [0.1, 0.05, 0.5, 0.25, 0.1]  # the next word's distribution, whatever came before


def known_model() -> LanguageModel:
    """A model whose logits are its decoder's bias (weights 0): p(next = w) = PROBS[w] at every step."""
    model = LanguageModel(LMConfig(vocab_size=len(WORDS), emb_size=4, hidden_sizes=[4], cell="lstm", tie_weights=False))
    with torch.no_grad():
        model.decoder.weight.zero_()
        model.decoder.bias.copy_(torch.tensor(PROBS).log())
    return model.eval()


STREAM = [0, 2, 3, 2, 0, 4, 2, 2, 3, 0, 2, 0]  # 12 tokens


@pytest.mark.parametrize("protocol, batch", [("paper", 1), ("batched", 2), ("batched", 5)])
def test_both_conventions_by_hand(protocol, batch):
    rows = len(STREAM) // batch
    columns = [STREAM[c * rows : (c + 1) * rows] for c in range(batch)]  # contiguous columns, the rest dropped
    summed = sum(-math.log(PROBS[w]) for col in columns for w in col[1:])  # the first of a column is not predicted
    result = perplexity(known_model(), torch.tensor(STREAM), protocol, batch, bptt=3)
    assert result.tokens == batch * (rows - 1) and result.stream == batch * rows
    assert result.loss == pytest.approx(summed / (batch * (rows - 1)), rel=1e-6)
    assert result.authors_loss == pytest.approx(summed / (batch * rows), rel=1e-6)  # their divisor: len(data)
    assert result.authors_ppl == pytest.approx(math.exp(summed / (batch * rows)), rel=1e-6)
    assert result.to_dict()["authors_ppl"] == result.authors_ppl


def test_the_command_prints_the_authors_figure_beside_ours(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "valid", "test"):
        (corpus / f"ptb.{split}.txt").write_text("a b a\nc a a b\na\n")  # 3 lines + <eos>: 11 tokens
    run = tmp_path / "run"
    model = known_model()
    save_weights(run / "model.best.safetensors", model)
    Vocab(WORDS).save(run / "vocab.json")
    write_json(run / "config.json", config_header("lm", model.config.to_dict(), data={"data_dir": str(corpus)}))
    assert main(["lm", "eval", "--checkpoint", str(run), "--json"]) == 0
    paper = json.loads(capsys.readouterr().out)["paper"]
    ids = [WORDS.index(w) for w in "a b a <eos> c a a b <eos> a <eos>".split()]
    summed = sum(-math.log(PROBS[w]) for w in ids[1:])
    assert paper["ppl"] == pytest.approx(math.exp(summed / 10), rel=1e-6)
    assert paper["authors_ppl"] == pytest.approx(math.exp(summed / 11), rel=1e-6)
    assert main(["lm", "eval", "--checkpoint", str(run)]) == 0
    text = capsys.readouterr().out
    assert f"the authors' evaluate() prints {math.exp(summed / 11):.2f}" in text
    assert f"perplexity {math.exp(summed / 10):.2f}" in text


def test_the_perplexity_of_a_diverging_loss_is_infinite_not_capped():
    import math

    from onlstm.lm.evaluate import exp_loss

    assert exp_loss(2.0) == math.exp(2.0) and exp_loss(699.0) == math.exp(699.0)
    assert exp_loss(1.95e16) == math.inf  # once written as exp(50) = 5.18e21, a finite number nobody measured
