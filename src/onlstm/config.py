"""The one typed-configuration system: config dataclasses (:class:`Config`, fields declared with :func:`option`),
typed coercion, YAML files, one flag per field, the shipped presets and the resolver :class:`Settings` (defaults <
``--config`` < flags). Every bad value is a :class:`ConfigError` naming ``section.field``; docs/design.md §4.5."""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import difflib
import functools
import math
import operator
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from .errors import OnlstmError, quote
from .files import UTF8, read_lines

#: The presets, shipped as package data (so they exist in an installed wheel, not only in a checkout).
PRESET_DIR = Path(__file__).parent / "configs"


class ConfigError(OnlstmError, ValueError):
    """A bad setting (config file, flag or saved config); the command prints it on one line and exits with 2."""


def option(
    default: Any = MISSING,
    help: str | Callable[[], str] = "",
    *,
    choices: Iterable[str] | None = None,
    flag: bool = True,
    fixed: str | None = None,
    default_text: str | None = None,
    omit_default: bool = False,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    check: Callable[[Any, str], None] | None = None,
    runtime: bool = False,
    positional: bool = False,
    repeat: bool = False,
    metavar: str | None = None,
) -> Any:
    """A dataclass field with its help text (a string, or a function called when the parser is built).

    ``choices``, the bounds ``gt``, ``ge``, ``lt``, ``le`` (>, >=, <, <=; at most one of each end; every item of a
    list; ``--help`` shows them) and ``check(value, where)`` are checked wherever a value is read
    (:func:`check_value`). ``flag=False``: settable in a file only. ``fixed``: neither in a file nor a flag, the
    text says why. ``default_text``: the default as ``--help`` shows it.
    ``omit_default``: left out of ``to_dict`` while it has its default. ``runtime``: says how a run goes, not what
    it learns (the device, a budget, reporting): a resumed run may change it (:func:`runtime_fields`). A list or
    dict default is copied. For a command's own arguments (:func:`add_command`): ``positional`` (optional when
    the default is None, one or more for a list), ``repeat`` (a list given by repeating the flag), ``metavar``;
    no default means a required flag."""
    if (gt is not None and ge is not None) or (lt is not None and le is not None):
        raise TypeError("option() takes one lower bound (gt or ge) and one upper bound (lt or le)")
    bounds = {k: v for k, v in (("gt", gt), ("ge", ge), ("lt", lt), ("le", le)) if v is not None}
    meta = {"help": help, "choices": tuple(choices) if choices else None, "flag": flag and fixed is None}
    meta.update(fixed=fixed, default_text=default_text, omit_default=omit_default, bounds=bounds, check=check)
    meta.update(runtime=runtime, positional=positional, repeat=repeat, metavar=metavar)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def runtime_option(default: Any = MISSING, help: str | Callable[[], str] = "", **kw: Any) -> Any:
    """:func:`option` with ``runtime=True``."""
    return option(default, help, runtime=True, **kw)


def runtime_fields(cls: type) -> tuple[str, ...]:
    """The fields of config class ``cls`` declared ``runtime`` (:func:`option`): the ones a resumed run may change."""
    return tuple(f.name for f in fields(cls) if f.metadata.get("runtime"))


def field_help(f: dataclasses.Field) -> str:
    h = f.metadata.get("help", "")
    return h() if callable(h) else h


@functools.cache
def _types(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else MISSING


def field_defaults(cls) -> dict:
    """``{field: default}`` of the fields of ``cls`` that a file or a flag may set (a fresh copy of a list)."""
    return {f.name: _default(f) for f in fields(cls) if not f.metadata.get("fixed") and _default(f) is not MISSING}


def _is_union(tp) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _number(value, where: str, integer: bool):
    number = value  # a numeric string too: YAML 1.1 reads ``1e-3`` as a string
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value.strip())
    if isinstance(number, (int, float)) and not isinstance(number, bool):
        if not math.isfinite(number):  # nan and inf: no setting means them (a time limit of inf is no limit: null)
            raise ConfigError(f"{where} must be a finite number, got {quote(value)}")
        if not integer:
            return float(number)
        if isinstance(number, int) or number.is_integer():
            return int(number)
    raise ConfigError(f"{where} must be {'an integer' if integer else 'a number'}, got {quote(value)}")


