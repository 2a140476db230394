"""The errors meant for users, and the exit-status convention of the ``onlstm`` command.

Every error whose message is written for the person at the keyboard (a missing file, a corrupt checkpoint,
a bad setting) derives from :class:`OnlstmError`. The command has ONE handler (:func:`onlstm.cli.main`):
an :class:`OnlstmError` raised anywhere under a sub-command is printed as ``onlstm <command>: <message>``
on stderr, without a traceback, and the process exits with the error's :attr:`~OnlstmError.exit_code`.
Anything else is a bug and keeps its traceback.

Exit statuses (the same for every sub-command):

* ``0`` -- the command did what was asked;
* ``1`` -- the command ran on good input and reports a negative finding: ``onlstm logic check`` found
  labels that disagree with the truth sets or misfiled lines; ``onlstm data download`` could not reach
  the network. A script can tell "the data is wrong" from "the command was used wrongly";
* ``2`` (:data:`EXIT_BAD_INPUT`) -- bad input: a file that is missing or malformed, a checkpoint of
  another kind, a setting out of range. The message names the problem and how to fix it. A command
  whose optional dependencies are not installed (:class:`MissingExtra`) exits 2 too, naming the extra;
* ``3`` (:data:`EXIT_DIVERGED`) -- a training stopped because its loss became NaN or infinite
  (:class:`TrainingDiverged`): the input was valid but the settings (learning rate, clipping) made the
  run diverge. Nothing is saved from the diverged weights; the last good checkpoint is kept;
* ``130`` (:data:`EXIT_INTERRUPTED`) -- interrupted by Ctrl-C (or SIGTERM for the trainers, which save a
  resumable checkpoint first), as a shell reports a process killed by SIGINT.

Most classes keep :class:`ValueError` (or :class:`RuntimeError`) as a second base, so code written
before this module existed (``except ValueError``) still catches them.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
EXIT_INTERRUPTED = 130


class OnlstmError(Exception):
    """Base of every error meant for users: the CLI prints its message (no traceback) and exits with
    :attr:`exit_code`."""

    exit_code: int = EXIT_BAD_INPUT


class InputError(OnlstmError, ValueError):
    """Bad command input (options, input files) that no more specific class describes."""


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


def missing_extra(exc: ImportError) -> MissingExtra | None:
    """``exc`` as a one-line :class:`MissingExtra` when what failed to import is one of the experiments'
    packages; None for any other import error (a bug, or a broken install: it keeps its traceback)."""
    name = (exc.name or "").split(".")[0]
    if name not in EXPERIMENT_PACKAGES:
        return None
    return MissingExtra(f"needs {EXPERIMENT_PACKAGES[name]}, which is not installed: {INSTALL_EXPERIMENTS}")


def command_error(exc: BaseException) -> OnlstmError:
    """``exc`` as an :class:`OnlstmError` with the same message, for the command boundary: a plain
    ``ValueError`` (or ``OSError``) raised by library code on bad user input becomes an error the CLI
    reports without a traceback. An :class:`OnlstmError` is returned unchanged."""
    if isinstance(exc, OnlstmError):
        return exc
    return InputError(str(exc))
