"""Issue 35's fault-injection harness: bad input for every option of every command, GENERATED from the parser
(``onlstm.cli.build_parser``: the config fields' flags of ``onlstm.flags.add_flags`` and the commands' own
argument dataclasses), so that a new option is covered the day it is added. Each case must end as docs/cli.md promises:
one line on stderr, a documented exit status, no traceback, and nothing written.

The commands never get far: their inputs are missing paths, and any command that gets past its checks to the
point of writing (a lock taken, a folder published) is stopped there and counted as a failure when the value was
one no option may take (NaN, infinity, garbage text)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import sys
from pathlib import Path

import pytest

import onlstm.cli
import onlstm.files
from onlstm.cli import build_parser, main
from onlstm.errors import EXIT_BAD_INPUT, EXIT_FINDING
from onlstm.lock import RunLock

#: Values no number option accepts: each must be refused with exit 2, naming the option.
NOT_A_NUMBER = ["nan", "inf", "-inf", "1e400", "x", ""]
#: Values that may be legal for some option: whatever the command does, it must not crash.
EXTREME = ["-1", "0", "1e30", "99999999999999999999999"]
#: Commands that would reach the network with placeholders: given a local, missing URL instead.
EXTRA = {("data", "download"): ["--url", "file:///nonexistent/onlstm-harness"]}


class ReachedWork(Exception):
    """The command got past every check and started to write."""


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(words, parser)`` of every runnable command (each parser once: the old aliases share theirs)."""
    seen: set[int] = set()

    def walk(p, words):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            if id(p) not in seen:
                seen.add(id(p))
                yield words, p
            return
        for name, child in subs[0].choices.items():
            yield from walk(child, (*words, name))

    yield from walk(parser, path)


def _placeholder(action: argparse.Action, missing: Path) -> list[str]:
    """Arguments that satisfy ``action`` and name nothing that exists."""
    value = (action.choices and list(action.choices)[0]) or str(missing)
    if action.option_strings:
        return [action.option_strings[0], str(value)]
    return [str(value)] if action.nargs not in ("*", "?") else []


def _base_argv(words, parser, missing: Path) -> list[str]:
    argv = list(words)
    for action in parser._actions:
        if action.required or (not action.option_strings and action.dest != "help"):
            argv += _placeholder(action, missing)
    return argv + EXTRA.get(tuple(words), [])


def _number_options(parser) -> list[argparse.Action]:
    """Options that take a number: by their type, or a config field's (``N``/``X`` metavar)."""
    found = []
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0 or action.choices:
            continue
        kind = getattr(action.type, "__name__", "")
        if action.metavar in ("N", "X") or kind in ("int", "float"):
            found.append(action)
    return found


def _cases():
    cases = []
    for words, parser in _commands(build_parser()):
        for action in _number_options(parser):
            cases.append(
                pytest.param(words, action.option_strings[0], id=f"{' '.join(words)} {action.option_strings[0]}")
            )
    return cases


@pytest.fixture
def harness(tmp_path, monkeypatch):
    """Run in an empty folder; stop any command that starts to write."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)

    def stop(*args, **kwargs):
        raise ReachedWork

    monkeypatch.setattr(RunLock, "acquire", stop)
    original = onlstm.files.publish_folder  # before the loop patches onlstm.files itself
    for module in [m for name, m in sys.modules.items() if name.startswith("onlstm")]:
        if getattr(module, "publish_folder", None) is original:
            monkeypatch.setattr(module, "publish_folder", stop)
    monkeypatch.setenv("ONLSTM_NO_EXTENSION", "1")  # no kernel build inside the harness
    monkeypatch.setattr(
        onlstm.cli, "build_parser", lambda argv=None: _parser()
    )  # built once: parsing leaves it as it was
    return work


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The whole command line's parser, built once for the ~3,000 commands of this file (each build ~30 ms)."""
    return build_parser()


def run(argv: list[str]) -> tuple[int | None, str, bool]:
    """``(exit status, stderr, reached work)``; argparse's own refusals exit through SystemExit."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
        except ReachedWork:
            return None, err.getvalue(), True
    return rc, err.getvalue(), False


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize(("words", "flag"), _cases())
def test_every_number_option_refuses_what_is_not_a_number(harness, words, flag):
    base = _base_argv(words, build_parser_for(words), harness / "missing")
    for value in NOT_A_NUMBER:
        rc, err, reached = run([*base, flag, value])
        assert not reached, f"{' '.join(words)} {flag} {value!r} was accepted and the command started writing"
        assert "Traceback" not in err, err[-3000:]
        assert rc == EXIT_BAD_INPUT, (value, rc, err[-2000:])
        line = _one_line(err)
        assert err.strip() == line.strip(), f"{flag} {value!r}: more than one line (argparse's usage?): {err[:300]}"
        field = flag.lstrip("-").replace("-", "_")
        assert flag in line or field in line, f"{flag} {value!r}: the message does not name the option: {line}"
        assert len(line) < 1000, line[:300]
    assert list(harness.iterdir()) == [], "a refused command left files behind"


@pytest.mark.parametrize(("words", "flag"), _cases())
def test_extreme_numbers_never_crash(harness, words, flag):
    base = _base_argv(words, build_parser_for(words), harness / "missing")
    for value in EXTREME:
        rc, err, reached = run([*base, flag, value])
        assert "Traceback" not in err, (value, err[-3000:])
        assert reached or rc in (0, EXIT_BAD_INPUT, EXIT_FINDING), (value, rc, err[-2000:])
        if rc == EXIT_BAD_INPUT:
            assert len(_one_line(err)) < 1000


def build_parser_for(words: tuple[str, ...]) -> argparse.ArgumentParser:
    for found, parser in _commands(_parser()):
        if found == words:
            return parser
    raise KeyError(words)
