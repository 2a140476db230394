"""``ONLSTMCell`` and ``ONLSTM``: the ordered-neurons LSTM with the interface of ``torch.nn.LSTM``."""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from . import functional as Fn
from . import kernel_ops, kernels, selfcheck


class Distances(NamedTuple):
    """Per-step distances: ``forget = 1 - mean(master forget)`` (used for parsing) and
    ``input = mean(master input)``."""

    forget: Tensor | PackedSequence
    input: Tensor | PackedSequence


class _Flat(NamedTuple):
    """The input of ``ONLSTM.forward`` as packed rows, and what is needed to lay the output out like it."""

    data: Tensor  # (N, input_size)
    batch_sizes: Tensor  # (T,) int64 on the CPU, non-increasing
    sorted_idx: Tensor | None  # PackedSequence's permutations (None: padded input)
    unsorted_idx: Tensor | None
    packed: bool
    unbatched: bool
    steps: int
    batch: int

    def size_list(self) -> list[int]:
        """The batch sizes as ints: a padded input's from its shape, never read back from the tensor, which
        ``torch.export`` and ``torch.compile(fullgraph=True)`` cannot do while tracing (a data-dependent value)."""
        return self.batch_sizes.tolist() if self.packed else [self.batch] * self.steps


def _exporting() -> bool:
    """Whether torch.export is tracing, read from the flag ``torch.compiler.is_exporting()`` returns: the compiler of
    torch 2.10 folds that call itself to True under any ``torch.compile`` (so a compiled layer ran the reference
    loop, not its kernel), while it reads the flag's value as it is."""
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    return torch.compiler.is_exporting() if flag is None else bool(flag)


def _functorch_active() -> bool:
    """Whether a ``torch.func`` transform (vmap, grad, jacrev, ...) is running (a private torch function, so
    asked for by name: a torch without it has no such transform running)."""
    return bool(getattr(torch._C, "_are_functorch_transforms_active", lambda: False)())


def _check_args(sizes: dict[str, int], probs: dict[str, float], master_input: str) -> None:
    """The constructor arguments of both modules: positive sizes, probabilities in [0, 1), a known mode."""
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            # ONLSTM(3, 4, 1, True) is nn.LSTM's bias=True in the place of chunk_size: say so
            order = " (the 4th positional argument is chunk_size, not nn.LSTM's bias)" if name == "chunk_size" else ""
            raise ValueError(f"{name} must be a positive integer, got {value!r}{order}")
    if sizes["hidden_size"] % sizes["chunk_size"]:
        raise ValueError(
            f"hidden_size ({sizes['hidden_size']}) must be divisible by chunk_size ({sizes['chunk_size']}); "
            f"choose a chunk_size among the divisors of {sizes['hidden_size']}"
        )
    for name, p in probs.items():
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p < 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1), got {p!r}")
    if master_input not in Fn.MASTER_INPUT_MODES:
        raise ValueError(f"master_input must be one of {Fn.MASTER_INPUT_MODES}, got {master_input!r}")


