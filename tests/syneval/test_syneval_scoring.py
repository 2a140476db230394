"""The scoring convention against hand computations: a sentence's score is the sum of log p(token | tokens
before it) over every token after the first <eos>, from a zero state; padding in batches changes nothing;
the NPI triples give three comparisons; --word-only compares the first differing word."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from onlstm.data.reader import TextReader
from onlstm.data.vocab import Vocab
from onlstm.models.language_model import LanguageModel, LMConfig
from onlstm.syneval.data import Item
from onlstm.syneval.evaluate import (
    SynevalError,
    first_difference,
    frame,
    score_items,
    summarize,
    token_logprobs,
)

WORDS = ["<eos>", "<unk>", "the", "author", "authors", "laughs", "laugh", "no", "most", "ever", "is", "."]


def tiny_lm(cell: str, seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    cfg = LMConfig(vocab_size=len(WORDS), emb_size=8, hidden_sizes=[12, 8], cell=cell, chunk_size=4)
    model = LanguageModel(cfg)
    with torch.no_grad():  # spread the weights so that the probabilities differ clearly between words
        for p in model.parameters():
            p.normal_(0, 0.6)
    return model.eval()


def step_by_step_logprobs(model: LanguageModel, ids: list[int]) -> list[float]:
    """log p(ids[t+1] | ids[:t+1]) one token at a time with the carried state (no batching, no padding)."""
    out, state = [], None
    with torch.no_grad():
        for t in range(len(ids) - 1):
            h, state, _ = model(torch.tensor([[ids[t]]]), state)
            logits = model.logits(h)[0, 0].double()
            out.append(float(logits[ids[t + 1]] - torch.logsumexp(logits, 0)))
    return out


@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
def test_score_is_the_sum_of_stepwise_log_softmax(cell):
    model, vocab = tiny_lm(cell), Vocab(WORDS)
    item = Item("simple_agrmt", "", "The author laughs", "the author laugh")
    (outcome,), facts = score_items(model, vocab, [item])
    good = vocab.encode(["<eos>", "the", "author", "laughs", ".", "<eos>"])[0]
    bad = vocab.encode(["<eos>", "the", "author", "laugh", ".", "<eos>"])[0]
    assert outcome.first == pytest.approx(sum(step_by_step_logprobs(model, good)), abs=1e-5)
    assert outcome.second == pytest.approx(sum(step_by_step_logprobs(model, bad)), abs=1e-5)
    assert outcome.correct == (outcome.first > outcome.second)
    assert facts["period"] is True and outcome.covered


def test_frame_lowercases_and_adds_the_period_only_when_asked():
    assert frame("The Author laughs", period=True) == ["<eos>", "the", "author", "laughs", ".", "<eos>"]
    assert frame("the author laughs .", period=True) == ["<eos>", "the", "author", "laughs", ".", "<eos>"]
    assert frame("The author laughs", period=False) == ["<eos>", "the", "author", "laughs", "<eos>"]


def test_sentences_are_read_with_the_models_reader():
    # PTB's convention (the default for a model that does not say): capitals lower-cased, numbers as N
    words = ["<eos>", "<unk>", "N", "no", "the", "author", "laughs"]
    assert frame("No author laughs 3 times!", False, vocab=words) == ["<eos>", "no", "author", "laughs", "N", "times",
                                                                      "<eos>"]  # fmt: skip
    model, vocab = tiny_lm("lstm"), Vocab(WORDS)
    item = Item("simple_agrmt", "", "No author laughs", "No author laugh")
    ((ptb,), _) = score_items(model, vocab, [item], reader=TextReader.detect(WORDS))
    expected = sum(step_by_step_logprobs(model, vocab.encode(["<eos>", "no", "author", "laughs", ".", "<eos>"])[0]))
    assert ptb.first == pytest.approx(expected, abs=1e-5) and ptb.covered
    # the model's own reader by default: a cased model reads "No" as a word it does not know
    model.reader = TextReader(lowercase=False, number=None, punctuation=True)
    ((cased,), facts) = score_items(model, vocab, [item])
    assert not cased.covered and facts["oov"] == {"No": 2}


def test_no_period_without_one_in_the_vocabulary_and_oov_become_unk():
    words = [w for w in WORDS if w != "."]
    model = LanguageModel(LMConfig(vocab_size=len(words), emb_size=8, hidden_sizes=[8], cell="lstm")).eval()
    vocab = Vocab(words)
    item = Item("simple_agrmt", "", "the pilot laughs", "the pilot laugh")
    (outcome,), facts = score_items(model, vocab, [item])
    ids = vocab.encode(["<eos>", "the", "<unk>", "laughs", "<eos>"])[0]
    assert outcome.first == pytest.approx(sum(step_by_step_logprobs(model, ids)), abs=1e-5)
    assert facts["period"] is False and facts["oov"] == {"pilot": 2} and not outcome.covered


def test_a_vocabulary_without_unk_is_refused_clearly():
    words = [w for w in WORDS if w != "<unk>"]
    model = LanguageModel(LMConfig(vocab_size=len(words), emb_size=8, hidden_sizes=[8], cell="lstm")).eval()
    with pytest.raises(SynevalError, match="has no <unk> token, so it cannot score 'pilot'"):
        score_items(model, Vocab(words), [Item("a", "", "the pilot laughs", "the author laughs")])


@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_batched_equals_one_by_one(cell, batch_size):
    model = tiny_lm(cell, seed=1)
    g = torch.Generator().manual_seed(3)
    seqs = [
        [0] + torch.randint(1, len(WORDS), (int(n),), generator=g).tolist() + [0] for n in [1, 7, 3, 3, 12, 5, 2, 9]
    ]
    batched = token_logprobs(model, seqs, batch_size=batch_size)
    for s, lp in zip(seqs, batched):
        assert lp.shape == (len(s) - 1,)
        torch.testing.assert_close(
            lp, torch.tensor(step_by_step_logprobs(model, s), dtype=torch.float64), atol=1e-5, rtol=0
        )


class Bigram(nn.Module):
    """A model whose next-token distribution depends on the current token only: row ``table[current]`` of
    log-probabilities (so every score can be written down by hand)."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = nn.Parameter(table.log_softmax(-1))

    def forward(self, tokens, state=None):
        return self.table[tokens], state, {}

    def logits(self, output):
        return output


