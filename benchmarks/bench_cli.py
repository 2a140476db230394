"""What the benchmark scripts share on their command line: argparse types for counts, and :func:`command`, which
makes a user's error (an :class:`~onlstm.errors.OnlstmError`: a preset that does not exist, a hidden size the chunk
size does not divide, a missing folder) one line on stderr with its exit status (2 for bad input, 4 for a refused
write; src/onlstm/errors.py), where it was a traceback. Anything else is a bug and keeps its traceback."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onlstm.errors import EXIT_INTERRUPTED, OnlstmError, cap
from onlstm.flags import OneLineParser

#: The suffix of a row's label timed under torch.compile (``--compile`` of layer_speed.py and lm_speed.py).
COMPILED = "+compile"


def parser(description: str | None) -> argparse.ArgumentParser:
    """A script's argument parser: a refusal is one line and exit 2, as the commands' (the usage left to --help)."""
    return OneLineParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)


def positive_int(text: str) -> int:
    """An argparse ``type=`` for a count that must be at least 1 (repeats, steps, threads, words)."""
    return _int_at_least(text, 1)


def nonnegative_int(text: str) -> int:
    """An argparse ``type=`` for a count that may be 0 (warm-up steps)."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:  # argparse prints it as one line, "error: argument --repeats: ...", exit 2
        raise argparse.ArgumentTypeError(f"must be an integer of at least {low}, got {text!r}")
    return value


def command(main: Callable[..., int] | None = None, *, interrupted: str = "interrupted") -> Any:
    """``main(argv)`` of a script with a user's error printed as ``SCRIPT: message`` (one line) and its exit status
    returned, and Ctrl-C as exit 130 (``SCRIPT: interrupted``, or the script's own words), so that tests calling
    ``main`` see what a user sees. ``@command`` or ``@command(interrupted=...)``."""
    if main is None:
        return functools.partial(command, interrupted=interrupted)

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except OnlstmError as exc:
            print(f"{script_name(main)}: {cap(str(exc))}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            print(f"{script_name(main)}: {interrupted}", file=sys.stderr)
            return EXIT_INTERRUPTED

    return run


def script_name(main: Callable[..., int]) -> str:
    """The file name of the script ``main`` belongs to (``layer_speed.py``), run as a script or imported."""
    module = sys.modules.get(main.__module__)
    return Path(getattr(module, "__file__", None) or sys.argv[0]).name
