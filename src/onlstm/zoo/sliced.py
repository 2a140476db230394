"""The Sliced RNN (Yu & Liu 2018), :class:`SlicedRNN`, with the encoder call of :mod:`onlstm.encoders`
(docs/encoders.md, "sliced": how slices are cut and summarised, why it is not causal)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..nn.modules import dropconnect_call
from .transformer import like_input, refuse_state, unpack

RNN_TYPES = ("gru", "lstm")


def slice_lengths(lengths: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """(B,) sequence lengths -> (k, B) real steps of each of the ``k`` slices of ``n`` steps (0 past the end)."""
    starts = torch.arange(k, device=lengths.device).unsqueeze(1) * n  # (k, 1)
    return (lengths.unsqueeze(0) - starts).clamp(0, n)


def cut_slices(x: torch.Tensor, n: int) -> torch.Tensor:
    """(T, B, F) -> (n, k * B, F): slice ``j`` of sequence ``b`` is column ``j * B + b``, zero-padded."""
    t, b, f = x.shape
    k = -(-t // n)
    x = torch.cat([x, x.new_zeros(k * n - t, b, f)]) if k * n > t else x
    return x.view(k, n, b, f).transpose(0, 1).reshape(n, k * b, f)


class SlicedRNN(nn.Module):
    """``levels`` RNNs, the lowest over slices of ``slice_length`` steps, the top over the slice summaries."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        slice_length: int = 8,
        levels: int = 2,
        rnn: str = "gru",
        dropconnect: float = 0.0,
    ):
        super().__init__()
        if slice_length < 1 or levels < 2 or rnn not in RNN_TYPES:  # the registry says this more kindly
            raise ValueError(f"need slice_length >= 1, levels >= 2 and rnn in {RNN_TYPES}")
        self.hidden_size, self.slice_length = hidden_size, slice_length
        self.levels, self.dropconnect = levels, dropconnect
        make = nn.GRU if rnn == "gru" else nn.LSTM
        self.rnns = nn.ModuleList(make(input_size if i == 0 else hidden_size, hidden_size) for i in range(levels))

    def run(self, level: int, x, hx=None):
        """RNN ``level`` on ``x``, with the built-in encoders' DropConnect."""
        return dropconnect_call(self.rnns[level], self.dropconnect, self.training, x, hx)

    def summarise(self, level: int, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One lower level: (T, B, F) with (B,) lengths -> slice summaries (k, B, H) and their (B,) counts."""
        n, b = self.slice_length, x.shape[1]
        slices = cut_slices(x, n)  # (n, k * B, F)
        k = slices.shape[1] // b
        real = slice_lengths(lengths, n, k).reshape(-1)  # (k * B,), the same column order as `slices`
        keep = real.nonzero().squeeze(1)  # slices with at least one real step (pack refuses empty ones)
        packed = pack_padded_sequence(slices[:, keep], real[keep].cpu(), enforce_sorted=False)
        _, state = self.run(level, packed)
        h = state[0] if isinstance(state, tuple) else state  # (1, S, H), in the order of `keep`
        summaries = h.new_zeros(k * b, self.hidden_size).index_copy(0, keep, h[0])
        return summaries.view(k, b, self.hidden_size), (lengths + n - 1) // n

    def forward(self, x, hx=None, return_distances: bool = False):
        refuse_state(hx, "sliced RNN")
        h, given = unpack(x)  # (T, B, F), (B,)
        t, lengths = h.shape[0], given
        for level in range(self.levels - 1):
            h, lengths = self.summarise(level, h, lengths)
        top, state = self.run(self.levels - 1, pack_padded_sequence(h, lengths.cpu(), enforce_sorted=False))
        top_out, _ = pad_packed_sequence(top, total_length=h.shape[0])  # (K, B, H)
        span = self.slice_length ** (self.levels - 1)  # input steps per top-level step
        out = top_out[torch.arange(t, device=top_out.device) // span]  # (T, B, H)
        return like_input(out, x, given), state, None