#: A number that may be NaN or infinite: what a run records of a validation that was not finite (a setting is never
#: one; ``float`` refuses them).
Real = typing.NewType("Real", float)


def coerce(value: Any, tp: Any, where: str) -> Any:
    """``value`` as type ``tp`` (int, float, :data:`Real`, bool, str, list[X], dict[str, X], X | None), else a
    :class:`ConfigError` naming ``where``."""
    if _is_union(tp):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        for a in rest:
            try:
                return coerce(value, a, where)
            except ConfigError:
                if len(rest) == 1:  # one type: its own message says what is wanted
                    raise
        raise ConfigError(f"{where} has the wrong type: {quote(value)}")
    if typing.get_origin(tp) is dict or tp is dict:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{where} must be a mapping of name: value, got {quote(value)}")
        item = (typing.get_args(tp) or (str, Any))[1]
        return {k: coerce(v, item, f"{where}.{k}") for k, v in value.items()}
    if typing.get_origin(tp) in (list, tuple) or tp in (list, tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {quote(value)}")
        item = (typing.get_args(tp) or (Any,))[0]
        return [coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is int or tp is float:
        return _number(value, where, tp is int)
    if tp is Real:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where} must be a number, got {quote(value)}")
    if tp is Path and isinstance(value, str):
        return Path(value)
    if tp in (bool, str) and not isinstance(value, tp):
        raise ConfigError(f"{where} must be {'true or false' if tp is bool else 'a string'}, got {quote(value)}")
    return value


def _check_value(cls, f: dataclasses.Field, value: Any, section: str) -> Any:
    where = f"{section}.{f.name}" if section else _flag(f.name)  # train.lr, or --threads without a section
    return check_value(f, _types(cls)[f.name], value, where)


#: Each bound of :func:`option`: how a message writes it and the test a value passes.
_BOUNDS = {"gt": (">", operator.gt), "ge": (">=", operator.ge), "lt": ("<", operator.lt), "le": ("<=", operator.le)}


def bounds_text(bounds: Mapping[str, float]) -> str:
    """An :func:`option`'s bounds in words: ``>= 1``, ``< 1``, with both ends an interval (``in [0, 1)``)."""
    if len(bounds) == 1:
        ((kind, value),) = bounds.items()
        return f"{_BOUNDS[kind][0]} {value}"
    low, high = (next((k, bounds[k]) for k in pair if k in bounds) for pair in (("gt", "ge"), ("lt", "le")))
    return f"in {'(' if low[0] == 'gt' else '['}{low[1]}, {high[1]}{')' if high[0] == 'lt' else ']'}"


def check_value(f: dataclasses.Field, tp: Any, value: Any, where: str) -> Any:
    """``value`` of the field ``f`` (declared with :func:`option`) as type ``tp``, with its choices, bounds and
    check; else a :class:`ConfigError` naming ``where``. Every setting's value goes through here: a file's, a
    flag's, an encoder option's."""
    value = coerce(value, tp, where)
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{where} must be one of {', '.join(map(str, choices))}, got {quote(value)}")
    bounds = f.metadata.get("bounds") or {}
    items = value if isinstance(value, list) else [] if value is None else [value]  # a list's every item
    for item in items:
        if not all(_BOUNDS[k][1](item, v) for k, v in bounds.items()):
            raise ConfigError(f"{where} must be {bounds_text(bounds)}, got {quote(item)}")
    if f.metadata.get("check"):
        f.metadata["check"](value, where)
    return value


#: No count a run keeps (steps, epochs, tokens) comes near this; a larger one is a tampered file, not a long run.
MAX_COUNT = 2**53


def count_option(default: Any = 0, help: str = "") -> Any:
    """:func:`option` of a count a run writes and reads back: a whole number from 0 to :data:`MAX_COUNT`."""
    return option(default, help, ge=0, le=MAX_COUNT)


def checked_fields(cls: type, data: Any, where: str, strict: bool = True) -> dict:
    """The values of ``data`` (JSON read back from a file: a resume file's metadata, a history row) as fields of the
    dataclass ``cls`` (declared with :func:`option`, or plainly), each checked as a setting is (:func:`check_value`):
    an object holding every field without a default (older files may lack the later fields) and, ``strict``, no
    other; else a :class:`ConfigError` naming ``where`` and the field. The one check of settings and run files."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} is {type(data).__name__}, not an object")
    by_name, hints = {f.name: f for f in fields(cls)}, _types(cls)
    if missing := [name for name, f in by_name.items() if _default(f) is MISSING and name not in data]:
        raise ConfigError(f"{where} lacks {', '.join(missing[:3])}")
    if strict and (extra := sorted(map(str, set(data) - set(by_name)))):
        raise ConfigError(f"{where} has unknown fields ({', '.join(extra[:3])})")
    return {k: check_value(f, hints[k], data[k], f"{where}.{k}") for k, f in by_name.items() if k in data}


def read_record(cls: type, data: Any, where: str, strict: bool = True) -> Any:
    """``cls`` built from the values :func:`checked_fields` accepts (the others take their defaults)."""
    return cls(**checked_fields(cls, data, where, strict))


#: ``torch.manual_seed``'s range: a larger seed overflows in torch; a negative one would seed torch like its
#: 2**64 complement while Python's ``random`` sees another number.
SEED_RANGE = (0, 2**64 - 1)
#: More threads than any machine has cores: a larger count aborts inside the OpenMP runtime.
MAX_THREADS = 1024
#: What ``threads = 0`` means wherever a command takes a thread count.
THREADS_ZERO_TEXT = "0: PyTorch's default, OMP_NUM_THREADS or one per core"


def seed_option(default: int | list[int], help: str) -> Any:
    return option(default, help, ge=SEED_RANGE[0], le=SEED_RANGE[1])


def threads_option(default: int | None, help: str = "CPU threads for the whole process", **kw) -> Any:
    return option(default, f"{help} ({THREADS_ZERO_TEXT})", ge=0, le=MAX_THREADS, **kw)


def check_device(value: str, name: str = "device") -> None:
    """A device name as :func:`onlstm.device.resolve_device` reads it (CUDA itself is checked when it runs)."""
    if not (value in ("auto", "cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit())):
        raise ConfigError(f"{name} must be auto, cpu, cuda or cuda:N, got {quote(value)}")


class Config:
    """Base of every config dataclass: fields coerced and checked at construction, ``to_dict`` / ``from_dict``.
    Subclasses set ``section`` (YAML section, error prefix), optionally ``config_kind`` (how ``from_dict`` names
    them) and put checks across fields in :meth:`validate`."""

    section = "config"
    config_kind = ""

    def __post_init__(self):
        for f in fields(self):
            setattr(self, f.name, _check_value(type(self), f, getattr(self, f.name), self.section))
        self.validate()

    def validate(self) -> None:
        """Checks across fields; raise :class:`ConfigError` naming the field."""

    def to_dict(self) -> dict:
        """The fields as plain data, less ``omit_default`` fields holding their default (a new field does not
        change the config.json of runs that do not use it)."""
        out = dataclasses.asdict(self)
        for f in fields(self):
            if f.metadata.get("omit_default") and out[f.name] == _default(f):
                del out[f.name]
        return out

    @classmethod
    def from_dict(cls, data: Mapping):
        """A config from ``to_dict``'s output (a saved run's, a merged file + flags); unknown fields are errors."""
        kind = cls.config_kind or cls.section
        _check_names(data, [f.name for f in fields(cls)], kind, f"the {kind} settings")
        missing = sorted(f.name for f in fields(cls) if _default(f) is MISSING and f.name not in data)
        if missing:
            raise ConfigError(f"the {kind} settings lack the required fields {missing}")
        return cls(**data)


@dataclass
class Runtime(Config):
    """Where and how a command runs (device, CPU threads, progress bar), declared once; none changes what is
    computed, so a resumed run may change them. Experiments' configs derive from it; a command whose settings
    are only flags adds them with :func:`add_runtime_flags`."""

    section = ""  # alone, errors name the flags (--threads); a subclass names its section (train.threads)
    config_kind = "runtime"

    device: str = runtime_option(
        "auto", "auto (CUDA when available, else the CPU), cpu, cuda or cuda:N", check=check_device
    )
    threads: int | None = threads_option(0, "CPU threads per process", runtime=True)
    progress: bool = runtime_option(True, "show a progress bar on stderr (on a terminal only)")


def _check_names(data: Any, names: list[str], label: str, what: str) -> None:
    """``data`` is a mapping whose keys are all in ``names``, else a :class:`ConfigError`."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{what} must be a mapping of field: value, got {type(data).__name__}")
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"unknown {label} fields {quote(unknown)}; known: {sorted(names)}")


