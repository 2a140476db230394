"""Settings as command-line flags: one flag per field of a config dataclass (:func:`add_flags`; its bounds, choices
and default in ``--help``), the commands and groups of ``onlstm`` (:func:`add_command`, :func:`add_group`) and the
way back from saved settings to the command that sets them (:func:`command_flags`, :func:`command_line`). The
settings themselves are declared and resolved in :mod:`onlstm.config`; docs/design.md §4.5."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, fields
from typing import Any

from .config import (
    ConfigError,
    Runtime,
    Settings,
    _default,
    _flag,
    _is_union,
    _types,
    bounds_text,
    check_value,
    field_help,
)
from .errors import EXIT_BAD_INPUT


class OneLineParser(argparse.ArgumentParser):
    """argparse with the commands' rule for a refusal: one line, exit 2 (docs/cli.md), the usage left to --help
    (argparse prints it first, two to twenty lines above the one that says what is wrong). Sub-commands' parsers
    are made by this class too (``add_subparsers`` uses the parent's)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _shown_default(f: dataclasses.Field) -> str:
    d = _default(f)
    if f.metadata.get("default_text"):
        return f.metadata["default_text"]
    if isinstance(d, bool):
        return "yes" if d else "no"
    if isinstance(d, dict):
        d = [f"{k}={v}" for k, v in d.items()] or None  # an empty mapping shows as none
    return " ".join(map(str, d)) if isinstance(d, list) else "none" if d is None else str(d)


def _key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``, the value read as a YAML scalar (``false``, ``3``, ``relu``)."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), yaml.safe_load(value)
    except (yaml.YAMLError, RecursionError):  # not a YAML scalar (or nested thousands deep): the text as given
        return key.strip(), value


class _MappingAction(argparse.Action):
    """Collects ``KEY=VALUE`` pairs (the flag may be repeated) into one dict."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, {**(getattr(namespace, self.dest) or {}), **dict(values)})


def _add_flag(group, f: dataclasses.Field, tp: Any, dest: str, plain: bool = False) -> None:
    """The argument of field ``f`` (type ``tp``). A section's flag defaults to None (:func:`flags_given` then
    returns only what was typed) and is checked with the file's values; a command's own argument (``plain``)
    holds its default and is checked as it is read, by :func:`check_value` too."""
    meta, default = f.metadata, _default(f)
    text, shown = field_help(f), default is not MISSING and not (plain and (default is None or default is False))
    notes = [f"default: {_shown_default(f)}"] if shown else []
    notes += [bounds_text(meta["bounds"])] if meta.get("bounds") else []  # what a value may be, as errors say it
    if notes:
        text = f"{text} ({'; '.join(notes)})" if text else "; ".join(notes)
    kw: dict = {"help": text.replace("%", "%%")}  # argparse %-formats help strings
    if plain:
        kw.update(default=None if default is MISSING else default)
        if not meta.get("positional"):
            kw.update(dest=dest, required=default is MISSING)
    else:
        kw.update(dest=dest, default=None)
    if _is_union(tp):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    metavar = lambda tp: {int: "N", float: "X"}.get(tp, None if plain else "NAME")  # a section names each type
    if tp is bool:
        kw["action"] = "store_true" if plain and default is False else argparse.BooleanOptionalAction
    elif typing.get_origin(tp) is dict:
        kw.update(nargs="+", type=_key_value, metavar="KEY=VALUE", action=_MappingAction)
    elif typing.get_origin(tp) in (list, tuple):
        tp = typing.get_args(tp)[0]
        kw.update({"action": "append"} if meta.get("repeat") else {"nargs": "+"})
        kw.update(type=_reader(f, tp, dest, plain), metavar=meta.get("metavar") or metavar(tp))
    else:
        kw.update(type=_reader(f, tp, dest, plain), choices=meta.get("choices"))
        kw.update(metavar=None if meta.get("choices") else meta.get("metavar") or metavar(tp))
        if meta.get("positional") and default is None:
            kw["nargs"] = "?"
    names = [f.name] if meta.get("positional") else [_flag(f.name)]
    group.add_argument(*names, **kw).option_field = f  # the test of the one option system reads it


def _reader(f: dataclasses.Field, tp: Any, dest: str, plain: bool) -> Any:
    """An argparse ``type`` for field ``f``: a command's own argument is checked as it is read."""
    if not plain or (tp is str and not f.metadata.get("check")):
        return tp  # a section's flags are checked with the file's values (Settings.resolve)

    def read(text: str) -> Any:
        where = dest if f.metadata.get("positional") else _flag(dest)
        try:
            return check_value(f, tp, text, where)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(where + " ")) from None

    read.__name__ = getattr(tp, "__name__", "value")  # argparse names it in "invalid int value"
    return read


