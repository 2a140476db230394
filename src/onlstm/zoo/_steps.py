"""Step layout shared by the zoo's recurrences: PyTorch's packed layout (rows of each step contiguous, batch
sizes non-increasing), as the ON-LSTM kernels use (docs/design.md §4.3). A padded ``(T, B, F)`` batch is
the case where every step has ``B`` rows, so padded and packed batches run through one loop, and a sequence
that has ended simply stops being updated.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import PackedSequence


@dataclass
class Steps:
    """A batch in packed layout: ``data`` (N, F) and the row counts of each step."""

    data: torch.Tensor  # (N, F): rows of step 0, then rows of step 1, ...
    batch_sizes: list[int]  # rows per step, non-increasing
    offsets: list[int]  # first row of each step in ``data``
    packed: PackedSequence | None  # the input, when it was packed (to rebuild the output)
    shape: tuple[int, int]  # (T, B) of a padded input

    @property
    def batch(self) -> int:
        return self.batch_sizes[0]

    def split(self, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """A (N, *) tensor laid out like ``data`` cut into its steps: ``batch_sizes[t]`` rows each.

        One split rather than a slice per step: the backward of ``T`` slices would build ``T`` zero-filled
        (N, *) gradients, quadratic in the length; a split's backward is one concatenation."""
        return values.split(self.batch_sizes)

    def last_rows(self) -> torch.Tensor:
        """Row index (B,) of each sequence's last step, in sorted order."""
        sizes = torch.tensor(self.batch_sizes)
        lengths = (sizes.unsqueeze(0) > torch.arange(self.batch).unsqueeze(1)).sum(1)  # (B,)
        starts = torch.tensor(self.offsets)
        return (starts[lengths - 1] + torch.arange(self.batch)).to(self.data.device)

    def previous(self, values: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        """For every row, the same sequence's row one step earlier (``first`` (B, F) for step 0): (N, F)."""
        steps = self.split(values)
        parts = [first[: self.batch_sizes[0]]] + [steps[t - 1][:bs] for t, bs in enumerate(self.batch_sizes) if t]
        return torch.cat(parts)

    def to_sorted(self, state: torch.Tensor) -> torch.Tensor:
        """A (1, B, F) state in the caller's batch order -> (B, F) in this layout's (sorted) order."""
        s = state[0]
        if self.packed is not None and self.packed.sorted_indices is not None:
            s = s.index_select(0, self.packed.sorted_indices)
        return s

    def from_sorted(self, state: torch.Tensor) -> torch.Tensor:
        """(B, F) in sorted order -> (1, B, F) in the caller's order (as ``nn.LSTM`` returns states)."""
        if self.packed is not None and self.packed.unsorted_indices is not None:
            state = state.index_select(0, self.packed.unsorted_indices)
        return state.unsqueeze(0)

    def output(self, values: torch.Tensor):
        """(N, H) rows back in the input's form: (T, B, H), or a PackedSequence like the input."""
        if self.packed is None:
            return values.reshape(*self.shape, values.shape[-1])
        p = self.packed
        return PackedSequence(values, p.batch_sizes, p.sorted_indices, p.unsorted_indices)


def as_steps(x: torch.Tensor | PackedSequence, input_size: int) -> Steps:
    """Read an encoder input (``(T, B, input_size)`` or a PackedSequence) into the step layout."""
    if isinstance(x, PackedSequence):
        sizes = [int(b) for b in x.batch_sizes]
        data, packed, shape = x.data, x, (len(sizes), sizes[0])
    else:
        if x.dim() != 3 or x.shape[0] == 0 or x.shape[1] == 0:
            raise ValueError(f"expected input (T, B, {input_size}) with T, B > 0, got {tuple(x.shape)}")
        t, b = x.shape[0], x.shape[1]
        sizes, data, packed, shape = [b] * t, x.reshape(t * b, x.shape[2]), None, (t, b)
    if data.shape[-1] != input_size:
        raise ValueError(f"expected input features of size {input_size}, got {data.shape[-1]}")
    return Steps(data, sizes, list(itertools.accumulate(sizes[:-1], initial=0)), packed, shape)


def initial_state(hx, names: Sequence[str], sizes: Sequence[int], steps: Steps) -> list[torch.Tensor]:
    """The carried state as (B, F) tensors in sorted order; zeros where ``hx`` is None.

    ``hx`` is a tuple of (1, B, size) tensors named ``names`` (in the caller's batch order).
    """
    b = steps.batch  # every sequence has a first step
    if hx is None:
        return [steps.data.new_zeros(b, n) for n in sizes]
    if not isinstance(hx, (tuple, list)) or len(hx) != len(names):
        raise ValueError(f"hx must be a tuple ({', '.join(names)}), got {type(hx).__name__}")
    out = []
    for name, n, s in zip(names, sizes, hx):
        if not torch.is_tensor(s) or tuple(s.shape) != (1, b, n):
            got = tuple(s.shape) if torch.is_tensor(s) else type(s).__name__
            raise ValueError(f"hx {name} must have shape (1, {b}, {n}), got {got}")
        out.append(steps.to_sorted(s))
    return out


def fo_pool(forget: torch.Tensor, update: torch.Tensor, c0: torch.Tensor, steps: Steps):
    """The element-wise recurrence ``c_t = f_t * c_{t-1} + u_t`` over the step layout.

    ``forget``, ``update``: (N, H) laid out like ``steps.data``; ``c0``: (B, H) sorted.
    Returns every step's ``c`` (N, H) and each sequence's final ``c`` (B, H). The only sequential part of
    SRU and QRNN: everything that reads the input is computed for all steps at once before this loop.
    """
    cs, c = [], c0
    for f_t, u_t in zip(steps.split(forget), steps.split(update)):
        bs = f_t.shape[0]
        ct = torch.addcmul(u_t, f_t, c[:bs])  # (bs, H)
        cs.append(ct)
        # sequences past their end keep their last c (rows bs: of the sorted batch)
        c = ct if bs == c.shape[0] else torch.cat([ct, c[bs:]])
    return torch.cat(cs), c
