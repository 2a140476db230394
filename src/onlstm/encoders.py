"""The one registry of recurrent encoders (:func:`register`, :func:`get`, :func:`make_encoder`): every experiment
builds its layers from here, by name, and every encoder has one call (docs/encoders.md, "The registry";
docs/design.md §4.4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .config import ConfigError, check_value, option
from .errors import first_line
from .nn import ONLSTM
from .nn.functional import MASTER_INPUT_MODES
from .nn.modules import dropconnect_call
from .zoo import QRNN, SRU
from .zoo.sliced import RNN_TYPES, SlicedRNN
from .zoo.transformer import POOLINGS, POSITIONS, TransformerLayer


class EncoderError(ConfigError):
    """Unknown encoder, an option it does not accept, or settings it cannot work with."""


@dataclass(frozen=True)
class EncoderOption:
    """One option an encoder accepts: ``name``, its type (int, float, str, bool), default, help text, choices and
    bounds (``gt``, ``ge``, ``lt``, ``le``), declared as every setting is (:attr:`field`)."""

    name: str
    type: type
    default: Any
    help: str = ""
    choices: tuple | None = None
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    @property
    def field(self) -> Any:
        """The option as a config field (:func:`onlstm.config.option`): one code path checks its values."""
        return option(self.default, self.help, choices=self.choices, gt=self.gt, ge=self.ge, lt=self.lt, le=self.le)


@dataclass(frozen=True)
class EncoderSpec:
    """A registry entry. ``build(input_size, hidden_size, **options)`` returns one layer with the encoders' call;
    ``check(hidden_sizes, options)``, the encoder's own validation, raises :class:`EncoderError` saying what to
    change (it runs with the options already type-checked and defaults filled in)."""

    name: str
    build: Callable[..., nn.Module]
    options: tuple[EncoderOption, ...] = ()
    yields_distances: bool = False
    causal: bool = True
    stateful: bool = True
    description: str = ""
    check: Callable[[list[int], dict], None] | None = field(default=None, compare=False)

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)

    def resolve(self, options: Mapping[str, Any]) -> dict:
        """``options`` type-checked, with the defaults of the ones not given; an undeclared one is an error."""
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            accepted = ", ".join(self.option_names) or "none"
            raise EncoderError(
                f"encoder {self.name!r} does not accept the option(s) {', '.join(unknown)} (it accepts: {accepted})"
            )
        out = {}
        for o in self.options:
            try:
                out[o.name] = check_value(
                    o.field, o.type, options.get(o.name, o.default), f"{self.name} option {o.name}"
                )
            except ConfigError as exc:
                raise EncoderError(str(exc)) from None
        return out

    def validate(self, hidden_sizes: int | Sequence[int], options: Mapping[str, Any] | None = None) -> dict:
        """Check that layers of ``hidden_sizes`` units can be built with ``options``; returns the resolved options."""
        sizes = [hidden_sizes] if isinstance(hidden_sizes, int) else list(hidden_sizes)
        opts = self.resolve(options or {})
        if self.check is not None:
            try:
                self.check(sizes, opts)
            except EncoderError:
                raise
            except ValueError as exc:  # a user's check may raise a plain ValueError: still a one-line CLI error
                raise EncoderError(f"encoder {self.name!r}: {exc}") from None
        return opts


_REGISTRY: dict[str, EncoderSpec] = {}


def register(
    name: str,
    build: Callable[..., nn.Module],
    *,
    options: Iterable[EncoderOption] = (),
    yields_distances: bool = False,
    causal: bool = True,
    stateful: bool = True,
    description: str = "",
    check: Callable[[list[int], dict], None] | None = None,
    replace: bool = False,
) -> EncoderSpec:
    """Add an encoder to the registry (from the package or from user code; a name already there is an error
    unless ``replace=True``); returns its spec."""
    # a name that cannot be typed as --cell NAME (one starting with -, read as a flag) would be registered for
    # nothing
    word = isinstance(name, str) and name.replace("_", "").replace("-", "").isalnum()
    if not word or name.startswith("-"):
        raise EncoderError(
            f"encoder name must be a non-empty word (letters, digits, - and _) not starting with -, got {name!r}"
        )
    if name in _REGISTRY and not replace:
        raise EncoderError(f"an encoder named {name!r} is already registered; pass replace=True to replace it")
    if not callable(build):
        raise EncoderError(f"encoder {name!r}: build must be a class or function that returns the layer, got {build!r}")
    options = tuple(options)
    _check_options(name, options)
    spec = EncoderSpec(name, build, options, yields_distances, causal, stateful, description, check)
    _REGISTRY[name] = spec
    return spec


def _check_options(name: str, options: tuple) -> None:
    """Every option an :class:`EncoderOption` whose default passes its own type, choices and bounds: else every
    command would fail while building its parser, or every build of the encoder without the option."""
    for o in options:
        if not isinstance(o, EncoderOption):
            raise EncoderError(
                f"encoder {name!r}: options must be EncoderOption entries, got {o!r}; declare it as "
                "EncoderOption(name, type, default, help)"
            )
        try:
            check_value(o.field, o.type, o.default, f"encoder {name!r}: the default of option {o.name}")
        except ConfigError as exc:
            raise EncoderError(f"{exc}; change the default or the bounds") from None


def unregister(name: str) -> None:
    """Remove an encoder (e.g. one a test registered); unknown names are an error."""
    get(name)
    del _REGISTRY[name]


def names() -> list[str]:
    """The registered encoder names, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> EncoderSpec:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise EncoderError(
            f"unknown encoder {name!r}; registered encoders: {', '.join(names())} (an encoder "
            "defined in your own code must be registered with onlstm.encoders.register first)"
        ) from None


