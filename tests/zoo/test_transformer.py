"""The `transformer` encoder: the block against a step-by-step computation written from the definition,
causality, positions (values and the length limit), padded/packed == alone, pooling, gradients."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_packed_sequence

from onlstm import encoders as E
from onlstm.zoo.transformer import SequenceLengthError, sinusoidal_positions

pytestmark = pytest.mark.usefixtures("one_thread")


def layer(input_size=5, hidden=8, seed=0, **options):
    torch.manual_seed(seed)
    m = E.make_encoder("transformer", input_size, hidden, **{"heads": 2, **options}).double()
    with torch.no_grad():  # non-trivial norms, so that a mix-up between them shows
        for p in m.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return m.eval()


def reference(m, x: torch.Tensor) -> torch.Tensor:
    """One sequence (T, in) -> (T, H) step by step: position t attends to 0..t with an explicit softmax."""
    t_len, size, heads = x.shape[0], m.hidden_size, m.heads
    d = size // heads
    proj = x @ m.project.weight.T + m.project.bias if hasattr(m.project, "weight") else x
    h = F.layer_norm(proj, (size,), m.norm_in.weight, m.norm_in.bias)
    pos = m.position[:t_len] if m.positions == "learned" else sinusoidal_positions(t_len, size, torch.float64)
    h = h + pos
    a_in = F.layer_norm(h, (size,), m.norm_attn.weight, m.norm_attn.bias)
    qkv = a_in @ m.qkv.weight.T + m.qkv.bias  # (T, 3H)
    q, k, v = qkv[:, :size], qkv[:, size : 2 * size], qkv[:, 2 * size :]
    rows = []
    for t in range(t_len):
        heads_out = []
        for j in range(heads):
            sl = slice(j * d, (j + 1) * d)
            scores = torch.stack([q[t, sl] @ k[s, sl] / math.sqrt(d) for s in range(t + 1)])
            w = torch.exp(scores - scores.max())
            w = w / w.sum()
            heads_out.append(sum(w[s] * v[s, sl] for s in range(t + 1)))
        rows.append(torch.cat(heads_out))
    h = h + torch.stack(rows) @ m.attn_out.weight.T + m.attn_out.bias
    f_in = F.layer_norm(h, (size,), m.norm_ff.weight, m.norm_ff.bias)
    f = F.gelu(f_in @ m.ff[0].weight.T + m.ff[0].bias) @ m.ff[2].weight.T + m.ff[2].bias
    return F.layer_norm(h + f, (size,), m.norm_out.weight, m.norm_out.bias)


# --------------------------------------------------------------------------- the block


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
@pytest.mark.parametrize("sizes", [(5, 8), (8, 8)])
def test_block_matches_the_step_by_step_definition(positions, sizes):
    m = layer(*sizes, positions=positions, max_length=16)
    x = torch.randn(7, 1, sizes[0], dtype=torch.float64)
    out, state, dist = m(x)
    assert dist is None and out.shape == (7, 1, 8) and state.shape == (1, 1, 8)
    torch.testing.assert_close(out[:, 0], reference(m, x[:, 0]), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(state[0, 0], out[-1, 0], rtol=0, atol=0)  # pooling "last"


def test_sinusoidal_positions_by_hand():
    table = sinusoidal_positions(4, 6)
    for t in range(4):
        for i in range(3):
            angle = t / 10000 ** (2 * i / 6)
            assert table[t, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[t, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert sinusoidal_positions(3, 5).shape == (3, 5)  # odd widths: the last feature is a sine


def test_sinusoidal_positions_are_built_in_the_models_dtype():
    """A float64 layer's table is float64 to the last bits (built in float32 and cast, it was 5e-6 off at step 600)."""
    t, i = torch.arange(600, dtype=torch.float64).unsqueeze(1), torch.arange(0, 8, 2, dtype=torch.float64)
    angle = t / 10000 ** (i / 8)
    exact = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # (600, 8): sin, cos, sin, cos, ...
    table = layer(5, 8).double().position_table(600, torch.zeros((), dtype=torch.float64))
    assert table.dtype == torch.float64
    torch.testing.assert_close(table, exact, rtol=0, atol=1e-12)
    assert sinusoidal_positions(600, 8, torch.bfloat16).dtype == torch.bfloat16


def test_changing_a_future_token_never_changes_an_earlier_output():
    m = layer(positions="learned")
    x = torch.randn(9, 3, 5, dtype=torch.float64)
    base, _, _ = m(x)
    for k in range(9):
        y = x.clone()
        y[k] += torch.randn(3, 5, dtype=torch.float64)
        out, _, _ = m(y)
        assert torch.equal(out[:k], base[:k]), k  # bit for bit: the mask removes step k before the softmax
        assert (out[k:] - base[k:]).abs().amax(dim=-1).min() > 1e-6, k  # and every later step sees it


