"""The ``onlstm`` command's entry point (``python -m onlstm`` and the console script): it imports nothing heavy
before it is ready for Ctrl-C, SIGTERM and SIGHUP, so that an interruption at any point of start-up (torch's import takes
seconds) ends as every other does: ``onlstm <command>: interrupted``, exit 130, no traceback (docs/cli.md)."""

import _signal as signal  # the C module: the signal module imports enum, which takes milliseconds
import os
import sys

from .stops import end_signals, held_signals, stop_signals

EXIT_INTERRUPTED = 130  # onlstm.errors.EXIT_INTERRUPTED, not imported: nothing may come before the handlers


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the command in ``argv`` (default: this process's command line, which owns the process's signals)."""
    own = argv is None
    if own:  # SIGTERM as Ctrl-C from the first moment (onlstm.cli and the trainers put this back when they end)
        for signum in end_signals():
            signal.signal(signum, _interrupt)
    try:
        if own:
            _fill_closed_fds()
            _start_up()
        from .cli import main as run

        rc = run(argv)
    except KeyboardInterrupt:  # before (or after) the command's own handling in onlstm.cli.main
        words = sys.argv[1:] if argv is None else argv
        name = " ".join(["onlstm", *(w for w in words[:2] if not w.startswith("-"))])
        try:
            print(f"{name}: interrupted", file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed: the status says it
            pass
        rc = EXIT_INTERRUPTED
    except SystemExit as stop:  # argparse's usage errors and --help: over too, so a late signal changes nothing
        if own and (stop.code is None or isinstance(stop.code, int)):  # a text code is printed by Python
            _leave(stop.code or 0)
        raise
    if own:
        _leave(rc)
    return rc


def _fill_closed_fds() -> None:
    """Put /dev/null on a standard descriptor the shell closed (``<&-``, ``>&-``): else the next file opened takes
    its number, and a child (the C++ kernel's build) or a library writing to "standard output" would write into
    that file. ``sys.stdin``/``sys.stdout`` stay None, as Python set them: onlstm.cli tells the user."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def _start_up() -> None:
    """Import what every command imports (torch, the experiments' modules) with Ctrl-C and SIGTERM held back until
    it is done, then act on them. An import that fails is left to onlstm.cli, which reports it."""
    with held_signals():
        import importlib

        from . import cli

        if cli.named_command(sys.argv[1:]) is None:
            return  # the list of commands (--help) or a refusal: nothing heavy to import
        for name in cli.SUBCOMMAND_MODULES:
            try:
                importlib.import_module(name)
            except Exception:  # a missing extra, a bug: reported by the command, as it is without this
                pass


def _leave(rc: int) -> None:
    """The command is over: a signal from now on changes nothing. After an interruption the process ends here:
    a Ctrl-C that met code torch runs through ``PyRun_*`` while it is imported leaves CPython's "unhandled
    KeyboardInterrupt" flag set, and the interpreter would then kill itself with SIGINT instead of exiting 130."""
    for signum in stop_signals():
        signal.signal(signum, signal.SIG_IGN)
    # under torchrun the process group is gone (runs.dist.teardown), but gloo's threads can still meet the
    # interpreter's finalization and abort the process ("terminate called without an active exception", exit
    # -6, seen about once in 20 two-process runs): a finished rank ends here, its streams flushed
    if rc == EXIT_INTERRUPTED or os.environ.get("WORLD_SIZE", "1") not in ("", "0", "1"):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(rc)