def _check_flags(**flags: object) -> None:
    """``bias``, ``batch_first``, ``bidirectional``: bools, as ``nn.LSTM`` requires (a string would be truthy)."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} should be of type bool, got: {type(value).__name__}")


_NO_TORCHSCRIPT = (
    "ONLSTM does not support {what} (its time loop is Python code: a trace would only be valid for one "
    "input shape); use torch.compile(model), the supported way to compile it (docs/layer.md)"
)


def _check_dtype(x: Tensor, weight: Tensor, who: str) -> None:
    """The input's dtype must be the weights' (as ``nn.LSTM`` checks), not a bare matmul error later."""
    if x.dtype != weight.dtype:
        raise ValueError(
            f"{who}: input dtype ({x.dtype}) does not match weight dtype ({weight.dtype}). Convert the input: "
            f"input.to({weight.dtype}), or the model: model.to({x.dtype})"
        )


def dropconnect_weight(weight: Tensor, p: float, training: bool) -> Tensor:
    """The reference DropConnect: one mask per call, not inverted (``weight * (1 - p)`` in eval)."""
    if p == 0.0:
        return weight
    if not training:
        return weight * (1.0 - p)
    keep = torch.empty_like(weight).uniform_() >= p
    return weight * keep


def dropconnect_call(rnn: Any, p: float, training: bool, *args: Any) -> Any:
    """``rnn(*args)`` for a one-layer torch RNN with the reference DropConnect on its ``weight_hh_l0``."""
    if not p:
        return rnn(*args)
    # Every weight goes in as a tensor of this call: once one weight is swapped, a torch RNN on cuDNN flattens the
    # tensors it is given into a new buffer and moves them there (flatten_parameters). Given its own parameters
    # it moved them, and a CUDA graph's replays then copied stale values over the optimizer's updates (an H200:
    # the logic LSTM's graphs trained something else than its eager steps). Copies leave the parameters alone.
    weights = {name: t.clone() for name, t in rnn.named_parameters()}
    weights["weight_hh_l0"] = dropconnect_weight(rnn.weight_hh_l0, p, training)
    return torch.func.functional_call(rnn, weights, args)


class ONLSTMCell(nn.Module):
    r"""One ON-LSTM step: ``(x, (h, c)) -> (h', c')``, shaped like :class:`torch.nn.LSTMCell`.

    Args:
        input_size: features of ``x``.
        hidden_size: units of ``h`` and ``c`` (``D``); must be a multiple of ``chunk_size``.
        chunk_size: units per master-gate chunk (``C``); there are ``n = D / C`` chunks.
        bias: add the biases ``bias_ih`` and ``bias_hh``.
        dropconnect: DropConnect probability on ``weight_hh`` (see :meth:`sample_mask`).
        master_input: ``'paper'`` (``1 - cumax``: the top chunk is never written) or
            ``'reverse'`` (reverse cumulative sum: every chunk can be written).

    Parameters are ``weight_ih (2n+4D, input)``, ``weight_hh (2n+4D, D)``, ``bias_ih``, ``bias_hh``
    with rows ``[master input (n) | master forget (n) | out | cell | in | forget]``, the layout of
    the authors' code, initialised like ``nn.Linear``.

    DropConnect draws one mask for ``weight_hh`` and keeps it until :meth:`sample_mask` is called
    again, so a loop over the steps of a sequence shares one mask (as the reference does); call
    ``sample_mask()`` at the start of each sequence. In eval mode the weight is scaled by ``1 - p``.
    """

    weight_ih: Tensor
    weight_hh: Tensor
    bias_ih: Tensor | None
    bias_hh: Tensor | None

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        chunk_size: int,
        bias: bool = True,
        dropconnect: float = 0.0,
        master_input: str = "paper",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        _check_args(dict(input_size=input_size, hidden_size=hidden_size, chunk_size=chunk_size),
                    dict(dropconnect=dropconnect), master_input)  # fmt: skip
        _check_flags(bias=bias)
        self.input_size, self.hidden_size, self.chunk_size = input_size, hidden_size, chunk_size
        self.n_chunks = hidden_size // chunk_size
        self.bias, self.dropconnect, self.master_input = bias, float(dropconnect), master_input
        self._flat_names = [_add_weights(self, "", input_size, hidden_size, chunk_size, bias, device, dtype)]
        if not bias:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self._mask: Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset(self, self._flat_names)

    def sample_mask(self) -> None:
        """Draw a new DropConnect mask for ``weight_hh`` (used by every training step until the next call)."""
        self._mask = torch.empty_like(self.weight_hh).uniform_() >= self.dropconnect

    def _w_hh(self) -> Tensor:
        if not (self.training and self.dropconnect):
            return dropconnect_weight(self.weight_hh, self.dropconnect, training=False)
        if self._mask is None or self._mask.shape != self.weight_hh.shape or self._mask.device != self.weight_hh.device:
            self.sample_mask()
        assert self._mask is not None  # sample_mask() just set it
        return self.weight_hh * self._mask

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None, return_distances: bool = False):
        """``input`` (B, input_size) or (input_size,); ``hx = (h, c)`` each (B, D) or (D,), zeros if None.

        Returns ``(h', c')``, or ``(h', c'), Distances(forget, input)`` (each (B,) or ()) when asked.
        """
        if input.dim() not in (1, 2):
            raise ValueError(
                f"ONLSTMCell: expected input of shape (batch, {self.input_size}) or "
                f"({self.input_size},), got {tuple(input.shape)}"
            )
        if input.shape[-1] != self.input_size:
            raise ValueError(f"ONLSTMCell: input has {input.shape[-1]} features, expected input_size={self.input_size}")
        _check_dtype(input, self.weight_ih, "ONLSTMCell")
        unbatched = input.dim() == 1
        x = input.unsqueeze(0) if unbatched else input
        if hx is None:
            h = c = x.new_zeros(x.shape[0], self.hidden_size)
        else:
            want = (self.hidden_size,) if unbatched else (x.shape[0], self.hidden_size)
            h, c = _check_hx(
                hx, want, who="ONLSTMCell", names=("h", "c"), shape="", unbatched=unbatched, dim=0, dtype=x.dtype
            )
        pre = F.linear(x, self.weight_ih, self.bias_ih) + F.linear(h, self._w_hh(), self.bias_hh)
        h1, c1, d_f, d_i = Fn.cell_update(pre, c, self.chunk_size, self.master_input)
        if unbatched:
            h1, c1, d_f, d_i = h1[0], c1[0], d_f[0], d_i[0]
        if return_distances:
            return (h1, c1), Distances(d_f, d_i)
        return h1, c1

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}, chunk_size={self.chunk_size}"
        if not self.bias:
            s += ", bias=False"
        if self.dropconnect:
            s += f", dropconnect={self.dropconnect}"
        return s + f", master_input={self.master_input!r}"


def _check_dropout(p: object, num_layers: int) -> None:
    """``dropout`` between layers: a probability in [0, 1] as ``nn.LSTM`` takes it, with its warning when there
    is no layer after which to apply it."""
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout must be a probability in [0, 1], got {p!r}")
    if p and num_layers == 1:
        warnings.warn(
            f"ONLSTM: dropout={p} acts between layers, and num_layers=1 has none after which to apply it",
            UserWarning,
            stacklevel=3,
        )


def _add_weights(module: nn.Module, sfx: str, input_size: int, hidden: int, chunk: int, bias: bool, device, dtype):
    """Register ``weight_ih{sfx}``, ``weight_hh{sfx}`` (and the two biases) on ``module``; returns their names."""
    g = Fn.gate_size(hidden, chunk)
    names = [f"weight_ih{sfx}", f"weight_hh{sfx}"] + ([f"bias_ih{sfx}", f"bias_hh{sfx}"] if bias else [])
    for name, shape in zip(names, [(g, input_size), (g, hidden), (g,), (g,)]):
        module.register_parameter(name, nn.Parameter(torch.empty(*shape, device=device, dtype=dtype)))
    return names


def _reset(module: nn.Module, flat_names: list[list[str]]) -> None:
    """``nn.Linear``'s default initialisation of each affine map (what the reference code gets)."""
    for names in flat_names:
        params = [getattr(module, name) for name in names] + [None, None]
        for weight, bias in ((params[0], params[2]), (params[1], params[3])):
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
            if bias is not None:
                nn.init.uniform_(bias, -1.0 / math.sqrt(weight.shape[1]), 1.0 / math.sqrt(weight.shape[1]))


