"""A causal pre-norm Transformer block, :class:`TransformerLayer`, with the encoder call of
:mod:`onlstm.encoders`, on torch ops (docs/encoders.md, "transformer", says why each piece is where it is)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ..errors import InputError

POSITIONS = ("learned", "sinusoidal")
POOLINGS = ("last", "mean")


class SequenceLengthError(InputError):
    """A sequence longer than a layer's learned position table."""


def sinusoidal_positions(length: int, size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(length, size) in ``dtype``: sin on even, cos on odd features, wavelengths from 2 pi to 10000 * 2 pi. Built
    in ``dtype``, at least float32: a float64 model's table built in float32 was off by 5e-6 at step 600, and
    a bfloat16 angle would be off by whole periods."""
    work = torch.promote_types(dtype, torch.float32)
    pos = torch.arange(length, dtype=work).unsqueeze(1)  # (T, 1)
    freq = torch.exp(torch.arange(0, size, 2, dtype=work) * (-math.log(10000.0) / size))  # (ceil(H/2),)
    table = torch.zeros(length, size, dtype=work)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: size // 2])
    return table.to(dtype)


def unpack(x) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (T, B, F) or a PackedSequence -> padded (T, B, F) in the batch's own order, and lengths (B,)."""
    if isinstance(x, PackedSequence):
        padded, lengths = pad_packed_sequence(x)
        return padded, lengths.to(padded.device)
    return x, torch.full((x.shape[1],), x.shape[0], dtype=torch.long, device=x.device)


def refuse_state(hx, name: str) -> None:
    """The attention and sliced encoders carry no state across calls (``stateful=False`` in the registry)."""
    if hx is not None:
        raise ValueError(
            f"the {name} carries no state across calls (stateful=False in the registry); call it with hx=None"
        )


def like_input(out: torch.Tensor, x, lengths: torch.Tensor):
    """``out`` (T, B, H) padded in batch order, as a PackedSequence laid out exactly like ``x`` when ``x`` is one."""
    if not isinstance(x, PackedSequence):
        return out
    order = x.sorted_indices  # None: packed with enforce_sorted=True, already in decreasing length
    order = torch.arange(out.shape[1], device=out.device) if order is None else order
    return x._replace(data=pack_padded_sequence(out.index_select(1, order), lengths.cpu()[order.cpu()]).data)


def pool(out: torch.Tensor, lengths: torch.Tensor, how: str) -> torch.Tensor:
    """(T, B, H) outputs -> (B, H): the output at each sequence's last real step, or the mean of its steps."""
    t, b, _ = out.shape
    if how == "last":
        return out[lengths - 1, torch.arange(b, device=out.device)]
    real = (torch.arange(t, device=out.device).unsqueeze(1) < lengths.unsqueeze(0)).to(out.dtype)  # (T, B)
    return (out * real.unsqueeze(-1)).sum(0) / lengths.to(out.dtype).unsqueeze(-1)


class TransformerLayer(nn.Module):
    """One causal pre-norm Transformer block; ``forward(x, hx=None, return_distances=False) -> output,
    state, None`` with ``state`` the pooled encoding (1, B, H) (shaped like a GRU's final state)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        heads: int = 4,
        ff_multiplier: float = 4.0,
        positions: str = "sinusoidal",
        max_length: int = 512,
        block_dropout: float = 0.1,
        pooling: str = "last",
    ):
        super().__init__()
        if hidden_size % heads:
            raise ValueError(f"hidden size {hidden_size} is not divisible by heads={heads}")
        self.hidden_size, self.heads, self.positions, self.pooling = hidden_size, heads, positions, pooling
        self.max_length = max_length if positions == "learned" else None
        self.dropout = block_dropout
        self.project = nn.Linear(input_size, hidden_size) if input_size != hidden_size else nn.Identity()
        self.norm_in = nn.LayerNorm(hidden_size)
        if positions == "learned":
            self.position = nn.Parameter(torch.randn(max_length, hidden_size) * 0.02)  # (L, H)
        self.norm_attn, self.norm_ff, self.norm_out = (nn.LayerNorm(hidden_size) for _ in range(3))
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.attn_out = nn.Linear(hidden_size, hidden_size)
        ff = max(1, round(ff_multiplier * hidden_size))
        self.ff = nn.Sequential(nn.Linear(hidden_size, ff), nn.GELU(), nn.Linear(ff, hidden_size))

    def position_table(self, length: int, like: torch.Tensor) -> torch.Tensor:
        """(length, H) positions for a sequence of ``length`` steps."""
        if self.positions == "sinusoidal":
            return sinusoidal_positions(length, self.hidden_size, like.dtype).to(like.device)
        if length > self.max_length:
            raise SequenceLengthError(
                f"a sequence of {length} steps is longer than the transformer's learned positions "
                f"(max_length={self.max_length}); raise the limit with the encoder option max_length "
                "(--encoder-options max_length=N) or use positions=sinusoidal, which has no limit"
            )
        return self.position[:length]

    def attention(self, h: torch.Tensor) -> torch.Tensor:
        """Causal multi-head self-attention over (T, B, H)."""
        t, b, size = h.shape
        q, k, v = self.qkv(h).view(t, b, 3, self.heads, size // self.heads).permute(2, 1, 3, 0, 4)  # (B, heads, T, d)
        p = self.dropout if self.training else 0.0
        # Causal only, no key-padding mask: padding always follows a sequence's real steps, which the
        # causal mask already hides from them (tests/zoo/test_transformer.py checks padded == alone).
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)  # (B, heads, T, d)
        return self.attn_out(a.permute(2, 0, 1, 3).reshape(t, b, size))

    def block(self, x: torch.Tensor) -> torch.Tensor:
        """(T, B, in) -> (T, B, H)."""
        h = self.norm_in(self.project(x)) + self.position_table(x.shape[0], x).unsqueeze(1)
        h = h + F.dropout(self.attention(self.norm_attn(h)), self.dropout, self.training)
        h = h + F.dropout(self.ff(self.norm_ff(h)), self.dropout, self.training)
        return self.norm_out(h)

    def forward(self, x, hx=None, return_distances: bool = False):
        refuse_state(hx, "transformer")
        padded, lengths = unpack(x)
        out = self.block(padded)  # (T, B, H)
        state = pool(out, lengths, self.pooling).unsqueeze(0)  # (1, B, H)
        return like_input(out, x, lengths), state, None
