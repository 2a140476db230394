"""The prefix-tree scorer: every distinct prefix is run once, and the scores are those of reading each
sentence alone, one token at a time from a zero state (the hand computation of test_syneval_scoring)."""

from __future__ import annotations

import pytest
import torch
from test_syneval_scoring import WORDS, step_by_step_logprobs, tiny_lm

from onlstm.data.vocab import Vocab
from onlstm.models.prefix_tree import (
    PrefixTreeError,
    _logsumexp_,
    build_tree,
    prefix_token_logprobs,
    select_state,
)
from onlstm.syneval.data import Item
from onlstm.syneval.evaluate import score_items, token_logprobs


def pair_like_sequences(seed: int = 3) -> list[list[int]]:
    """Random sentences, minimal pairs of them (one word changed), sentences that are prefixes of others,
    duplicates and a sentence starting with another token than <eos>: every shape of sharing."""
    g = torch.Generator().manual_seed(seed)
    base = [[0, *torch.randint(1, len(WORDS), (n,), generator=g).tolist(), 0] for n in [1, 7, 3, 3, 12, 5, 2, 9]]
    pairs = [s[:k] + [(s[k] % (len(WORDS) - 1)) + 1] + s[k + 1 :] for s in base for k in [len(s) // 2]]
    return base + pairs + [base[1][:4], base[4][:2], base[0], [2, 3, 4, 0], [0, 0]]


@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
@pytest.mark.parametrize("chunk", [1, 4, 1000])
def test_prefix_tree_equals_reading_each_sentence_alone(cell, chunk):
    model = tiny_lm(cell, seed=2)
    seqs = pair_like_sequences()
    for s, lp in zip(seqs, prefix_token_logprobs(model, seqs, chunk_size=chunk)):
        assert lp.dtype == torch.float64 and lp.shape == (len(s) - 1,)
        expected = torch.tensor(step_by_step_logprobs(model, s), dtype=torch.float64)
        torch.testing.assert_close(lp, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("packed", [True, False], ids=["onednn-packed-decoder", "addmm-decoder"])
@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
def test_prefix_tree_equals_padded_batches_with_a_decoder_slice_smaller_than_a_level(cell, packed, monkeypatch):
    import onlstm.models.prefix_tree as pt

    if packed and not pt._onednn_linear():
        pytest.skip("this PyTorch build has no oneDNN linear")
    monkeypatch.setattr(pt, "_onednn_linear", lambda: packed)
    model = tiny_lm(cell, seed=4)
    seqs = pair_like_sequences(seed=5)
    padded = token_logprobs(model, seqs, batch_size=7)
    monkeypatch.setattr(pt, "decoder_rows", lambda model: 3)
    assert (pt.Decoder(model).packed is not None) == packed
    for a, b in zip(prefix_token_logprobs(model, seqs, chunk_size=100), padded):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_the_decoder_gives_the_models_logits():
    import onlstm.models.prefix_tree as pt

    model = tiny_lm("lstm", seed=2)
    x = torch.randn(5, model.decoder.in_features)
    want = model.logits(x).detach()
    for packed in (True, False):
        if packed and not pt._onednn_linear():
            continue
        dec = pt.Decoder(model, rows=8)
        if not packed:
            dec.packed = None
        torch.testing.assert_close(dec(x), want, atol=1e-5, rtol=1e-5)


ONE_SHAPE_RUN = """
import ctypes, torch
import onlstm.models.prefix_tree as pt

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder = torch.nn.Linear(16, 50)

model = Model()
dec = pt.Decoder(model, rows=100)
x = torch.randn(100, 16)
ctypes.CDLL(None).fflush(None)  # oneDNN writes through C's stdout buffer: keep the lines in order
print("WARM", flush=True)
for n in range(1, 101):
    got = dec(x[:n])
    assert got.shape == (n, 50), got.shape
    torch.testing.assert_close(got, model.decoder(x[:n]).detach(), atol=1e-5, rtol=1e-5)
ctypes.CDLL(None).fflush(None)
"""


def test_the_onednn_decoder_sees_one_shape_whatever_the_block_size():
    """Issue #25: every row count of a last block made oneDNN cache a new primitive (~1.4 MiB each at 400 x
    10,000; 200 row counts: +280 MiB). Blocks of 1 to 100 rows (at most 100 a block) must create at most one
    primitive per ROW_STEP bucket, 4 here (counted from ONEDNN_VERBOSE=2; the decoder before the fix created
    100), and still give the linear layer's logits."""
    import os
    import subprocess
    import sys

    import onlstm.models.prefix_tree as pt

    if not pt._onednn_linear():
        pytest.skip("this PyTorch build has no oneDNN linear: the decoder uses addmm")
    env = dict(os.environ, ONEDNN_VERBOSE="2", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", ONE_SHAPE_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    created = [line for line in lines[lines.index("WARM") :] if "create:cache_miss" in line and "reorder" not in line]
    buckets = -(-100 // pt.ROW_STEP)
    assert 0 < len(created) <= buckets, f"{len(created)} oneDNN primitives for {buckets} block sizes: {created[:2]}"


def test_the_tree_runs_each_distinct_prefix_once():
    # inputs (all tokens but the last) of: <eos> a b <eos> | <eos> a c <eos> | <eos> a b <eos> (again) | <eos> d
    tree = build_tree([[0, 1, 2, 0], [0, 1, 3, 0], [0, 1, 2, 0], [0, 4]])
    # fed prefixes: <eos>; <eos> a; <eos> a b; <eos> a c  -> 4 steps instead of 3 + 3 + 3 + 1 = 10
    assert tree.steps == 4
    assert [t.tolist() for t in tree.tokens] == [[0], [1], [2, 3]]
    assert [p.tolist() for p in tree.parents] == [[-1], [0], [0, 0]]
    # targets: depth 0 -> a, d; depth 1 -> b, c; depth 2 -> <eos> after b and after c
    assert [t.tolist() for t in tree.target_token] == [[1, 4], [2, 3], [0, 0]]
    assert tree.paths == [[0, 2, 4], [0, 3, 5], [0, 2, 4], [1]]


def test_a_sequence_without_a_target_is_refused():
    with pytest.raises(PrefixTreeError, match="at least two tokens"):
        build_tree([[0, 1], [0]])
    with pytest.raises(PrefixTreeError, match="chunk size must be positive"):
        prefix_token_logprobs(tiny_lm("lstm"), [[0, 1]], chunk_size=0)


def test_select_state_takes_batch_rows_and_refuses_what_it_cannot_split():
    h, c = torch.arange(12.0).view(1, 4, 3), -torch.arange(12.0).view(1, 4, 3)
    got = select_state((h, c), torch.tensor([2, 2, 0]), 4)
    assert got[0][0].tolist() == [[6, 7, 8], [6, 7, 8], [0, 1, 2]] and torch.equal(got[1], -got[0])
    with pytest.raises(PrefixTreeError, match=r"shape \(4, 3\), not the batch \(4\) on dimension 1"):
        select_state(torch.zeros(4, 3), torch.tensor([0]), 4)
    with pytest.raises(PrefixTreeError, match="is a dict, not tensors.*--no-share-prefixes"):
        select_state({"h": h}, torch.tensor([0]), 4)


def test_in_place_logsumexp_matches_the_definition_and_handles_extremes():
    x = torch.tensor([[0.0, 1.0, 2.0], [1000.0, 1000.0, -1000.0], [-float("inf")] * 3])
    expected = [torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64).exp().sum().log().item(), 1000 + 0.6931472]
    got = _logsumexp_(x.clone())
    assert got[:2].tolist() == pytest.approx(expected, rel=1e-6)  # float32 keeps ~7 digits of 1000.69
    assert got[2].item() == -float("inf")  # like torch.logsumexp: log(0)


@pytest.mark.parametrize("word_only", [False, True])
def test_score_items_gives_the_same_outcomes_with_and_without_prefix_sharing(word_only):
    model, vocab = tiny_lm("onlstm", seed=6), Vocab(WORDS)
    items = [
        Item("simple_agrmt", "", "the author laughs", "the author laugh"),
        Item("simple_agrmt", "", "the authors laugh", "the authors laughs"),
        Item("simple_npi_anim", "", "no author is ever", "most author is ever", "the author is ever"),
        Item("simple_agrmt", "", "the author laughs", "the authors laughs"),  # a sentence repeated
    ]
    shared, f1 = score_items(model, vocab, items, word_only=word_only, batch_size=3)
    padded, f2 = score_items(model, vocab, items, word_only=word_only, share_prefixes=False)
    assert f1 == f2 and len(shared) == len(padded) == 6
    for a, b in zip(shared, padded):
        assert (a.item, a.comparison, a.position, a.covered) == (b.item, b.comparison, b.position, b.covered)
        assert a.first == pytest.approx(b.first, abs=1e-5) and a.second == pytest.approx(b.second, abs=1e-5)
