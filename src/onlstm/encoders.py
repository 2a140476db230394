"""One registry of recurrent encoders with the same call, so every experiment runs with any of them.

Every encoder built by :func:`make_encoder` is a single recurrent layer (stack them for depth, as the
language model does, so that layers can have different widths) with

    forward(x (T, B, in), hx=None, return_distances=False)
        -> output (T, B, out), state, distances

``state`` is whatever the encoder carries between calls (``(h, c)`` shaped like ``nn.LSTM``'s for
ON-LSTM and LSTM, ``h`` for GRU); ``distances`` is :class:`onlstm.Distances` for ON-LSTM and ``None``
for encoders without master gates. DropConnect on the hidden-to-hidden weights works the same way
for every encoder: one mask per forward call, not inverted (weights scaled by ``1 - p`` in eval).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.func import functional_call

from .nn import ONLSTM, dropconnect_weight


class _TorchRNN(nn.Module):
    """``nn.LSTM`` / ``nn.GRU`` (one layer) with reference-style DropConnect on ``weight_hh_l0``."""

    def __init__(self, rnn: nn.RNNBase, dropconnect: float):
        super().__init__()
        self.rnn, self.dropconnect = rnn, float(dropconnect)
        self.hidden_size = rnn.hidden_size

    def forward(self, x, hx=None, return_distances: bool = False):
        if self.dropconnect:
            w = dropconnect_weight(self.rnn.weight_hh_l0, self.dropconnect, self.training)
            out, state = functional_call(self.rnn, {"weight_hh_l0": w}, (x, hx))
        else:
            out, state = self.rnn(x, hx)
        return out, state, None


class _ONLSTMLayer(nn.Module):
    def __init__(self, layer: ONLSTM):
        super().__init__()
        self.rnn = layer
        self.hidden_size = layer.hidden_size

    def forward(self, x, hx=None, return_distances: bool = False):
        if return_distances:
            return self.rnn(x, hx, return_distances=True)
        out, state = self.rnn(x, hx)
        return out, state, None


def _onlstm(input_size, hidden_size, *, chunk_size=1, dropconnect=0.0, master_input="paper", **_):
    if hidden_size % chunk_size:
        raise ValueError(f"ON-LSTM layer of {hidden_size} units: not divisible by chunk_size={chunk_size}")
    return _ONLSTMLayer(ONLSTM(input_size, hidden_size, chunk_size=chunk_size, dropconnect=dropconnect,
                               master_input=master_input))


def _lstm(input_size, hidden_size, *, dropconnect=0.0, **_):
    return _TorchRNN(nn.LSTM(input_size, hidden_size), dropconnect)


def _gru(input_size, hidden_size, *, dropconnect=0.0, **_):
    return _TorchRNN(nn.GRU(input_size, hidden_size), dropconnect)


ENCODERS: dict[str, Callable[..., nn.Module]] = {"onlstm": _onlstm, "lstm": _lstm, "gru": _gru}


def make_encoder(name: str, input_size: int, hidden_size: int, **options) -> nn.Module:
    """Build one recurrent layer by name (``onlstm``, ``lstm``, ``gru``).

    ``options``: ``chunk_size``, ``master_input`` (ON-LSTM only; ignored by the others) and
    ``dropconnect`` (all).
    """
    if name not in ENCODERS:
        raise ValueError(f"unknown encoder {name!r}; choose one of {sorted(ENCODERS)}")
    return ENCODERS[name](input_size, hidden_size, **options)


def has_distances(name: str) -> bool:
    """Whether the encoder produces master-gate distances (and so can induce trees)."""
    return name == "onlstm"


def detach_state(state):
    """Cut the autograd history of a carried state (tensor or nested tuples of tensors)."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return state.detach()
    return tuple(detach_state(s) for s in state)