def check_section(cls, data: Any, section: str) -> dict:
    """A (partial) section of a file or of flags as a dict: names checked against ``cls``, values coerced."""
    by_name = {f.name: f for f in fields(cls)}
    for name in data if isinstance(data, Mapping) else ():
        if name in by_name and by_name[name].metadata.get("fixed"):
            raise ConfigError(f"{section}.{name} {by_name[name].metadata['fixed']}; remove it from the config")
    settable = [n for n, f in by_name.items() if not f.metadata.get("fixed")]
    _check_names(data, settable, section, f"section {section!r}")
    return {k: _check_value(cls, by_name[k], v, section) for k, v in data.items()}


def presets(experiment: str | None = None) -> dict[str, Path]:
    """The shipped presets, ``{"lm/ptb-cpu": path, ...}`` sorted by name (only ``experiment``'s when given)."""
    found = {f"{p.parent.name}/{p.stem}": p for p in PRESET_DIR.glob("*/*.yaml")}
    return {n: found[n] for n in sorted(found) if experiment is None or n.split("/")[0] == experiment}


def preset_description(path: Path) -> str:
    lines = read_lines(path)
    return next((line.lstrip("#").strip() for line in lines if line.startswith("#")), "")


def resolve_config(value: str | Path, experiment: str) -> Path:
    """The file a ``--config`` value names: an existing file, else a preset of ``experiment`` by its short
    (``ptb-cpu``) or full name (``lm/ptb-cpu``), ``.yaml`` optional; else a :class:`ConfigError` listing them."""
    path = Path(value)
    if path.is_file():
        return path
    name = str(value).removesuffix(".yaml")
    mine, everything = presets(experiment), presets()
    for candidate in (f"{experiment}/{name}", name):
        if candidate in mine:
            return mine[candidate]
    names = ", ".join(n.split("/", 1)[1] for n in mine) or "none are shipped"
    if name in everything:  # the full name of another experiment's preset
        raise ConfigError(
            f"{name!r} is a preset for `onlstm {name.split('/')[0]}`, not for `onlstm {experiment}`; "
            f"{experiment} presets: {names}"
        )
    short = [n.split("/", 1)[1] for n in mine]
    near = difflib.get_close_matches(name.replace("_", "-").lower(), short, n=1, cutoff=0.6)
    guess = f"did you mean {near[0]}? " if near else ""
    there = "is not a regular file" if path.exists() else "does not exist"  # a folder, a FIFO, a device
    raise ConfigError(
        f"config file {value} {there}, and it is not a {experiment} preset either; {guess}({experiment} "
        f"presets: {names}; `onlstm presets` describes them)"
    )


