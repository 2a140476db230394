"""The reference path (``impl='reference'``): one layer and direction as a readable step loop of
:func:`onlstm.nn.functional.cell_update`, differentiated by autograd; every kernel is tested against it."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .functional import cell_update


def reference_layer(
    x: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
    h0: Tensor,
    c0: Tensor,
    batch_sizes: Sequence[int],
    chunk: int,
    mode: str,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``x (N, I)`` packed rows -> ``out (N, D), h_n (B, D), c_n (B, D), dist (N, 2)``.

    ``dist[:, 0]`` is ``d_f = 1 - mean(master forget)``, ``dist[:, 1]`` is ``d_i = mean(master input)``;
    ``mode`` is the master-input mode (``'paper'`` or ``'reverse'``).
    """
    wx = F.linear(x, w_ih, b_ih)  # W x_t + b_ih, every step
    h, c = h0, c0  # (B, D): row r holds its latest state
    outs, dists = [], []
    start = 0
    for b in batch_sizes:  # the first b rows are still running
        pre = wx[start : start + b] + F.linear(h[:b], w_hh, b_hh)
        h_t, c_t, d_f, d_i = cell_update(pre, c[:b], chunk, mode)
        outs.append(h_t)
        dists.append(torch.stack([d_f, d_i], dim=-1))
        if b < h.shape[0]:  # rows >= b have ended: keep their last state
            h_t, c_t = torch.cat([h_t, h[b:]]), torch.cat([c_t, c[b:]])
        h, c = h_t, c_t
        start += b
    return torch.cat(outs), h, c, torch.cat(dists)
