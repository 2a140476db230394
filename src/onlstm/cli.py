"""The ``onlstm`` command."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import os
import signal
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from .config import option
from .errors import (
    EXIT_INTERRUPTED,
    InputError,
    OnlstmError,
    UserNote,
    WriteError,
    cap,
    first_line,
    leave_closed_terminal,
    missing_extra,
)
from .files import json_text
from .flags import OneLineParser, add_command, add_flags, add_group
from .stops import end_signals


def _cmd_demo(args) -> int:
    """grammar corpus -> ON-LSTM LM -> induced trees vs gold and baselines"""
    from .config import Settings
    from .demo import DemoConfig, run

    run(Settings.resolve({"demo": DemoConfig}, args.config, args, experiment="demo").build("demo"), as_json=args.json)
    return 0


def _cmd_info(args) -> int:
    """versions and which layer kernels are available (and why not)"""
    import torch

    from . import __version__
    from .device import cpu_line
    from .nn import cpp_gemm, selfcheck
    from .nn.kernels import kernel_status, load_kernel

    kernels = kernel_status()
    info = {"onlstm": __version__, "torch": torch.__version__, "threads": torch.get_num_threads()}
    # the CPU, and what torch's own kernels use of it: an instruction-set limit set in the environment (imitating
    # another CPU, docs/layer.md) changes every speed figure, so it is said
    info["cpu"] = cpu_line(limits=False)  # the limits have their own field
    info["isa_limits"] = cpp_gemm.isa_limits() or "none"
    for name in ("cpp", "triton"):  # triton: the CUDA path (docs/layer.md, "The Triton path")
        info[f"{name}_kernel"], info[f"{name}_kernel_error"] = kernels[name]["available"], kernels[name]["reason"]
    info["cpp_build"] = getattr(load_kernel("cpp"), "build", None)  # native or portable (docs/layer.md); None: none
    # kernel_selfcheck: the Triton kernel against the reference loop (nn/selfcheck.py)
    info.update(kernels=kernels, cuda=torch.cuda.is_available(), kernel_selfcheck=selfcheck.info())
    if args.json:
        print(json_text(info))
        return 0
    checks, kernels = info.pop("kernel_selfcheck"), info.pop("kernels")
    lines = [f"{k}: {v}" for k, v in info.items()]
    for name, k in kernels.items():  # one line each, not the JSON's dict
        state = "available" if k["available"] else k["reason"] or "not available"
        lines.append(f"kernel {name}: {state}" + (f"; {k['detail']}" if k.get("detail") else ""))
    if isinstance(checks, str):
        lines.append(f"kernel_selfcheck: {checks}")
    else:
        lines += ["kernel_selfcheck:"] + [f"  {c['summary']}" for c in checks]
    print("\n".join(lines))
    return 0


def _cmd_presets(args) -> int:
    """list the shipped --config presets, or print one"""
    from .config import find_preset, preset_description, presets

    if args.name:  # print one preset, to read or to copy and edit: onlstm presets lm/ptb-cpu > mine.yaml
        print(find_preset(args.name)[1].read_text(encoding="utf-8"), end="")
        return 0
    table = {name: {"file": str(path), "description": preset_description(path)} for name, path in presets().items()}
    if args.json:
        print(json_text(table))
        return 0
    width = max(map(len, table))
    for name, entry in table.items():
        print(f"{name:<{width}}  {entry['description']}")
    print(
        "\nuse one with --config NAME (in its own command, the part after the slash is enough: "
        "`onlstm lm train --config ptb-cpu`); `onlstm presets NAME` prints it"
    )
    return 0


def _cmd_export(args) -> int:
    """save a trained run as a model to share (config.json, model.safetensors, vocab.json, card)"""
    # Hugging Face's layout, with a model card (docs/sharing.md). The run's kind (registered by its
    # experiment) opens the model and writes the command that reproduces its settings.
    from .runs import RunDir, find_kind
    from .saved import check_weights_choice
    from .sharing import check_share_target

    check_weights_choice(args.checkpoint, args.weights)
    run, weights = RunDir.find(args.checkpoint, args.weights or "best")
    check_share_target(args.to, args.overwrite, reads=(run.path,))  # before any work, in the command's words
    kind = find_kind(run.read_config().get("kind"), "export", run.path)  # no header: read_config says so
    model = kind.model.from_pretrained(weights)
    if isinstance(model.run_config.get("demo"), dict):  # a demo's run also holds lm train's settings, but only
        from .demo_config import demo_command  # without nltk, which the demo itself needs

        command: str | None = demo_command(model.run_config)
    else:
        command = kind.command(model.run_config)
    results = run.results()
    best = run.weights("best")
    if results and Path(weights).name != best.name:  # the run's figures are its best weights': not these ones'
        results = {"not shown": f"the run's results are those of {best.name}; these weights are {Path(weights).name}"}
    model.save_pretrained(
        args.to, run_config=model.run_config, command=command, results=results, overwrite=args.overwrite
    )
    to = RunDir(args.to)
    print(f"saved {to.shared_weights_path} (+ {to.CONFIG}, {to.VOCAB}, {to.CARD})")
    return 0


def _cmd_import_official(args) -> int:
    """convert a checkpoint of the authors' code (model.pt + corpus.<hash>.data) into a shared model folder

    Reads the authors' torch.save files as data (no code in them runs; a file naming anything but tensors,
    plain containers and the authors' classes is refused) and writes config.json, model.safetensors,
    vocab.json and a card naming the source (docs/sharing.md).
    """
    from .models.official import import_official

    to = import_official(args.checkpoint, args.corpus, args.to, overwrite=args.overwrite)
    print(f"imported {args.checkpoint} into {to} (config.json, model.safetensors, vocab.json, README.md)")
    return 0


@dataclass(kw_only=True)
class ImportArgs:
    checkpoint: str = option(help="the authors' model file (torch.save([model, criterion, optimizer]))")
    corpus: str = option(help="the authors' cached vocabulary, corpus.<md5 of the data path>.data")
    to: str = option(help="the folder to write (new or empty; see --overwrite)")
    overwrite: bool = option(False, "replace a non-empty --to folder (all at once)")


def _register_import(sub) -> None:
    about = "Bring in models trained elsewhere: `official` reads a checkpoint of the authors' code."
    group = add_group(
        sub, "import", "convert a model trained elsewhere (the authors' code) into onlstm's layout", about
    )
    add_command(group, "official", _cmd_import_official, ImportArgs)


@dataclass(kw_only=True)
class DemoArgs:
    config: str | None = option(None, "YAML file with a demo: section (any field below); flags win over it")
    json: bool = option(False, "print the numbers as one JSON object")


def _register_demo(sub) -> None:
    from .demo import DemoConfig  # before add_parser: without nltk nothing half-made is left behind

    add_flags(add_command(sub, "demo", _cmd_demo, DemoArgs), DemoConfig, "demo", "demo settings")


@dataclass(kw_only=True)
class PresetsArgs:
    name: str | None = option(None, "a preset to print (lm/ptb-cpu, or ptb-cpu)", positional=True)
    json: bool = option(False, "the list as JSON: name -> file, description")


@dataclass(kw_only=True)
class ExportArgs:
    checkpoint: str = option(help="the run directory (lm, demo or logic)")
    to: str = option(help="the directory to write (Hugging Face's layout)")
    # no default value: a choice given explicitly is refused with a --checkpoint that names another weights file
    weights: str | None = option(
        None, "which weights of the run (default: best, or last while the run has no best)", choices=("best", "last")
    )
    overwrite: bool = option(False, "replace --to even when it holds files of another kind")


@dataclass(kw_only=True)
class InfoArgs:
    json: bool = option(False, "print one JSON object")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line's parser; for an ``argv`` that names no command (``onlstm``, ``onlstm --help``,
    ``--version``, a misspelt name), one that only lists the commands that import torch (``LISTED``), so that the
    list comes in a fraction of a second instead of after torch's import (seconds)."""
    from . import __version__

    ap = OneLineParser(prog="onlstm", description="Ordered Neurons LSTM: layer, experiments and tools.")
    ap.add_argument("--version", action="version", version=f"onlstm {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    listing = argv is not None and named_command(argv) is None
    _register_or_list(sub, _register_demo, ("demo",), listing)
    add_command(sub, "presets", _cmd_presets, PresetsArgs)
    add_command(sub, "export", _cmd_export, ExportArgs)
    add_command(sub, "info", _cmd_info, InfoArgs)
    _register_import(sub)
    for module, names in SUBCOMMAND_MODULES.items():
        _register_or_list(sub, lambda s, m=module: importlib.import_module(m).register(s), names, listing)
    return ap


#: Each experiment adds its own sub-commands through a ``register(subparsers)`` function in this module; the
#: names it adds are listed so that they still show in ``onlstm --help``, and still answer with the one line
#: that names the missing extra, when the module cannot be imported without the experiments' dependencies.
SUBCOMMAND_MODULES = {
    "onlstm.parsing.cli": ("parsing",),
    "onlstm.logic.cli": ("logic",),
    "onlstm.lm.cli": ("lm",),
    "onlstm.syneval.cli": ("syneval",),
    "onlstm.data.download": ("data",),
}

#: The line ``onlstm --help`` shows for each command whose registration imports torch; the same as the one the
#: command registers (a test holds them equal), written here so that the list needs no import.
LISTED = {
    "demo": "grammar corpus -> ON-LSTM LM -> induced trees vs gold and baselines",
    "parsing": "unsupervised parsing: parse, eval-parse, compare-trees, plot",
    "logic": "logical inference (Bowman et al. 2015): generate, check, train, eval, predict, trees, compare, ...",
    "lm": "word-level language modelling (PTB): train, eval, surprisal, compare",
    "syneval": "targeted syntactic evaluation (Marvin & Linzen 2018 minimal pairs) of language models",
    "data": "fetch or generate the public data sets",
}
_LIGHT = ("presets", "export", "info", "import")  # registered without torch


def named_command(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option) when it is one, else None."""
    word = next((w for w in argv if not w.startswith("-")), None)
    known = {"demo", *_LIGHT, *(name for names in SUBCOMMAND_MODULES.values() for name in names)}
    return word if word in known else None


def _register_or_list(sub, register, names: tuple[str, ...], listing: bool) -> None:
    """:func:`_register_or_stand_in`, or (``listing``) ``names`` with their line of :data:`LISTED` only (an
    experiment added without its lines there is imported for the list)."""
    if not listing or any(name not in LISTED for name in names):
        _register_or_stand_in(sub, register, names)
        return
    for name in names:
        sub.add_parser(name, help=LISTED[name], add_help=False)


def _register_or_stand_in(sub, register, names: tuple[str, ...]) -> None:
    """``register(sub)``; when that needs a missing package of the experiments extra, each of ``names`` it
    did not add yet gets a stand-in that reports the missing extra."""
    try:
        register(sub)
    except ImportError as exc:
        missing = missing_extra(exc)
        if missing is None:
            raise
        # every use of a stand-in, --help included, reports ``missing``; its prefix character is one nobody
        # types, so any option reaches the catch-all argument instead of failing with "unrecognized arguments"
        for name in (n for n in names if n not in sub.choices):
            p = sub.add_parser(name, help=f"({missing})", add_help=False, prefix_chars="\0")
            p.add_argument("words", nargs="*")
            p.set_defaults(func=functools.partial(_raise, missing))


def _raise(error: Exception, args) -> int:
    raise error


def main(argv=None) -> int:
    """Run one ``onlstm`` command; the ONE place where errors meant for users become a message and an exit
    status (see :mod:`onlstm.errors`): ``onlstm <command>: <message>`` on stderr, no traceback."""
    argv = sys.argv[1:] if argv is None else list(argv)
    name = " ".join(["onlstm", *(w for w in argv[:2] if not w.startswith("-"))])  # until the parser knows better
    try:
        with _sigterm_as_interrupt():
            parser = build_parser(argv)
            name = command_path(parser, argv)
            args = _parse(parser, argv)  # in the try: a flag's parser may import an optional dependency
            _closed_streams()
            _line_buffered()
            with _notes_as_lines(name):
                return args.func(args)
    except (OnlstmError, ImportError, OSError, UnicodeDecodeError, MemoryError, RuntimeError) as exc:
        error = user_error(exc)
        if error is None:
            raise
        if isinstance(exc, BrokenPipeError):
            return _closed_pipe()
        print(f"{name}: {cap(str(error))}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:  # the trainers catch Ctrl-C themselves, save, and return 130 too
        with contextlib.suppress(OSError, ValueError):  # stderr closed: the status says it
            print(f"{name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


@contextlib.contextmanager
def _notes_as_lines(name: str):
    """Print each :class:`~onlstm.errors.UserNote` as one line ``<command>: note: <message>`` (not Python's two
    lines of warning); other warnings as before."""
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UserNote):
            print(f"{name}: note: {message}", file=sys.stderr)
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def user_error(exc: BaseException) -> OnlstmError | None:
    """``exc`` as the error a user gets (None: a bug, which keeps its traceback). An ImportError: an experiment's
    dependency not installed (the light core); an OSError: a full disk met by a write outside onlstm.files, or a
    closed pipe; a UnicodeDecodeError: an input file that is not text; memory: sizes beyond this machine."""
    if isinstance(exc, OnlstmError):
        return exc
    if isinstance(exc, BrokenPipeError):
        return InputError("the output pipe was closed")
    if isinstance(exc, ImportError):
        return missing_extra(exc)
    if isinstance(exc, OSError):
        return WriteError.from_os_error(exc)
    if isinstance(exc, UnicodeDecodeError):
        return InputError(f"an input file is not UTF-8 text ({exc.reason} at byte {exc.start}); is it the right file?")
    if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "out of memory" in str(exc).lower():
        return InputError(f"not enough memory for these settings ({first_line(exc, 120)}); choose smaller sizes")
    return None


def _closed_pipe() -> int:
    # the reader (`| head -1`) has what it wanted: stop quietly; stdout goes to /dev/null so that Python's
    # final flush does not fail again
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0


class _ClosedOutput:
    """``sys.stdout`` when the shell closed it (``>&-``; Python sets it to None, and print() to None drops the
    output without a word): the first write is one line, exit 2; a flush (torch's kernel build) is harmless."""

    def write(self, text: str) -> int:
        raise InputError(
            "standard output is closed (>&-), so the output would be lost; redirect it to a file (or give --out)"
        )

    def flush(self) -> None:
        pass


def _closed_streams() -> None:
    if sys.stdout is None:
        sys.stdout = _ClosedOutput()  # type: ignore[assignment]
    if sys.stderr is None:  # 2>&-: messages are dropped, as the shell asked; writes and flushes must not fail
        sys.stderr = open(os.devnull, "w")  # the process's stderr from now on: never closed


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM and SIGHUP (a closed terminal) end a command as Ctrl-C does (a message, exit 130, temporary files
    removed); the trainers' own handler (onlstm.device.StopRequest) replaces this one while they train."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signums = end_signals()
    old = [signal.signal(signum, _raise_interrupt) for signum in signums]
    try:
        yield
    finally:
        for signum, handler in zip(signums, old):
            signal.signal(signum, handler)


def _raise_interrupt(signum, frame):
    leave_closed_terminal(signum)
    raise KeyboardInterrupt


def _line_buffered() -> None:
    # Long jobs are often run as `onlstm … > log &`: print each progress line when it happens, not when a
    # block buffer fills (pytest's capture objects have no reconfigure; leave those alone).
    # A terminal or pipe that cannot encode a character (LANG=C with PYTHONIOENCODING=ascii; the tables' dashes,
    # a word in the user's text) gets an escape (\u2013) for it, as stderr already does, not a traceback.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError):  # a stream that cannot change its buffering
                stream.reconfigure(errors="backslashreplace")
                if not stream.isatty():
                    stream.reconfigure(line_buffering=True)


def command_path(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    """``onlstm lm train`` for ``argv = ['lm', 'train', ...]``: the program name and the sub-commands named
    in ``argv``, as the user typed them (an alias stays an alias)."""
    return " ".join([parser.prog, *(word for word, _ in _commands(parser, argv))])


def _commands(parser: argparse.ArgumentParser, argv: list[str]) -> list[tuple[str, argparse.ArgumentParser]]:
    """The sub-commands ``argv`` names, each with its parser."""
    found = []
    for token in argv:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or token not in sub.choices:
            if token.startswith("-"):
                continue  # an option of the command read so far
            break
        parser = sub.choices[token]
        found.append((token, parser))
    return found


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, an argument no command knows refused by the command it was given to (argparse
    leaves it to the top parser: ``onlstm: unrecognized arguments``, pointing at the wrong --help)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        leaf = ([parser] + [p for _, p in _commands(parser, argv)])[-1]
        leaf.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


if __name__ == "__main__":
    sys.exit(main())
