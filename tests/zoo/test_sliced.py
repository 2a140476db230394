"""The `sliced` encoder (Sliced RNN) against a direct multi-level loop written from the definition, on
lengths that slices do not divide; padded/packed == alone; gradients; the registry's entry."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

from onlstm import encoders as E

pytestmark = pytest.mark.usefixtures("one_thread")


def sliced(input_size=3, hidden=5, seed=0, **options):
    torch.manual_seed(seed)
    return E.make_encoder("sliced", input_size, hidden, **options).double().eval()


def cell_of(rnn: nn.RNNBase) -> nn.RNNCellBase:
    """The step function of a one-layer nn.GRU / nn.LSTM, with its weights."""
    cell = (nn.GRUCell if isinstance(rnn, nn.GRU) else nn.LSTMCell)(rnn.input_size, rnn.hidden_size).double()
    cell.load_state_dict({k.removesuffix("_l0"): v for k, v in rnn.state_dict().items()})
    return cell


def run_steps(cell, xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The hidden state after each of ``xs`` (each (F,)), from zero."""
    h = c = torch.zeros(cell.hidden_size, dtype=torch.float64)
    out = []
    for x in xs:
        if isinstance(cell, nn.LSTMCell):
            h, c = cell(x, (h, c))
        else:
            h = cell(x, h)
        out.append(h)
    return out


def direct(m, seq: torch.Tensor) -> torch.Tensor:
    """One sequence (T, F) -> (T, H) from the definition: cut into slices of n, the last one shorter; each
    slice read from zero by the level's RNN; its final state the slice's summary; repeat on the summaries
    up to the top level, which reads all of them; step t's output is the top output covering it."""
    n, cells = m.slice_length, [cell_of(r) for r in m.rnns]
    xs = list(seq)
    for cell in cells[:-1]:
        xs = [run_steps(cell, xs[i : i + n])[-1] for i in range(0, len(xs), n)]
    top = run_steps(cells[-1], xs)
    return torch.stack([top[t // n ** (len(cells) - 1)] for t in range(len(seq))])


CASES = [
    dict(slice_length=3, levels=2, rnn="gru"),
    dict(slice_length=2, levels=3, rnn="lstm"),
    dict(slice_length=4, levels=2, rnn="lstm"),
    dict(slice_length=1, levels=2, rnn="gru"),
]


@pytest.mark.parametrize("options", CASES, ids=lambda o: "-".join(map(str, o.values())))
def test_equals_the_direct_multi_level_loop(options):
    m = sliced(**options)
    for length in (1, 2, 5, 7, 8, 13):  # multiples of the slice length and not
        seq = torch.randn(length, 3, dtype=torch.float64)
        out, state, dist = m(seq.unsqueeze(1))
        expected = direct(m, seq)
        assert dist is None and out.shape == (length, 1, 5)
        torch.testing.assert_close(out[:, 0], expected, rtol=1e-10, atol=1e-10)
        h = state[0] if isinstance(state, tuple) else state
        torch.testing.assert_close(h[0, 0], expected[-1], rtol=1e-10, atol=1e-10)  # state = the whole sequence


@pytest.mark.parametrize("options", CASES[:2], ids=lambda o: "-".join(map(str, o.values())))
def test_packed_batch_equals_each_sequence_alone(options):
    m = sliced(**options)
    seqs = [torch.randn(n, 3, dtype=torch.float64) for n in (5, 11, 1, 8, 3)]
    padded = pad_sequence(seqs)
    padded[padded == 0] = -4.0  # padding that is not zero must change nothing either
    lengths = torch.tensor([len(s) for s in seqs])
    packed = pack_padded_sequence(padded, lengths, enforce_sorted=False)
    out, state, _ = m(packed)
    assert torch.equal(out.batch_sizes, packed.batch_sizes)
    out_padded, _ = pad_packed_sequence(out)
    h = state[0] if isinstance(state, tuple) else state
    for j, s in enumerate(seqs):
        alone, alone_state, _ = m(s.unsqueeze(1))
        torch.testing.assert_close(out_padded[: len(s), j], alone[:, 0], rtol=1e-12, atol=1e-12)
        alone_h = alone_state[0] if isinstance(alone_state, tuple) else alone_state
        torch.testing.assert_close(h[0, j], alone_h[0, 0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(h[0, j], direct(m, s)[-1], rtol=1e-10, atol=1e-10)


def test_an_output_depends_on_later_steps_of_its_slice_only():
    """Why the registry says not causal: step 0's output changes when step 2 (same slice) changes, and
    step 2's output does not change when step 3 (the next slice) changes."""
    m = sliced(slice_length=3)
    x = torch.randn(6, 1, 3, dtype=torch.float64)
    base, _, _ = m(x)
    y = x.clone()
    y[2] += 1.0
    assert not torch.equal(m(y)[0][0], base[0])
    y = x.clone()
    y[3] += 1.0
    assert torch.equal(m(y)[0][:3], base[:3])


def test_gradients_reach_every_parameter_and_dropconnect_applies():
    m = sliced(slice_length=2, levels=3, rnn="lstm", dropconnect=0.5).train()
    x = torch.randn(9, 2, 3, dtype=torch.float64)
    out, (h, c), _ = m(x)
    (out.pow(2).sum() + h.sum() + c.sum()).backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    torch.manual_seed(0)
    a = m(x)[0]
    torch.manual_seed(1)
    assert not torch.equal(a, m(x)[0])  # a new DropConnect mask per call
    m.eval()
    assert torch.equal(m(x)[0], m(x)[0])


def test_registry_entry_and_option_checks():
    spec = E.get("sliced")
    assert not spec.causal and not spec.stateful and not spec.yields_distances
    assert set(spec.option_names) == {"slice_length", "levels", "rnn", "dropconnect"}
    with pytest.raises(E.EncoderError, match="sliced option levels must be >= 2, got 1"):
        E.make_encoder("sliced", 3, 4, levels=1)
    with pytest.raises(E.EncoderError, match="sliced option slice_length must be >= 1, got 0"):
        E.make_encoder("sliced", 3, 4, slice_length=0)
    with pytest.raises(E.EncoderError, match="rnn must be one of gru, lstm"):
        E.make_encoder("sliced", 3, 4, rnn="rnn")
    with pytest.raises(ValueError, match="carries no state across calls"):
        sliced()(torch.randn(3, 1, 3, dtype=torch.float64), torch.zeros(1, 1, 5, dtype=torch.float64))


@pytest.mark.parametrize("kw", [{"rnn": "lstmm"}, {"levels": 1}, {"slice_length": 0}])
def test_direct_construction_refuses_what_the_registry_refuses(kw):
    from onlstm.zoo.sliced import SlicedRNN

    with pytest.raises(ValueError, match="need slice_length >= 1, levels >= 2 and rnn in"):
        SlicedRNN(4, 6, **kw)