def find_preset(name: str) -> tuple[str, Path]:
    """``(full name, file)`` of the preset ``name`` (``lm/ptb-cpu``, or ``ptb-cpu`` when that is unambiguous)."""
    name = name.removesuffix(".yaml")
    shipped = presets()
    matches = [n for n in shipped if n == name or n.split("/", 1)[1] == name]
    if len(matches) == 1:
        return matches[0], shipped[matches[0]]
    if matches:
        raise ConfigError(f"preset name {name!r} is ambiguous: {', '.join(matches)}; give the full name")
    raise ConfigError(f"no preset named {name!r}; presets: {', '.join(shipped)}")


def read_yaml(path: str | Path, sections: Mapping[str, type], keys: Iterable[str] = (), *, preset: str | None = None):
    """``{section: checked dict}`` of a YAML file (every section of ``sections``, a name -> config class), plus
    the other top-level ``keys`` present, as they are. ``preset``: the experiment whose preset ``path`` may name."""
    import yaml

    path = resolve_config(path, preset) if preset else Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        doc = yaml.safe_load(path.read_text(encoding=UTF8)) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {yaml_problem(exc)}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:  # the parser recurses once a level: a hostile file, not a config
        raise ConfigError(f"config file {path} nests too deep for a config (thousands of levels)") from None
    allowed = [*keys, *sections]
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path}: expected a mapping with keys {', '.join(allowed)}")
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise ConfigError(f"config file {path}: unknown keys {unknown}; allowed: {', '.join(allowed)}")
    out = {k: doc[k] for k in keys if k in doc}
    try:
        out.update({name: check_section(cls, doc.get(name) or {}, name) for name, cls in sections.items()})
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    return out