def add_flags(
    parser: argparse.ArgumentParser, cls, section: str, title: str | None = None, skip: Iterable[str] = ()
) -> None:
    """One flag per field of ``cls`` (less ``fixed``/``flag=False`` fields and ``skip``), in a group ``title``.
    Flags default to None, so :func:`flags_given` returns only what the user typed."""
    group = parser.add_argument_group(title or section)
    # where and how it runs, apart from what it computes
    runtime = parser.add_argument_group("runtime") if issubclass(cls, Runtime) and cls is not Runtime else group
    hints, skip, own = _types(cls), set(skip), {f.name for f in fields(Runtime)}
    for f in fields(cls):
        if f.metadata.get("flag", True) and f.name not in skip:  # option() gives a fixed field no flag
            _add_flag(runtime if f.name in own else group, f, hints[f.name], f"{section}.{f.name}")


def add_runtime_flags(parser: argparse.ArgumentParser, cls: type = Runtime, skip: Iterable[str] = ()) -> None:
    """``--device``, ``--threads``, ``--progress`` (less ``skip``); :func:`runtime_settings` reads them."""
    add_flags(parser, cls, "runtime", "runtime", skip)


def runtime_settings(args: argparse.Namespace, cls: type = Runtime) -> Any:
    """The :class:`Runtime` (or ``cls``) that the flags of :func:`add_runtime_flags` set."""
    return Settings.resolve({"runtime": cls}, flags=args).build("runtime")


def add_command(sub, name: str, func: Callable, *arguments: type) -> argparse.ArgumentParser:
    """Sub-command ``name`` running ``func(args)``, with one argument per field of the dataclasses ``arguments``
    (declared with :func:`option`; ``args.<field>`` holds its default, or it is required when it has none);
    ``func``'s docstring gives the help (first paragraph) and the ``--help`` description (the rest)."""
    summary, _, details = inspect.cleandoc(func.__doc__ or "").partition("\n\n")
    summary = " ".join(summary.split()).replace("%", "%%")  # argparse %-formats help, not descriptions
    p = sub.add_parser(name, help=summary, description=details or None)
    for f, tp in ((f, _types(cls)[f.name]) for cls in arguments for f in fields(cls)):
        _add_flag(p, f, tp, f.name, plain=True)
    p.set_defaults(func=func)
    return p


def add_group(subparsers, name: str, help: str, description: str):
    """``onlstm NAME SUB ...``: a command of sub-commands; returns the sub-parsers action to add them to."""
    return subparsers.add_parser(name, help=help, description=description).add_subparsers(required=True)


def command_flags(cls, values: Mapping, defaults: bool = False) -> list[str]:
    """The flags that set ``values`` over ``cls``'s defaults (the inverse of :func:`flags_given`); fields with no
    flag are left out, and so are default values unless ``defaults`` (a typed default overrides a --config file's
    value: it is part of the command)."""
    out: list[str] = []
    for f in fields(cls):
        value = values.get(f.name)
        if value is None or (value == _default(f) and not defaults) or not f.metadata.get("flag", True):
            continue  # a fixed field has no flag
        if isinstance(value, bool):
            out.append(_flag(f.name) if value else _flag("no_" + f.name))
        elif isinstance(value, dict):
            out += [_flag(f.name), *(f"{k}={v}" for k, v in value.items())]
        else:
            out += [_flag(f.name), *map(str, value if isinstance(value, (list, tuple)) else [value])]
    return out


def command_line(words: list[str], config: Mapping, classes: Mapping[str, type]) -> str:
    """The shell command ``words`` plus the flags that set each section (``classes``) of a saved ``config``."""
    import shlex

    return shlex.join(words + [f for name, cls in classes.items() for f in command_flags(cls, config.get(name) or {})])
