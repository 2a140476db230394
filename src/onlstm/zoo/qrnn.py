"""QRNN, the quasi-recurrent network (Bradbury et al., ICLR 2017) with fo-pooling: :class:`QRNN` and its
readable step loop :func:`qrnn_reference` (equations: docs/encoders.md, "qrnn")."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..nn.kernels import previous_h
from ._steps import as_steps, fo_pool, initial_state


class QRNN(nn.Module):
    """One QRNN layer with the encoder call ``forward(x, hx=None, return_distances=False) -> out, state, None``.

    ``x``: (T, B, input_size) or a PackedSequence. State: ``(h, c, x_last)``, shapes (1, B, hidden_size) twice
    and (1, B, input_size): the last output (read by sentence encoders, not used by the recurrence), the
    pooled memory and the last input (the convolution's left neighbour for the next call).
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        # rows: z, f, o; columns: the weights of x_t, then those of x_{t-1}
        self.weight = nn.Parameter(torch.empty(3 * hidden_size, 2 * input_size))
        self.bias = nn.Parameter(torch.empty(3 * hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(2 * self.input_size)  # nn.Linear's default for a (2 * in)-wide input
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def gates(self, x: torch.Tensor, x_prev: torch.Tensor):
        """Candidate, forget and output gates for inputs and their predecessors (..., in): each (..., H)."""
        u = torch.cat([x, x_prev], dim=-1) @ self.weight.T + self.bias  # (..., 3H)
        z, f, o = u.chunk(3, dim=-1)
        return torch.tanh(z), torch.sigmoid(f), torch.sigmoid(o)

    def forward(self, x, hx=None, return_distances: bool = False):
        steps = as_steps(x, self.input_size)
        sizes = (self.hidden_size, self.hidden_size, self.input_size)
        _, c0, x0 = initial_state(hx, ("h", "c", "x_last"), sizes, steps)
        z, f, o = self.gates(steps.data, previous_h(x0, steps.data, steps.batch_sizes))  # (N, H) each
        c = fo_pool(f, (1 - f) * z, c0, steps)
        out = o * c  # (N, H)
        last = steps.last_rows()
        state = tuple(steps.from_sorted(s) for s in (out[last], c[last], steps.data[last]))
        return steps.output(out), state, None


def qrnn_reference(layer: QRNN, x: torch.Tensor, hx=None):
    """The readable step loop of :class:`QRNN` for a padded (T, B, in) input: ``out (T, B, H), state``."""
    b = x.shape[1]
    c = x.new_zeros(b, layer.hidden_size) if hx is None else hx[1][0]
    x_prev = x.new_zeros(b, layer.input_size) if hx is None else hx[2][0]
    outs = []
    for x_t in x:
        z, f, o = layer.gates(x_t, x_prev)
        c = f * c + (1 - f) * z
        outs.append(o * c)
        x_prev = x_t
    return torch.stack(outs), (outs[-1].unsqueeze(0), c.unsqueeze(0), x_prev.unsqueeze(0))