def yaml_problem(exc: Exception) -> str:
    """A YAML parser's error on one line that starts with what is wrong: ``line 3, column 5: found ...``."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if not problem:
        return " ".join(str(exc).split())
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context = getattr(exc, "context", None)
    return where + problem + (f" ({context})" if context else "")


@dataclass
class Settings:
    """The one resolver of every command's settings: dataclass defaults < the ``--config`` file < flags.
    ``given``: per section, what the user set (checked); ``keys``: the file's other top-level values; ``typed``:
    per section, what the flags set (a flag may be refused where the same value in a preset is passed over)."""

    classes: dict[str, type]
    given: dict[str, dict]
    keys: dict
    typed: dict[str, dict]

    @classmethod
    def resolve(
        cls,
        classes: Mapping[str, type],
        config: str | Path | None = None,
        flags: argparse.Namespace | Mapping[str, Mapping] | None = None,
        *,
        experiment: str | None = None,
        keys: Iterable[str] = (),
    ) -> Settings:
        """``config``: a YAML file or a preset of ``experiment``; ``flags``: the parsed command line (of
        :func:`add_flags`) or ``{section: {field: value}}``."""
        keys = tuple(keys)
        doc = read_yaml(config, classes, keys, preset=experiment) if config is not None else {}
        given, typed = {}, {}
        for name, section_cls in classes.items():
            raw = flags_given(flags, name) if isinstance(flags, argparse.Namespace) else (flags or {}).get(name)
            typed[name] = check_section(section_cls, raw or {}, section_cls.section)
            given[name] = {**doc.get(name, {}), **typed[name]}
        return cls(dict(classes), given, {k: doc[k] for k in keys if k in doc}, typed)

    def build(self, section: str, **values: Any) -> Any:
        """The config of ``section``: its defaults < what was given < ``values``."""
        return self.classes[section].from_dict({**self.given[section], **values})


def flags_given(args: argparse.Namespace, section: str) -> dict:
    """The fields of ``section`` set on the command line (flags added by :func:`add_flags`)."""
    prefix = section + "."
    return {k[len(prefix) :]: v for k, v in vars(args).items() if k.startswith(prefix) and v is not None}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