def _check_hx(hx, want: tuple, *, who: str, names: tuple[str, str], shape: str, unbatched: bool, dim: int, dtype):
    """``hx``, a pair of tensors of shape ``want`` and the weights' ``dtype`` (the messages name ``who``, ``names``
    and ``shape``); unbatched ones get their batch dimension ``dim`` back."""
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        given = f"a tensor of shape {tuple(hx.shape)}" if isinstance(hx, Tensor) else f"{type(hx).__name__}"
        given += f" of {len(hx)}" if isinstance(hx, (tuple, list)) else ""
        raise ValueError(f"{who}: hx must be a pair ({names[0]}, {names[1]}) of tensors of shape {want}, got {given}")
    for name, t in zip(names, hx):
        if not isinstance(t, Tensor) or tuple(t.shape) != want:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{who}: expected {name} of shape {want}{shape}, got {got}")
        if t.dtype != dtype:  # else a bare matmul RuntimeError inside the kernel
            raise ValueError(
                f"{who}: hx's {name} dtype ({t.dtype}) does not match the layer's weight dtype ({dtype}). Convert "
                f"the state: {name}.to({dtype}), or the model: model.to({t.dtype})"
            )
    return tuple(t.unsqueeze(dim) for t in hx) if unbatched else tuple(hx)


