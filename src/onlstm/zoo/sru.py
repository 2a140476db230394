"""SRU, the Simple Recurrent Unit (Lei et al., arXiv:1709.02755 v1): :class:`SRU` and its readable step loop
:func:`sru_reference` (equations, and why it is written here: docs/encoders.md, "sru")."""

from __future__ import annotations

import math

import torch
from torch import nn

from ._steps import as_steps, fo_pool, initial_state


class SRU(nn.Module):
    """One SRU layer with the encoder call ``forward(x, hx=None, return_distances=False) -> out, (h, c), None``.

    ``x``: (T, B, input_size) or a PackedSequence; ``hx``/state: ``(h, c)``, each (1, B, hidden_size), in
    ``nn.LSTM``'s layout. Only ``c`` is recurrent; ``h`` (the last output of each sequence) is carried so that a
    sentence encoder can read it like an LSTM's state, and an ``h`` passed in ``hx`` is not used.
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.projects = input_size != hidden_size
        rows = (4 if self.projects else 3) * hidden_size
        # rows: candidate W, forget W_f, reset W_r, then the projection W_p when the widths differ
        self.weight = nn.Parameter(torch.empty(rows, input_size))
        self.bias = nn.Parameter(torch.zeros(2 * hidden_size))  # b_f, b_r
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # variance 1/input_size, as the paper recommends, so the candidate and skip keep the input's scale
        bound = math.sqrt(3.0 / self.input_size)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.zeros_(self.bias)

    def parts(self, x: torch.Tensor):
        """Candidate, forget, reset and skip term for inputs (..., in): each (..., H)."""
        u = x @ self.weight.T  # (..., 3H or 4H): every input product of every step at once
        z, f, r, *projected = u.split(self.hidden_size, dim=-1)  # one split: its backward is one concatenation
        b_f, b_r = self.bias.split(self.hidden_size)
        skip = projected[0] if self.projects else x
        return z, torch.sigmoid(f + b_f), torch.sigmoid(r + b_r), skip

    def forward(self, x, hx=None, return_distances: bool = False):
        steps = as_steps(x, self.input_size)
        _, c0 = initial_state(hx, ("h", "c"), (self.hidden_size, self.hidden_size), steps)
        z, f, r, skip = self.parts(steps.data)  # (N, H) each
        c = fo_pool(f, (1 - f) * z, c0, steps)
        out = r * torch.tanh(c) + (1 - r) * skip  # (N, H)
        last = steps.last_rows()
        return steps.output(out), (steps.from_sorted(out[last]), steps.from_sorted(c[last])), None


def sru_reference(layer: SRU, x: torch.Tensor, hx=None):
    """The readable step loop of :class:`SRU` for a padded (T, B, in) input: ``out (T, B, H), (h, c)``."""
    c = x.new_zeros(x.shape[1], layer.hidden_size) if hx is None else hx[1][0]
    outs = []
    for x_t in x:
        z, f, r, skip = layer.parts(x_t)
        c = f * c + (1 - f) * z
        outs.append(r * torch.tanh(c) + (1 - r) * skip)
    return torch.stack(outs), (outs[-1].unsqueeze(0), c.unsqueeze(0))
