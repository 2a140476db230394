"""The errors meant for users (:class:`OnlstmError`, printed by :func:`onlstm.cli.main` as one line, exiting with
its ``exit_code``; anything else is a bug and keeps its traceback) and the exit statuses (docs/design.md §4.7)."""

from __future__ import annotations

import errno
from pathlib import Path

EXIT_OK = 0
EXIT_FINDING = 1  # good input, negative finding (labels that disagree, no network): not "used wrongly"
EXIT_BAD_INPUT = 2  # a missing or malformed file, a foreign checkpoint, a setting out of range, a missing extra
EXIT_DIVERGED = 3  # the loss became NaN or infinite (TrainingDiverged); the last good checkpoint is kept
EXIT_WRITE_FAILED = 4  # the disk refused a write (WriteError); the file there before is unchanged
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM or SIGHUP (the trainers save a resumable checkpoint first)


def leave_closed_terminal(signum: int) -> None:
    """After a SIGHUP the terminal is gone and every write to it fails (EIO): what went to it goes to the null
    device from now on, so that the command can still stop as asked, its files saved. Files and pipes are kept."""
    import os
    import signal

    if signum != getattr(signal, "SIGHUP", None):
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    for fd in (1, 2):
        if os.isatty(fd):
            os.dup2(null, fd)
    os.close(null)


class OnlstmError(Exception):
    """Base of every error meant for users."""

    exit_code: int = EXIT_BAD_INPUT


class InputError(OnlstmError, ValueError):
    """Bad command input (options, input files) that no more specific class describes."""


class UserNote(UserWarning):
    """Something a user should know that is not an error (e.g. a default chosen for them), issued with
    ``warnings.warn``; ``onlstm`` commands print it as one line, ``onlstm <command>: note: <message>``."""


class RunDirError(OnlstmError, ValueError):
    """The run directory cannot be used as asked: it holds another run (or an interrupted one) without
    ``--resume``, it is locked by a training in progress, or its settings do not fit."""


class TrainingDiverged(OnlstmError, RuntimeError):
    """A training loss became NaN or infinite; the run stopped without saving the diverged weights."""

    exit_code = EXIT_DIVERGED


#: The experiments' third-party packages, by import name (value: the distribution pip installs). They are not
#: dependencies of the layer: ``pip install onlstm`` leaves them out, ``pip install 'onlstm[experiments]'`` adds
#: them (pyproject.toml's ``experiments`` extra, which tests/test_light_core.py keeps equal to this table).
EXPERIMENT_PACKAGES = {"matplotlib": "matplotlib", "nltk": "nltk", "yaml": "pyyaml", "tqdm": "tqdm"}
INSTALL_EXPERIMENTS = "pip install 'onlstm[experiments]'"


class MissingExtra(OnlstmError, ImportError):
    """A command needs a package of the ``experiments`` extra that is not installed."""


#: onlstm's own dependencies (pyproject.toml) that pip may have left out (an install with --no-deps, a package
#: removed since): their import name -> their name on PyPI.
CORE_PACKAGES = {"safetensors": "safetensors", "numpy": "numpy", "ninja": "ninja"}


def missing_extra(exc: ImportError) -> MissingExtra | None:
    """``exc`` as a :class:`MissingExtra` when what failed to import is an experiments' package or one of onlstm's
    own dependencies, else None."""
    name = (exc.name or "").split(".")[0]
    if name in CORE_PACKAGES:
        return MissingExtra(f"needs {CORE_PACKAGES[name]}, a dependency of onlstm, which is not installed: "
                            f"pip install {CORE_PACKAGES[name]}")  # fmt: skip
    if name not in EXPERIMENT_PACKAGES:
        return None
    return MissingExtra(f"needs {EXPERIMENT_PACKAGES[name]}, which is not installed: {INSTALL_EXPERIMENTS}")


_WHY = {
    errno.ENOSPC: "the disk is full",
    errno.EFBIG: "over the file-size limit, see ulimit -f",
    getattr(errno, "EDQUOT", -1): "the disk quota is used up",
    errno.EROFS: "a read-only file system",
}
#: OS errors that say the disk (not the input, not the network) refused a write.
DISK_FULL_ERRNOS = frozenset(_WHY) - {-1}


class WriteError(OnlstmError, OSError):
    """A file could not be written; the message names it and the OS error. Still an :class:`OSError` (``errno``,
    ``strerror``, ``filename`` set)."""

    exit_code = EXIT_WRITE_FAILED

    def __init__(self, path: str | Path | None, cause: OSError, atomic: bool = True):
        reason = cause.strerror or str(cause)
        super().__init__(cause.errno, reason, None if path is None else str(path))
        name = errno.errorcode.get(cause.errno) if cause.errno else None
        why = _WHY.get(cause.errno) if cause.errno else None
        self.message = (
            f"cannot write{'' if path is None else ' ' + str(path)}: {reason}"
            + (f" ({name}{', ' + why if why else ''})" if name else "")
            # only atomic_write can promise this; a write elsewhere (``atomic=False``) may have left a part
            + ("; nothing was replaced (the file there before, if any, is unchanged)" if atomic else "")
        )

    @classmethod
    def from_os_error(cls, exc: OSError) -> WriteError | None:
        """``exc``, raised by a write outside :mod:`onlstm.files`, as a :class:`WriteError` when the disk refused it."""
        return cls(exc.filename, exc, atomic=False) if exc.errno in DISK_FULL_ERRNOS else None

    def __str__(self) -> str:
        return self.message


def command_error(exc: BaseException) -> OnlstmError:
    """``exc`` as an :class:`OnlstmError` with the same message (a library's ``ValueError`` on bad input)."""
    if isinstance(exc, OnlstmError):
        return exc
    return InputError(str(exc))


def exception_line(exc: BaseException, limit: int = 200) -> str:
    """``"Type: first line of the message"`` (at most ``limit`` characters of it)."""
    return f"{type(exc).__name__}: {first_line(exc, limit)}"


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of ``exc``'s message, at most ``limit`` characters ('' when it has none)."""
    return (str(exc).strip().splitlines() or [""])[0][:limit]


#: The most characters of a message that a command prints (a value quoted in full could be megabytes).
MESSAGE_LIMIT = 2000


def cap(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` on one line of at most ``limit`` characters."""
    line = " ".join(message.split("\n"))
    return line if len(line) <= limit else line[: limit - 25] + f" ... ({len(line):,} characters)"


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun`` for a message, the noun plural unless there is one: ``counted(1, "sentence")``."""
    return f"{n} {noun}{'s' * (n != 1)}"


def quote(value: object, limit: int = 200) -> str:
    """``repr(value)`` for a message, at most about ``limit`` characters, built without the whole repr (a YAML
    alias bomb's repr would not fit in memory)."""
    import reprlib

    class Shorter(reprlib.Repr):
        def repr_int(self, x: int, level: int) -> str:
            # repr() of an integer of thousands of digits raises (Python's limit on digits) or takes long
            return (
                super().repr_int(x, level) if x.bit_length() < 4 * limit else f"<an integer of {x.bit_length()} bits>"
            )

    shorter = Shorter()
    shorter.maxlevel, shorter.maxstring, shorter.maxother, shorter.maxlong = 3, limit, limit, limit
    shorter.maxlist = shorter.maxtuple = shorter.maxdict = shorter.maxset = 8
    text = shorter.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