class ONLSTM(nn.Module):
    r"""Multi-layer ON-LSTM with the interface of :class:`torch.nn.LSTM`.

    ``forward(input, hx=None, return_distances=False)`` returns ``output, (h_n, c_n)`` shaped exactly
    like ``nn.LSTM``'s, and, with ``return_distances=True``, a third value
    :class:`Distances` ``(forget, input)`` laid out like ``output`` with one feature per layer and
    direction (index ``layer * num_directions + direction``): ``(T, B, L*dirs)``,
    ``(B, T, L*dirs)`` with ``batch_first``, ``(T, L*dirs)`` unbatched, or a ``PackedSequence``
    whose data is ``(N, L*dirs)`` for packed input.

    Args beyond ``nn.LSTM``'s: ``chunk_size`` (default 1: every unit its own chunk),
    ``dropconnect`` (on ``weight_hh``, one mask per forward call shared over time and batch, not
    inverted), ``master_input`` (``'paper'`` default, or ``'reverse'``) and ``impl``, what runs each
    layer (see :mod:`onlstm.nn.kernels`): ``'reference'`` (the readable step loop, autograd),
    ``'fused'`` (whole-sequence PyTorch operations with a hand-written backward), ``'cpp'`` (the
    compiled kernel), ``'triton'`` (CUDA), any registered kernel, or ``'auto'`` (default: the best
    available kernel for the input's device and dtype, the C++ one on CPU, the Triton one on CUDA;
    else the reference).
    ``dropout`` is applied to the outputs of every layer but the last, as in ``nn.LSTM``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        chunk_size: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        dropconnect: float = 0.0,
        bidirectional: bool = False,
        master_input: str = "paper",
        impl: str = "auto",
        device=None,
        dtype=None,
        proj_size: int = 0,
    ) -> None:
        super().__init__()
        sizes = dict(input_size=input_size, hidden_size=hidden_size, chunk_size=chunk_size, num_layers=num_layers)
        _check_args(sizes, dict(dropconnect=dropconnect), master_input)
        _check_flags(bias=bias, batch_first=batch_first, bidirectional=bidirectional)
        _check_dropout(dropout, num_layers)
        if proj_size:  # nn.LSTM's keyword, accepted as 0 so that code passing it through still runs
            raise ValueError(
                f"proj_size={proj_size!r}: ONLSTM has no projection (its master gates act on the hidden state "
                "itself); add an nn.Linear after the layer"
            )
        self._impl = kernels.canonical_impl(impl)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.chunk_size, self.n_chunks = chunk_size, hidden_size // chunk_size
        self.bias, self.batch_first, self.bidirectional = bias, batch_first, bidirectional
        self.dropout, self.dropconnect, self.master_input = float(dropout), float(dropconnect), master_input
        self.num_directions, self.proj_size = (2 if bidirectional else 1), 0  # nn.LSTM's attribute, always 0 here
        self._flat_names = [
            _add_weights(self, f"_l{layer}{sfx}", input_size if layer == 0 else hidden_size * self.num_directions,
                         hidden_size, chunk_size, bias, device, dtype)
            for layer in range(num_layers) for sfx in ("", "_reverse")[: self.num_directions]
        ]  # fmt: skip
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset(self, self._flat_names)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, chunk_size={self.chunk_size}"
        for name, default in dict(
            bias=True, batch_first=False, dropout=0.0, dropconnect=0.0, bidirectional=False
        ).items():
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)}"
        return s + f", master_input={self.master_input!r}, impl={self.impl!r}"

    def flatten_parameters(self) -> None:
        """No-op, for code written against ``nn.LSTM`` (there is no cuDNN weight buffer here)."""

    @property
    def all_weights(self) -> list[list[nn.Parameter]]:
        """Parameters per layer and direction, as ``nn.LSTM.all_weights``."""
        return [[getattr(self, nm) for nm in names] for names in self._flat_names]

    @property
    def impl(self) -> str:
        """What runs the layers: ``'auto'``, ``'reference'`` or a registered kernel's name."""
        return self._impl

    @impl.setter
    def impl(self, value: str) -> None:
        self._impl = kernels.canonical_impl(value)

    def resolved_impl(self, device: torch.device, dtype: torch.dtype = torch.float32) -> str:
        """The implementation a forward call on ``device`` with ``dtype`` will use.

        The built-in kernels handle float32 and float64 on the CPU; everything else (CUDA, half
        precision) runs the reference step loop unless a registered kernel supports it. The Triton kernel
        first checks itself against the reference loop here, and where it fails that is the reference
        (:mod:`onlstm.nn.selfcheck`).
        """
        if _exporting() or _functorch_active():
            # torch.export keeps PyTorch operations (an exported graph runs where this package is not installed),
            # and torch.func's transforms (vmap, grad, jacrev) wrap them; the kernels are opaque to both
            return "reference"
        # the sizes as one string: under torch.compile(dynamic=True) torch 2.7 made a module's int attributes
        # symbolic, and a symbolic argument of a function marked constant stopped the compilation
        chosen = _chosen_impl(self.impl, device, dtype, f"{self.hidden_size} {self.chunk_size} {self.master_input}")
        if torch.compiler.is_compiling():  # the built-in kernels as operators (kernel_ops.py), else the step loop
            return chosen if chosen in kernel_ops.OPERATOR_KERNELS else "reference"
        return chosen

    def __prepare_scriptable__(self):
        # torch.jit.script calls this first: say what to use instead of failing on an internal construct
        raise NotImplementedError(_NO_TORCHSCRIPT.format(what="torch.jit.script"))

    def forward(self, input, hx=None, return_distances: bool = False):
        if torch.jit.is_tracing():
            # a trace would bake this input's sequence length and batch sizes into the graph (the time
            # loop is Python), giving wrong results for any other shape
            raise NotImplementedError(_NO_TORCHSCRIPT.format(what="torch.jit.trace"))
        flat = self._flatten_input(input)
        h0, c0 = self._initial_state(hx, flat.batch, flat.data, flat.unbatched, flat.sorted_idx)
        if flat.batch == 0:
            out, h_n, c_n, dist = self._empty(flat, h0, c0)
        else:
            out, h_n, c_n, dist = self._layers(flat, h0, c0, self.resolved_impl(flat.data.device, flat.data.dtype))
        return self._format_output(flat, out, h_n, c_n, dist, return_distances)

    def _empty(self, flat: _Flat, h0: Tensor, c0: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """What an empty batch gives (as ``nn.LSTM``): outputs of no rows, in the graph of the weights and the
        input (a sum over no elements is exactly 0), so that a loss over them still has a backward."""
        anchor = flat.data.sum() + h0.sum() + c0.sum() + sum(p[:0].sum() for p in self.parameters())
        dirs, layers = self.num_directions, self.num_layers * self.num_directions
        out = flat.data.new_zeros(0, self.hidden_size * dirs) + anchor
        return out, h0 + anchor, c0 + anchor, flat.data.new_zeros(0, 2, layers) + anchor

    def _flatten_input(self, input: Tensor | PackedSequence) -> _Flat:
        """Any accepted input as packed rows ``(N, input_size)`` with its batch sizes."""
        if isinstance(input, PackedSequence):
            data, batch_sizes, sorted_idx, unsorted_idx = input
            if data.dim() != 2:
                raise ValueError(
                    f"ONLSTM: a PackedSequence's data must have 2 dimensions (rows, input_size={self.input_size}), "
                    f"got shape {tuple(data.shape)}; pack (seq, batch, input_size) tensors with pack_padded_sequence"
                )
            self._check_features(data)
            Fn.check_batch_sizes(batch_sizes, data.shape[0])  # before any kernel trusts them
            if sorted_idx is not None and sorted_idx.numel() != int(batch_sizes[0]):
                raise ValueError(
                    f"ONLSTM: the packed sequence's sorted_indices has {sorted_idx.numel()} entries for "
                    f"{int(batch_sizes[0])} sequences"
                )
            return _Flat(
                data, batch_sizes, sorted_idx, unsorted_idx, True, False, len(batch_sizes), int(batch_sizes[0])
            )
        if input.dim() not in (2, 3):
            raise ValueError(
                f"ONLSTM: expected input of 3 dimensions ({'batch, seq' if self.batch_first else 'seq, batch'}, "
                f"input_size={self.input_size}) or 2 (seq, input_size) for an unbatched sequence, "
                f"got {input.dim()} dimensions with shape {tuple(input.shape)}"
            )
        self._check_features(input)
        unbatched = input.dim() == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        steps, batch = x.shape[0], x.shape[1]
        if steps == 0:  # as nn.LSTM: a sequence has at least one step (an empty batch is answered with no rows)
            raise ValueError(f"ONLSTM: input has an empty sequence dimension: shape {tuple(input.shape)}")
        data = x.reshape(steps * batch, self.input_size)
        batch_sizes = torch.full((steps,), batch, dtype=torch.int64)
        return _Flat(data, batch_sizes, None, None, False, unbatched, steps, batch)

    def _layers(self, flat: _Flat, h0: Tensor, c0: Tensor, impl: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Every layer and direction: last layer's rows ``(N, D*dirs)``, ``h_n, c_n``, ``dist (N, 2, L*dirs)``."""
        layer_input, results = flat.data, []
        rev = self._reversed_rows(flat) if self.bidirectional else None
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.num_directions):  # d = 1: the reverse direction, each sequence read backwards
                k = layer * self.num_directions + d
                x_l = layer_input.index_select(0, rev) if d and rev is not None else layer_input
                out, hk, ck, dist = self._run(k, x_l, flat, h0[k], c0[k], impl)
                if d and rev is not None:
                    out, dist = out.index_select(0, rev), dist.index_select(0, rev)
                outs.append(out)
                results.append((hk, ck, dist))
            layer_input = torch.cat(outs, dim=1) if len(outs) > 1 else outs[0]
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        h_n, c_n, dists = zip(*results)
        return layer_input, torch.stack(h_n), torch.stack(c_n), torch.stack(dists, dim=-1)

    @staticmethod
    def _reversed_rows(flat: _Flat) -> Tensor:
        """The row order of the reverse direction: every sequence read backwards. A padded input's is its steps
        flipped, built on the device from the shape alone (a dynamic batch under ``torch.export`` stays symbolic)."""
        if flat.packed:
            return kernels.index_on(kernels.reversed_rows(flat.size_list()), flat.data.device)
        rows = torch.arange(flat.steps * flat.batch, device=flat.data.device)
        return rows.view(flat.steps, flat.batch).flip(0).reshape(-1)

    def _format_output(self, flat: _Flat, out: Tensor, h_n: Tensor, c_n: Tensor, dist: Tensor, return_distances: bool):
        """Lay the packed rows out like the input (``nn.LSTM``'s shapes), distances likewise."""
        # the output, then the forget and input distances when asked (a packed one is a copy)
        parts: list[Any] = [out, dist[:, 0], dist[:, 1]] if return_distances else [out]
        if flat.packed:
            if flat.unsorted_idx is not None:
                h_n, c_n = h_n.index_select(1, flat.unsorted_idx), c_n.index_select(1, flat.unsorted_idx)
            parts = [
                PackedSequence(t.contiguous(), flat.batch_sizes, flat.sorted_idx, flat.unsorted_idx) for t in parts
            ]
        else:
            parts = [t.reshape(flat.steps, flat.batch, t.shape[-1]) for t in parts]  # -1 is ambiguous at batch 0
            if flat.unbatched:
                parts, h_n, c_n = [t[:, 0] for t in parts], h_n[:, 0], c_n[:, 0]
            elif self.batch_first:
                parts = [t.transpose(0, 1) for t in parts]
        if return_distances:
            return parts[0], (h_n, c_n), Distances(*parts[1:])
        return parts[0], (h_n, c_n)

    def _check_features(self, x: Tensor) -> None:
        if x.shape[-1] != self.input_size:
            raise ValueError(
                f"ONLSTM: input.size(-1) must be equal to input_size. Expected {self.input_size}, got {x.shape[-1]}"
            )
        if not x.is_floating_point():
            raise ValueError(f"ONLSTM: input must be a floating-point tensor, got {x.dtype}")
        _check_dtype(x, getattr(self, self._flat_names[0][0]), "ONLSTM")

    def _initial_state(self, hx, batch, data, unbatched, sorted_idx):
        layers = self.num_layers * self.num_directions
        if hx is None:
            z = data.new_zeros(layers, batch, self.hidden_size)
            return z, z
        want = (layers, self.hidden_size) if unbatched else (layers, batch, self.hidden_size)
        shape = f" (num_layers * num_directions, {'' if unbatched else 'batch, '}hidden_size)"
        h0, c0 = _check_hx(
            hx, want, who="ONLSTM", names=("h_0", "c_0"), shape=shape, unbatched=unbatched, dim=1, dtype=data.dtype
        )
        if sorted_idx is not None:
            h0, c0 = h0.index_select(1, sorted_idx), c0.index_select(1, sorted_idx)
        return h0, c0

    def _run(
        self, k: int, x: Tensor, flat: _Flat, h0: Tensor, c0: Tensor, impl: str
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One layer/direction over packed rows ``x`` (N, in): ``out (N, D), h_n, c_n, dist (N, 2)``."""
        w_ih, weight_hh, *biases = (getattr(self, name) for name in self._flat_names[k])
        w_hh, (b_ih, b_hh) = dropconnect_weight(weight_hh, self.dropconnect, self.training), biases or (None, None)
        if impl == "reference":
            return Fn.reference_layer(
                x, w_ih, w_hh, b_ih, b_hh, h0, c0, flat.size_list(), self.chunk_size, self.master_input
            )
        bias = None if b_ih is None or b_hh is None else b_ih + b_hh
        inclusive = self.master_input == "reverse"
        if torch.compiler.is_compiling():  # one of kernel_ops.OPERATOR_KERNELS (resolved_impl)
            batch_sizes = flat.batch_sizes if flat.packed else None  # None: the operator builds them from the shape
            return kernel_ops.kernel_layer(x, w_ih, w_hh, bias, h0, c0, batch_sizes, self.chunk_size, inclusive, impl)
        kernel = kernels.load_kernel(impl)
        assert kernel is not None, impl  # resolve_impl only returns kernels that loaded
        return kernels.fused_layer(x, w_ih, w_hh, bias, h0, c0, flat.batch_sizes, self.chunk_size, inclusive, kernel)


def _chosen_impl(impl: str, device: torch.device, dtype: torch.dtype, layer: str) -> str:
    """What runs the layers for ``impl``: the registry's choice, once it has checked itself on a layer of these
    sizes (``layer``: "HIDDEN CHUNK MASTER_INPUT"). Under torch.compile it is called while tracing, not traced
    (it loads and times kernels), and its answer is a constant of the graph."""
    hidden, chunk, master = layer.split()
    return selfcheck.verified(kernels.resolve_impl(impl, device, dtype), device, dtype, int(hidden), int(chunk), master)


# What torch.compiler.assume_constant_result(_chosen_impl) does, without it: that function imports the compiler,
# which took 3.6 s at every `import onlstm`; the compiler reads the mark when it runs (tests/nn/test_compiled.py
# checks that the two mark alike)
_chosen_impl._dynamo_marked_constant = True  # type: ignore[attr-defined]


selfcheck.register_layer(ONLSTM)
