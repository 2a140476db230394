"""Step layout shared by the zoo's recurrences: PyTorch's packed layout, as the ON-LSTM kernels use
(docs/design.md §4.3); a padded ``(T, B, F)`` batch is the case where every step has ``B`` rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import PackedSequence

from ..nn.kernels import last_rows


@dataclass
class Steps:
    """A batch in packed layout: ``data`` (N, F), rows of step 0 then of step 1, ..., and the row counts."""

    data: torch.Tensor
    batch_sizes: list[int]  # rows per step, non-increasing
    packed: PackedSequence | None  # the input, when it was packed (to rebuild the output)
    shape: tuple[int, int]  # (T, B) of a padded input

    def last_rows(self) -> torch.Tensor:
        """Row index (B,) of each sequence's last step, in sorted order."""
        return last_rows(self.batch_sizes, self.data.device)

    def to_sorted(self, state: torch.Tensor) -> torch.Tensor:
        """A (1, B, F) state in the caller's batch order -> (B, F) in this layout's (sorted) order."""
        order = None if self.packed is None else self.packed.sorted_indices
        return state[0] if order is None else state[0].index_select(0, order)

    def from_sorted(self, state: torch.Tensor) -> torch.Tensor:
        """(B, F) in sorted order -> (1, B, F) in the caller's order (as ``nn.LSTM`` returns states)."""
        order = None if self.packed is None else self.packed.unsorted_indices
        return (state if order is None else state.index_select(0, order)).unsqueeze(0)

    def output(self, values: torch.Tensor):
        """(N, H) rows back in the input's form: (T, B, H), or a PackedSequence like the input."""
        if self.packed is None:
            return values.reshape(*self.shape, values.shape[-1])
        return self.packed._replace(data=values)


def as_steps(x: torch.Tensor | PackedSequence, input_size: int) -> Steps:
    """Read an encoder input (``(T, B, input_size)`` or a PackedSequence) into the step layout."""
    if isinstance(x, PackedSequence):
        sizes = x.batch_sizes.tolist()
        data, packed, shape = x.data, x, (len(sizes), sizes[0])
    else:
        if x.dim() != 3 or x.shape[0] == 0 or x.shape[1] == 0:
            raise ValueError(f"expected input (T, B, {input_size}) with T, B > 0, got {tuple(x.shape)}")
        t, b = x.shape[0], x.shape[1]
        sizes, data, packed, shape = [b] * t, x.reshape(t * b, x.shape[2]), None, (t, b)
    if data.shape[-1] != input_size:
        raise ValueError(f"expected input features of size {input_size}, got {data.shape[-1]}")
    return Steps(data, sizes, packed, shape)


def initial_state(hx, names: Sequence[str], sizes: Sequence[int], steps: Steps) -> list[torch.Tensor]:
    """The carried state, ``hx`` a tuple of (1, B, size) tensors named ``names``, as (B, F) tensors in sorted order
    (zeros where ``hx`` is None)."""
    b = steps.batch_sizes[0]  # every sequence has a first step
    if hx is None:
        return [steps.data.new_zeros(b, n) for n in sizes]
    if not isinstance(hx, (tuple, list)) or len(hx) != len(names):
        raise ValueError(f"hx must be a tuple ({', '.join(names)}), got {type(hx).__name__}")
    for name, n, s in zip(names, sizes, hx):
        if not torch.is_tensor(s) or tuple(s.shape) != (1, b, n):
            got = tuple(s.shape) if torch.is_tensor(s) else type(s).__name__
            raise ValueError(f"hx {name} must have shape (1, {b}, {n}), got {got}")
    return [steps.to_sorted(s) for s in hx]


def fo_pool(forget: torch.Tensor, update: torch.Tensor, c0: torch.Tensor, steps: Steps):
    """The element-wise recurrence ``c_t = f_t * c_{t-1} + u_t`` over the step layout, the only sequential part
    of SRU and QRNN: ``forget``, ``update`` (N, H) laid out like ``steps.data``, ``c0`` (B, H) sorted -> every
    step's ``c`` (N, H); a sequence's final ``c`` is its row ``steps.last_rows()``."""
    cs, c = [], c0
    for f_t, u_t in zip(forget.split(steps.batch_sizes), update.split(steps.batch_sizes)):
        c = torch.addcmul(u_t, f_t, c[: f_t.shape[0]])  # batch sizes never grow: the running rows come first
        cs.append(c)
    return torch.cat(cs)