def test_causality_holds_in_training_mode_too():
    m = layer(block_dropout=0.3).train()
    x = torch.randn(6, 2, 5, dtype=torch.float64)
    y = x.clone()
    y[4] += 1.0
    torch.manual_seed(1)
    a, _, _ = m(x)
    torch.manual_seed(1)
    b, _, _ = m(y)
    assert torch.equal(a[:4], b[:4]) and not torch.equal(a[4:], b[4:])


# --------------------------------------------------------------------------- positions limit


def test_learned_positions_limit_is_a_clear_error():
    m = layer(positions="learned", max_length=6)
    m(torch.randn(6, 1, 5, dtype=torch.float64))  # exactly the limit is fine
    with pytest.raises(SequenceLengthError, match=r"7 steps is longer .*max_length=6.*max_length=N.*sinusoidal"):
        m(torch.randn(7, 1, 5, dtype=torch.float64))
    assert m.max_length == 6
    s = layer(positions="sinusoidal", max_length=6)
    assert s.max_length is None and s(torch.randn(40, 1, 5, dtype=torch.float64))[0].shape == (40, 1, 8)


def test_registry_entry_and_option_checks():
    spec = E.get("transformer")
    assert spec.causal and not spec.stateful and not spec.yields_distances
    with pytest.raises(E.EncoderError, match=r"hidden sizes \[10\] are not divisible by heads=4.*heads=N"):
        spec.validate([8, 10], {})
    with pytest.raises(E.EncoderError, match="positions must be one of learned, sinusoidal"):
        E.make_encoder("transformer", 4, 8, positions="rotary")
    with pytest.raises(E.EncoderError, match="pooling must be one of last, mean"):
        E.make_encoder("transformer", 4, 8, pooling="max")
    with pytest.raises(E.EncoderError, match="block_dropout must be in"):
        E.make_encoder("transformer", 4, 8, block_dropout=1.0)
    with pytest.raises(E.EncoderError, match="does not accept the option.* dropconnect"):
        E.make_encoder("transformer", 4, 8, dropconnect=0.1)
    with pytest.raises(ValueError, match="carries no state across calls"):
        layer()(torch.randn(3, 1, 5, dtype=torch.float64), torch.zeros(1, 1, 8, dtype=torch.float64))


# --------------------------------------------------------------------------- padding and pooling


@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_packed_batch_equals_each_sequence_alone(pooling):
    m = layer(positions="learned", pooling=pooling)
    seqs = [torch.randn(n, 5, dtype=torch.float64) for n in (4, 9, 1, 6)]  # not sorted by length
    padded = torch.nn.utils.rnn.pad_sequence(seqs)  # (9, 4, 5), zeros after each sequence
    padded[padded == 0] = 7.0  # padding that is not zero: it must still change nothing
    lengths = torch.tensor([len(s) for s in seqs])
    packed = pack_padded_sequence(padded, lengths, enforce_sorted=False)
    out, state, _ = m(packed)
    assert torch.equal(out.batch_sizes, packed.batch_sizes) and torch.equal(out.sorted_indices, packed.sorted_indices)
    out_padded, out_lengths = pad_packed_sequence(out)
    assert torch.equal(out_lengths, lengths) and state.shape == (1, 4, 8)
    for j, s in enumerate(seqs):
        alone, alone_state, _ = m(s.unsqueeze(1))
        torch.testing.assert_close(out_padded[: len(s), j], alone[:, 0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(state[0, j], alone_state[0, 0], rtol=1e-12, atol=1e-12)
        expected = alone[-1, 0] if pooling == "last" else alone[:, 0].mean(0)  # the definition of each pooling
        torch.testing.assert_close(state[0, j], expected, rtol=1e-12, atol=1e-12)


def test_sorted_packing_keeps_its_layout():
    m = layer()
    seqs = [torch.randn(n, 5, dtype=torch.float64) for n in (5, 3, 2)]
    packed = pack_sequence(seqs)  # enforce_sorted=True: no sorted_indices
    out, state, _ = m(packed)
    assert out.sorted_indices is None and torch.equal(out.batch_sizes, packed.batch_sizes)
    torch.testing.assert_close(state[0, 1], m(seqs[1].unsqueeze(1))[1][0, 0], rtol=1e-12, atol=1e-12)


def test_gradients_reach_every_parameter():
    m = layer(positions="learned", pooling="mean").train()
    seqs = [torch.randn(n, 5, dtype=torch.float64) for n in (3, 5)]
    out, state, _ = m(pack_sequence(seqs, enforce_sorted=False))
    (out.data.pow(2).sum() + state.sum()).backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    # positions past the longest sequence are never used: their rows get no gradient
    assert m.position.grad[5:].abs().sum() == 0 and m.position.grad[:5].abs().sum() > 0


def test_direct_construction_refuses_heads_that_do_not_divide_the_size():
    from onlstm.zoo.transformer import TransformerLayer

    with pytest.raises(ValueError, match="hidden size 6 is not divisible by heads=4"):
        TransformerLayer(4, 6, heads=4)