def bigram(vocab: Vocab, probs: dict[tuple[str, str], float]) -> Bigram:
    table = torch.full((len(vocab), len(vocab)), 1e-3)
    for (a, b), p in probs.items():
        table[vocab.index[a], vocab.index[b]] = p
    return Bigram((table / table.sum(1, keepdim=True)).log())


def test_npi_triples_give_three_comparisons_in_the_documented_direction():
    vocab = Vocab(["<eos>", "<unk>", "no", "most", "the", "a", "ever"])
    # p(first word): no 0.2, the 0.5, most 0.3; every later word equally likely from any of them
    probs = {("<eos>", "no"): 0.2, ("<eos>", "the"): 0.5, ("<eos>", "most"): 0.3}
    model = bigram(vocab, probs | {(w, "ever"): 1.0 for w in ("no", "most", "the")} | {("ever", "<eos>"): 1.0})
    item = Item("simple_npi_anim", "", "no ever", "most ever", "the ever")
    outcomes, _ = score_items(model, vocab, [item])
    got = {o.comparison: o.correct for o in outcomes}
    # grammatical (no) < intrusive (the): wrong; intrusive (the) > ungrammatical (most): right; no < most: wrong
    assert got == {"g>i": False, "i>u": True, "g>u": False}
    # every sentence shares the tokens after the first word, so the differences are the first word's
    o = {o.comparison: o for o in outcomes}
    assert o["g>u"].first - o["g>u"].second == pytest.approx(
        math.log(model.table[0, 2].exp().item()) - math.log(model.table[0, 3].exp().item())
    )


def test_word_only_compares_the_first_differing_word():
    vocab = Vocab(["<eos>", "<unk>", "the", "author", "laughs", "laugh", "loudly"])
    model = bigram(
        vocab,
        {("<eos>", "the"): 1, ("the", "author"): 1, ("author", "laughs"): 0.3, ("author", "laugh"): 0.6}
        | {("laughs", "loudly"): 0.99, ("laugh", "loudly"): 0.001, ("loudly", "<eos>"): 1},
    )
    item = Item("simple_agrmt", "", "the author laughs loudly", "the author laugh loudly")
    (whole,), _ = score_items(model, vocab, [item])
    (word,), _ = score_items(model, vocab, [item], word_only=True)
    lp = model.table.detach().double()
    assert word.position == 3  # <eos> the author [laughs]
    assert word.first == pytest.approx(float(lp[3, 4])) and word.second == pytest.approx(float(lp[3, 5]))
    assert not word.correct  # laugh is the likelier next word ...
    assert whole.correct  # ... but the whole sentence with laughs is likelier (loudly follows it)


def test_first_difference_definition():
    assert first_difference(["<eos>", "a", "b", "<eos>"], ["<eos>", "a", "c", "<eos>"], "x") == 2
    assert first_difference(["<eos>", "a", "<eos>"], ["<eos>", "a", "b", "<eos>"], "x") == 2  # one ends first
    assert first_difference(["<eos>", "a", "b", "<eos>"], ["<eos>", "c", "b", "<eos>"], "x") == 1
    with pytest.raises(SynevalError, match=r"f:3: the two sentences are the same \('a b'\)"):
        first_difference(["<eos>", "a", "b", "<eos>"], ["<eos>", "a", "b", "<eos>"], "f:3")


def test_ties_are_wrong_and_summaries_pool_the_paper_rows():
    vocab = Vocab(["<eos>", "<unk>", "x"])
    model = bigram(vocab, {})  # uniform: every sentence of the same length ties
    items = [Item("obj_rel_across_anim", "c1", "x x", "x zz"), Item("obj_rel_across_inanim", "c2", "x x", "x zz")]
    outcomes, facts = score_items(model, vocab, items)
    assert [o.correct for o in outcomes] == [False, False]  # equal scores: not strictly higher
    s = summarize(outcomes)
    row = next(r for r in s["rows"] if r["row"] == "SVA: across an object relative clause")
    assert row["cases"] == ["obj_rel_across_anim", "obj_rel_across_inanim"] and row["pairs"] == 2
    assert row["covered"] == 0 and row["covered_accuracy"] is None and row["accuracy"] == 0.0
    assert s["cases"]["obj_rel_across_anim"]["conditions"] == {
        "c1": {"g>u": s["cases"]["obj_rel_across_anim"]["comparisons"]["g>u"]}
    }
    assert facts == {"period": False, "oov": {"zz": 2}, "sentences": 4, "unique": 2}
