"""Every argument of every command is a dataclass field declared with ``onlstm.config.option`` (its default,
bounds and help in one place, read by the parser, the YAML files, the run header and the docs): a flag added to a
parser any other way fails here (docs/design.md §4.5)."""

from __future__ import annotations

import argparse
import dataclasses

from onlstm.cli import build_parser
from support import command_parsers

#: Arguments that are no setting: argparse's own.
NOT_SETTINGS = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)


def undeclared(parser: argparse.ArgumentParser) -> list[str]:
    """``"command dest"`` of every argument not read from an ``option()`` field of the same name."""
    found = []
    for words, p in command_parsers(parser):
        if p.prefix_chars == "\0":  # a stand-in for a command whose extra is not installed (onlstm.cli)
            continue
        for action in p._actions:
            if isinstance(action, NOT_SETTINGS):
                continue
            f = getattr(action, "option_field", None)
            declared = isinstance(f, dataclasses.Field) and "help" in f.metadata  # option() sets the metadata
            if not (declared and action.dest.rpartition(".")[2] == f.name):  # model.chunk_size, or checkpoint
                found.append(f"{' '.join(words)} {action.dest}")
    return found


def test_every_argument_of_every_command_is_an_option_field():
    parser = build_parser()
    commands = [
        w for w, p in command_parsers(parser) if not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)
    ]
    assert len(commands) > 20  # every command was walked, not only the top level
    assert undeclared(parser) == []


def test_a_flag_added_outside_the_option_system_is_found():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    evaluate = next(a for a in sub.choices["lm"]._actions if isinstance(a, argparse._SubParsersAction)).choices["eval"]
    evaluate.add_argument("--raw", type=int, default=3, help="declared by hand")
    evaluate.add_argument_group("more").add_argument("--raw-too", action="store_true")
    assert undeclared(parser) == ["lm eval raw", "lm eval raw_too"]


def test_an_encoder_option_is_checked_as_every_setting_is():
    import pytest

    from onlstm import encoders as E

    width = E.EncoderOption("width", int, 8, "units per slice", ge=1, le=64)
    spec = E.register("option-probe", lambda i, h, width=8: None, options=(width,))
    try:
        assert spec.resolve({}) == {"width": 8} and spec.resolve({"width": "16"}) == {"width": 16}
        for bad, why in (
            (0, r"must be in \[1, 64\], got 0"),
            ("nan", "must be a finite number"),
            (2.5, "must be an integer"),
        ):
            with pytest.raises(E.EncoderError, match=f"option-probe option width {why}"):
                spec.resolve({"width": bad})
    finally:
        E.unregister("option-probe")
