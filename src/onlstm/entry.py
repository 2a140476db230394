"""The ``onlstm`` command's entry point (``python -m onlstm`` and the console script): it imports nothing but
``sys`` before it is ready for Ctrl-C, so that an interruption at any point of start-up (torch's import takes
seconds) ends as every other does: ``onlstm <command>: interrupted``, exit 130, no traceback (docs/cli.md)."""

import sys

EXIT_INTERRUPTED = 130  # onlstm.errors.EXIT_INTERRUPTED, not imported: nothing may come before the handler


def main(argv: list[str] | None = None) -> int:
    try:
        from .cli import main as run

        return run(argv)
    except KeyboardInterrupt:  # before (or after) the command's own handling in onlstm.cli.main
        words = sys.argv[1:] if argv is None else argv
        name = " ".join(["onlstm", *(w for w in words[:2] if not w.startswith("-"))])
        try:
            print(f"{name}: interrupted", file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed: the status says it
            pass
        return EXIT_INTERRUPTED