def check_cell(name: Any, where: str = "cell") -> EncoderSpec:
    """The spec of the encoder a config names in ``where``; the error lists the registered names."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise EncoderError(
            f"{where} must be one of {names()}, got {name!r}; an encoder defined in your own code "
            "must be registered (onlstm.encoders.register) before a config or a run using it is "
            "built or loaded"
        )
    return _REGISTRY[name]


def options_for(name: str, values: Mapping[str, Any] | object, extra: Mapping[str, Any] | None = None) -> dict:
    """Options for encoder ``name`` from an experiment config's attributes (or a mapping): the ones it declares
    (one config serves every encoder of a comparison; each receives only its own) plus ``extra`` (the config's
    ``encoder_options``, set explicitly by the user: :meth:`EncoderSpec.validate` rejects any of them the encoder
    does not accept)."""
    declared = get(name).option_names
    if isinstance(values, Mapping):
        found = {n: values[n] for n in declared if n in values}
    else:
        found = {n: getattr(values, n) for n in declared if hasattr(values, n)}
    return {**found, **(extra or {})}


ENCODER_OPTIONS_HELP = (
    "options of the encoder beyond the fields above, e.g. nonlinearity=tanh (YAML: a mapping); "
    "an option the chosen encoder does not accept is an error"
)


def accepted_by(option: str) -> list[str]:
    """Names of the registered encoders that declare ``option`` (for help texts)."""
    return [n for n in names() if option in _REGISTRY[n].option_names]


def cell_help(prefix: str = "encoder") -> str:
    """``--cell`` help text listing the registry (computed when the parser is built)."""
    return f"{prefix}: one of {', '.join(names())} (register more with onlstm.encoders.register)"


def option_help(option: str, text: str) -> Callable[[], str]:
    """Help text of an experiment field that is an encoder option, naming the encoders that take it (computed
    when the parser is built, so encoders registered later are listed)."""
    return lambda: f"{text} (used by: {', '.join(accepted_by(option)) or 'no registered encoder'})"


def check_typed_options(cells: Sequence[str], typed: Mapping[str, Any]) -> None:
    """Refuse an encoder field the user typed as a flag (``--dropconnect``) that none of ``cells`` declares: in a
    preset it is passed over (:func:`options_for`), typed it would be silently ignored."""
    if any(not isinstance(cell, str) or cell not in _REGISTRY for cell in cells):
        return  # an unknown encoder: the config's own check names it and lists the registered ones
    declared = {o for cell in cells for o in _REGISTRY[cell].option_names}
    every = {o for name in names() for o in _REGISTRY[name].option_names}
    unused = sorted(k for k in typed if k in every and k not in declared)
    if unused:
        which = ", ".join(repr(c) for c in cells)
        used_by = "; ".join(f"--{k.replace('_', '-')} is used by {', '.join(accepted_by(k))}" for k in unused)
        raise EncoderError(
            f"{', '.join('--' + k.replace('_', '-') for k in unused)} does not apply to encoder {which} "
            f"(it declares no such option): drop the flag or choose another encoder ({used_by})"
        )


def check_option_clash(given: Mapping[str, Any]) -> None:
    """Refuse an encoder option set both as a field of the model settings ``given`` (a flag such as
    ``--chunk-size`` or a preset's field) and in its ``encoder_options``: the layer would be built with the
    latter while the run's config.json records the former."""
    extra = given.get("encoder_options") or {}
    both = sorted(k for k in extra if k in given and k != "encoder_options") if isinstance(extra, Mapping) else []
    if both:
        k = both[0]
        raise EncoderError(
            f"{k} is set twice, as --{k.replace('_', '-')} (or the config's {k}: field) = {given[k]!r} and in "
            f"--encoder-options {k}={extra[k]!r}: set it once, with --{k.replace('_', '-')}"
        )


def make_encoder(name: str, input_size: int, hidden_size: int, **options) -> nn.Module:
    """Build one layer of encoder ``name``; an option it does not declare is an :class:`EncoderError`."""
    spec = get(name)
    opts = spec.validate(hidden_size, options)
    try:
        return spec.build(input_size, hidden_size, **opts)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:  # a user's build refusing its settings: a one-line CLI error too
        raise EncoderError(
            f"encoder {name!r} could not be built (input size {input_size}, hidden size {hidden_size}, options "
            f"{opts}): {type(exc).__name__}: {first_line(exc)}"
        ) from exc


def has_distances(name: str) -> bool:
    """Whether the encoder produces master-gate distances (and so can induce trees)."""
    return get(name).yields_distances


class TorchRNN(nn.Module):
    """A one-layer ``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU`` with this module's call and optional DropConnect on
    ``weight_hh_l0`` (reference style: one mask per call, not inverted). Also a ready wrapper for user encoders."""

    def __init__(self, rnn: nn.Module, dropconnect: float = 0.0):
        super().__init__()
        self.rnn, self.dropconnect, self.hidden_size = rnn, float(dropconnect), rnn.hidden_size

    def forward(self, x, hx=None, return_distances: bool = False):
        out, state = dropconnect_call(self.rnn, self.dropconnect, self.training, x, hx)
        return out, state, None


class ONLSTMLayer(nn.Module):
    """An :class:`~onlstm.nn.ONLSTM` with the encoder call; its DropConnect is its own, its distances are passed on
    unless ``distances=False`` (``lstm-std``: its master gates are constant, its distances would be zeros that
    mean nothing; it gives None, as every encoder without master gates). The parameters are ``rnn.*``, as
    :class:`TorchRNN`'s."""

    def __init__(self, rnn: ONLSTM, distances: bool = True):
        super().__init__()
        self.rnn, self.hidden_size, self.distances = rnn, rnn.hidden_size, distances

    def forward(self, x, hx=None, return_distances: bool = False):
        if return_distances and self.distances:
            return self.rnn(x, hx, return_distances=True)
        return (*self.rnn(x, hx), None)


def _check_divides(sizes: list[int], option: str, value: int, why: str) -> None:
    """``value`` (option ``option``, >= 1 by its declaration) divides every hidden size."""
    bad = [h for h in sizes if h % value]
    if bad:
        raise EncoderError(f"hidden sizes {bad} are not divisible by {option}={value}: {why}")


def _check_onlstm(sizes: list[int], opts: dict) -> None:
    why = "an ON-LSTM layer is cut into chunks of chunk_size units; change the hidden size(s) or chunk_size"
    _check_divides(sizes, "chunk_size", opts["chunk_size"], why)


_DROPCONNECT = EncoderOption("dropconnect", float, 0.0, "DropConnect on hidden-to-hidden weights", ge=0, lt=1)

register(
    "onlstm",
    lambda i, h, **o: ONLSTMLayer(ONLSTM(i, h, **o)),
    yields_distances=True,
    check=_check_onlstm,
    description="Ordered Neurons LSTM (master gates; yields distances for tree induction)",
    options=(
        EncoderOption("chunk_size", int, 1, "units per master-gate level", ge=1),
        EncoderOption("master_input", str, "paper", "master input gate: paper or reverse", MASTER_INPUT_MODES),
        _DROPCONNECT,
    ),
)
for _cell in (nn.LSTM, nn.GRU):  # "lstm" and "gru"; the default argument binds each loop's cell
    register(
        _cell.__name__.lower(),
        lambda i, h, dropconnect, cell=_cell: TorchRNN(cell(i, h), dropconnect),
        options=(_DROPCONNECT,),
        description=f"torch.nn.{_cell.__name__}",
    )
# The authors' LSTM baseline of the logic experiment is their ON-LSTM cell run with --std: the same weight layout
# and initialisation, the master gates left out. One chunk as wide as the layer with the reversed master input
# gives exactly that (both master gates are then 1), through the layer's fast kernels (docs/encoders.md).
register(
    "lstm-std",
    lambda i, h, dropconnect: ONLSTMLayer(
        ONLSTM(i, h, chunk_size=h, master_input="reverse", dropconnect=dropconnect), distances=False
    ),
    options=(_DROPCONNECT,),
    description="the authors' LSTM baseline (their --std cell): an LSTM in ON-LSTM's layout and initialisation, "
    "through onlstm's kernels",
)
# The RNN family as baselines (docs/encoders.md). SRU and QRNN have no hidden-to-hidden weights (their gates
# read the input only), so they take no dropconnect: a preset's dropconnect field does not reach them, and
# --encoder-options dropconnect=... is an error.
register(
    "rnn",
    lambda i, h, nonlinearity, dropconnect: TorchRNN(nn.RNN(i, h, nonlinearity=nonlinearity), dropconnect),
    options=(
        EncoderOption("nonlinearity", str, "tanh", "the Elman RNN's nonlinearity", ("tanh", "relu")),
        _DROPCONNECT,
    ),
    description="Elman RNN (torch.nn.RNN)",
)
register("sru", SRU, description="Simple Recurrent Unit: gates from the input only, highway output")
register("qrnn", QRNN, description="quasi-recurrent network: width-2 causal convolution, fo-pooling")


def _check_transformer(sizes: list[int], opts: dict) -> None:
    why = (
        "attention splits a layer's width into heads of equal size; change the hidden size(s) or heads "
        "(--encoder-options heads=N)"
    )
    _check_divides(sizes, "heads", opts["heads"], why)


register(
    "transformer",
    TransformerLayer,
    stateful=False,
    check=_check_transformer,
    description="one causal pre-norm Transformer block per layer (no state across BPTT segments)",
    options=(
        EncoderOption("heads", int, 4, "attention heads (must divide every hidden size)", ge=1),
        EncoderOption("ff_multiplier", float, 4.0, "feed-forward width as a multiple of the hidden size", gt=0),
        EncoderOption("positions", str, "sinusoidal", "position encoding: sinusoidal or learned", POSITIONS),
        EncoderOption("max_length", int, 512, "longest sequence with learned positions (their table's size)", ge=1),
        EncoderOption("block_dropout", float, 0.1, "dropout on attention weights and residual branches", ge=0, lt=1),
        EncoderOption("pooling", str, "last", "sentence encoding (state): last real step's output or mean", POOLINGS),
    ),
)
register(
    "sliced",
    SlicedRNN,
    causal=False,
    stateful=False,
    description="Sliced RNN: an RNN over slices of the sequence, one over their summaries (not causal)",
    options=(
        EncoderOption("slice_length", int, 8, "steps per slice at every level below the top", ge=1),
        EncoderOption("levels", int, 2, "RNN levels: the slices' RNN, ..., the top RNN over the summaries", ge=2),
        EncoderOption("rnn", str, "gru", "RNN of every level: gru or lstm", RNN_TYPES),
        _DROPCONNECT,
    ),
)

#: The package's own encoders, as registered on import: all that a new process (a run of ``compare``) knows.
_BUILT_IN = dict(_REGISTRY)


def built_in(name: str) -> bool:
    """Whether ``name`` is the package's own encoder, known to any process that imports onlstm; one registered
    (or replaced) by the user's code exists only in the process that registered it."""
    return name in _BUILT_IN and _REGISTRY.get(name) is _BUILT_IN[name]


def check_in_new_processes(cells: Iterable[str], how: str) -> None:
    """Refuse encoders registered by the user's code for runs trained in new processes (``how`` says which and
    what to do instead): each would stop at its start, not knowing the encoder."""
    own = [c for c in cells if isinstance(c, str) and c in _REGISTRY and not built_in(c)]
    if own:
        raise EncoderError(
            f"encoder {own[0]!r} is registered by your own code, which a new process does not run, but {how}"
        )


def detach_state(state):
    """Cut the autograd history of a carried state (tensor or nested tuples of tensors)."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return state.detach()
    return tuple(detach_state(s) for s in state)


def check_length_limit(limit: int | None, longest: int, what: str, cell: str, other_fix: str = "") -> None:
    """An encoder with a length limit (``limit``: learned positions) must accept the longest sequence a run will
    read (``longest``, of ``what``): checked before the run starts, not when that sequence comes hours into it."""
    if limit is not None and longest > limit:
        raise ConfigError(
            f"{what} up to {longest} tokens but the {cell!r} encoder accepts at most {limit} (max_length); raise it "
            f"(--encoder-options max_length={longest}){other_fix}, or (transformer) use positions=sinusoidal, which "
            "has no limit"
        )
