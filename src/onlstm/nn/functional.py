"""Functional pieces of ON-LSTM, the equations of docs/design.md §1.1 on plain tensors, and the readable step loop
of one layer (:func:`reference_layer`, ``impl='reference'``), differentiated by autograd: the *reference* every
fast kernel is tested against.

Pre-activation layout (the reference code's order, ``n = D // C`` chunks)::

    pre = W x + U h + b = [l_i (n) | l_f (n) | o (D) | c^ (D) | i (D) | f (D)]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

MASTER_INPUT_MODES = ("paper", "reverse")


def cumax(x: Tensor, dim: int = -1) -> Tensor:
    """Cumulative softmax: ``cumsum(softmax(x, dim), dim)``; values rise monotonically from >0 to 1."""
    return torch.cumsum(torch.softmax(x, dim=dim), dim=dim)


def suffix_sum(p: Tensor, inclusive: bool) -> Tensor:
    """``s_k = sum_{j >= k} p_j`` (inclusive) or ``sum_{j > k} p_j`` (exclusive) over the last dim: the master
    input gate, and the adjoint of the master forget gate's cumulative sum in the fused backward."""
    s = torch.flip(torch.cumsum(torch.flip(p, (-1,)), -1), (-1,))
    return s if inclusive else s - p


def prefix_sum(p: Tensor, inclusive: bool) -> Tensor:
    """``s_k = sum_{j <= k} p_j`` (inclusive) or ``sum_{j < k} p_j`` (exclusive): the adjoint of :func:`suffix_sum`."""
    s = torch.cumsum(p, -1)
    return s if inclusive else s - p


def master_forget(logits: Tensor) -> Tensor:
    """Master forget gate ``f~ = cumax(l_f)`` over the chunk dimension (last)."""
    return cumax(logits)


def master_input(logits: Tensor, mode: str = "paper") -> Tensor:
    """Master input gate over chunks.

    ``'paper'``: ``1 - cumax(l_i)``, written as the exclusive suffix sum of the softmax (the same
    value without the cancellation), so the highest chunk is exactly zero and never written.
    ``'reverse'``: the inclusive suffix sum; the highest chunk receives ``p_n > 0``.
    """
    if mode not in MASTER_INPUT_MODES:
        raise ValueError(f"master_input must be one of {MASTER_INPUT_MODES}, got {mode!r}")
    return suffix_sum(torch.softmax(logits, dim=-1), inclusive=(mode == "reverse"))


def gate_size(hidden_size: int, chunk_size: int) -> int:
    """Width of the pre-activation: 4 standard gates plus the two master gates."""
    return 4 * hidden_size + 2 * (hidden_size // chunk_size)


def cell_update(pre: Tensor, c: Tensor, chunk_size: int, mode: str = "paper") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One ON-LSTM step from the pre-activation ``pre`` (B, 2n + 4D) and the cell ``c`` (B, D).

    Returns ``h', c', d_f, d_i`` with ``d_f, d_i`` shaped (B,).
    """
    batch, hidden = c.shape
    n = hidden // chunk_size
    l_i, l_f = pre[:, :n], pre[:, n : 2 * n]
    o, c_hat, i, f = pre[:, 2 * n :].view(batch, 4 * n, chunk_size).chunk(4, dim=1)  # each (B, n, C)
    mf = master_forget(l_f)  # (B, n)
    mi = master_input(l_i, mode)  # (B, n)
    o, i, f = torch.sigmoid(o), torch.sigmoid(i), torch.sigmoid(f)
    c_hat = torch.tanh(c_hat)
    w = (mf * mi)[:, :, None]  # overlap, (B, n, 1) broadcast over C units
    f_hat = f * w + (mf[:, :, None] - w)
    i_hat = i * w + (mi[:, :, None] - w)
    c_new = f_hat * c.view(batch, n, chunk_size) + i_hat * c_hat
    h_new = o * torch.tanh(c_new)
    # in the cell's dtype: under autocast the gates are in the products' dtype (bfloat16) and the cell state float32,
    # and the kernels' distances are float32 like their outputs
    d_f = (1.0 - mf.mean(-1)).to(c_new.dtype)
    d_i = mi.mean(-1).to(c_new.dtype)
    return h_new.reshape(batch, hidden), c_new.reshape(batch, hidden), d_f, d_i


def check_batch_sizes(batch_sizes: Tensor | Sequence[int], rows: int, where: str = "ONLSTM") -> None:
    """A packed sequence's ``batch_sizes`` fit its ``rows`` of data: a 1-D integer CPU sequence of positive,
    non-increasing sizes that sum to ``rows``, else a one-line ``ValueError`` (as ``nn.LSTM`` raises). The kernels
    trust them: sizes that sum to more rows would be written out of bounds. O(steps), on the CPU."""
    if isinstance(batch_sizes, Tensor):
        if batch_sizes.device.type != "cpu":
            raise ValueError(f"{where}: batch_sizes must be on the CPU, got {batch_sizes.device}")
        if batch_sizes.dim() != 1 or batch_sizes.dtype.is_floating_point or batch_sizes.is_complex():
            raise ValueError(
                f"{where}: batch_sizes must be a 1-D integer tensor, got {batch_sizes.dtype} of shape "
                f"{tuple(batch_sizes.shape)}"
            )
        sizes = [int(n) for n in batch_sizes.tolist()]
    else:  # checked as Python ints, not as a tensor: torch.export and torch.compile trace a list of ints as it is;
        # a symbolic size (a dynamic batch under torch.export) stays symbolic: int() would fix it to the example's
        sizes = [n if isinstance(n, torch.SymInt) else int(n) for n in batch_sizes]
    if not sizes:
        raise ValueError(f"{where}: batch_sizes is empty (a packed sequence has at least one step)")
    if min(sizes) <= 0:
        raise ValueError(f"{where}: batch_sizes must be positive, got {min(sizes)} at step {sizes.index(min(sizes))}")
    for step in range(1, len(sizes)):  # a loop, not next() over a generator, which torch 2.7's compiler refused
        if sizes[step] > sizes[step - 1]:
            raise ValueError(
                f"{where}: batch_sizes must be non-increasing, got {sizes[step - 1]} then {sizes[step]} at step {step}"
            )
    total = sum(sizes)
    if total != rows:
        raise ValueError(f"{where}: batch_sizes sum to {total} but the packed data has {rows} rows")


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
    check_batch_sizes(batch_sizes, x.shape[0])  # else extra rows would come back silently
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
