"""Every command line the docs show is accepted by today's code, so that a renamed or removed flag cannot leave a
doc (and the command that reproduces a figure) stale: each ``onlstm ...`` and ``python benchmarks/X.py ...`` in a
code block or inline code span of the README, docs/*.md and docs/results/*.md is parsed with today's parser (its
sub-commands exist, every flag is spelt out in full and takes the value given), and an ``onlstm`` command's
settings are resolved as the command resolves them before it reads anything (``--config`` presets, choices and
bounds of its settings). Nothing is run and no data is needed.

The docs' notation is read as a reader reads it: ``[--flag X]`` is an optional part (checked), ``a|b`` one of
several values (the first checked), ``…`` an elided part, upper-case words (RUN, DIR, N) placeholders, and a
command quoted in prose may leave out its required arguments (the rest must hold). A command a doc shows being
refused on purpose is quoted without its ``onlstm`` (``lm train --cell sliced``) or as the error line it prints
(``onlstm lm train: ...``); neither is read as a command here."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import re
import shlex
from pathlib import Path

import pytest

from onlstm import cli
from onlstm.config import ConfigError, Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "results").glob("*.md"))]
PROGRAM = re.compile(r"(onlstm|python3? -m onlstm(?:\.cli)?|python3? benchmarks/\w+\.py)(?=\s|$)")
# what may come before the program in a shell line: variables, wrappers (/usr/bin/time -v), a loop's do
PREFIX = re.compile(
    r"^(?:\s*(?:\$|[A-Z_][A-Z0-9_]*=\S*|do|then|(?:/usr/bin/)?time(?: -v)?|nice(?: -n \d+)?|/\S+/with-runs-paused)(?=\s))*\s*"
)
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(?:\.[A-Za-z]+)?|[A-Za-z]*[A-Z]{2}[A-Za-z]*")


def strip_comment(line: str) -> str:
    """A shell comment: a ``#`` that starts a word, outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def commands(text: str) -> list[tuple[int, str]]:
    """``(line, command)`` for each command of a markdown text: in code blocks (a line continued by ``\\`` joined,
    comments dropped, a shell loop's variable given its first value) and in inline code spans (which may go on
    over a line break; one that holds `` | `` is a line a command prints, not a command)."""
    found = []
    blocks = list(re.finditer(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", text, re.S | re.M))  # a list item's too
    for m in blocks:
        line, loop = text.count("\n", 0, m.start(1)) + 1, {}
        for part in re.split(r"(?<!\\)\n", m.group(1)):
            code = strip_comment(part.replace("\\\n", " "))
            if each := re.match(r"\s*for (\w+) in (\S+)[^;]*; do", code):
                loop[each.group(1)] = each.group(2)
            for name, value in loop.items():
                code = code.replace("${" + name + "}", value).replace("$" + name, value)
            found += [(line, c) for c in _segments(code)]
            line += part.count("\n") + 1
    prose = text
    for m in reversed(blocks):  # blank the blocks out, keeping the line numbers
        prose = prose[: m.start()] + re.sub(r"[^\n]", " ", m.group()) + prose[m.end() :]
    for m in re.finditer(r"`([^`\n]+(?:\n[^`\n]+)*?)`", prose):
        span = " ".join(m.group(1).split())
        if PROGRAM.match(span) and " | " not in span:
            found += [(text.count("\n", 0, m.start()) + 1, c) for c in _segments(span)[:1]]
    return found


def _segments(line: str) -> list[str]:
    """The commands a shell line holds: each part between operators (a pipe, ``&&``, ``;``, ``&``, a redirection,
    a bracket of a subshell; outside quotes) that starts with the program, after any variables and wrappers."""
    parts, current, quote = [], "", None
    for i, ch in enumerate(line):
        before, after = line[i - 1 : i], line[i + 1 : i + 2]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif (
            ch in ";&<>"
            or (ch == "|" and before in " |" and after in " |")
            or (ch == "(" and before in " " and after in " (")
            or (ch == ")" and after in " );&")
        ):
            parts.append(current)
            current = ""
            continue
        current += ch
    parts.append(current)
    out = []
    for segment in parts:
        segment = PREFIX.sub("", segment, count=1).strip()
        if PROGRAM.match(segment):
            out.append(segment)
    return out


def words_of(command: str) -> tuple[list[str], bool] | None:
    """The words of a command in the docs' notation, and whether it is elided; None for a line a command prints
    (``onlstm lm train: config file ...``)."""
    text = command.replace("...", "…")
    elided = bool(re.search(r"(?:^|\s)…(?:\s|$|\])", text))
    text = re.sub(r"(?<=\S)…(?=\S)", "x", text)  # corpus.0b5a….data: a file name shortened
    text = re.sub(r"(?:^|\s)…", " ", text)
    while True:  # [--flag X] and [FILE]: optional parts, kept and checked; [prose in brackets]: dropped
        new = re.sub(r"\[([^\[\]]*)\]", lambda m: m.group(1) if re.match(r"-|[A-Z]", m.group(1)) else " ", text)
        if new == text:
            break
        text = new
    words = shlex.split(text)
    if any(w.endswith(":") for w in words[:4]):
        return None
    words = [w.split("|")[0] if re.fullmatch(r"[\w.,:@/-]+(\|[\w.,:@/-]+)+", w) else w for w in words]
    return words, elided


class _Parsed(Exception):
    def __init__(self, namespace, parser):
        self.namespace, self.parser = namespace, parser


def _refusal(fn) -> tuple[object, str | None]:
    """``fn()``, and argparse's refusal (or a settings error) as its one line."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return fn(), None
    except SystemExit as e:
        return None, err.getvalue().strip() or f"exit {e.code}"
    except (ConfigError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}"


def _fill(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], set[str]]:
    """Placeholders (RUN, N, CORPUS) replaced by a value the argument takes, and a value put after a flag named
    without one (`onlstm syneval --suite`, ``[--suite …]``); the settings a placeholder set (left to the preset)."""
    positionals = [a for a in parser._actions if not a.option_strings and a.dest != "help"]
    out, setting, expect, given = [], set(), None, 0

    def value_for(action: argparse.Action, word: str) -> str:
        if action.choices:
            return next(iter(action.choices))
        if action.type in (None, str, Path):
            return word
        for value in ("1", "1x1x1x1x1"):  # a number, a shape (TxBxINxHxC)
            with contextlib.suppress(Exception):
                action.type(value)
                return value
        return word

    for w in [*argv, None]:
        if (w is None or (w.startswith("-") and len(w) > 1)) and expect is not None and not given:
            out.append(value_for(expect, "x"))  # the flag's value left out
        if w is None:
            break
        if w.startswith("-") and len(w) > 1:
            expect = parser._option_string_actions.get(w.split("=")[0])
            expect, given = (expect if expect is not None and expect.nargs != 0 and "=" not in w else None), 0
            out.append(w)
            continue
        action = expect or (positionals.pop(0) if positionals else None)
        if action is not None and PLACEHOLDER.fullmatch(w):
            if "." in action.dest or action.dest == "config":  # a setting, or the file of settings
                setting.add(action.dest)
            w = value_for(action, w)
        out.append(w)
        given += 1
        expect = expect if expect is not None and expect.nargs in ("+", "*") else None
    return out, setting


@functools.cache
def _onlstm_parser() -> argparse.ArgumentParser:
    return cli.build_parser(["lm"])  # a command named: every command registered (not the list --help shows)


def check_onlstm(argv: list[str]) -> str | None:
    """Why today's ``onlstm`` refuses ``argv`` (None: accepted)."""
    parser = _onlstm_parser()
    found = cli._commands(parser, argv)
    if not found:
        return f"no command {argv[0]!r}" if argv and not argv[0].startswith("-") else None
    if any(p.prefix_chars == "\0" for _, p in found):
        return "a stand-in command here (an experiment's dependency is missing): install the experiments extra"
    leaf, at = found[-1][1], 0
    for word, _ in found:  # the command's words stay as they are; what follows them is filled in
        at = argv.index(word, at) + 1
    rest, placeheld = _fill(leaf, argv[at:])
    argv = argv[:at] + rest
    for _ in range(4):  # a command quoted in prose may leave out its required arguments: dummy ones, and again
        args, err = _refusal(functools.partial(cli._parse, parser, argv))
        missing = re.search(r"the following arguments are required: (.*) \(see", err or "")
        if not missing:
            break
        for name in missing.group(1).split(", "):
            if name.startswith("{"):
                return None  # `onlstm lm`: a group named, its sub-command left to the text
            action = next(a for a in leaf._actions if name in (a.dest, *a.option_strings))
            value = next(iter(action.choices)) if action.choices else "x"
            argv = argv + ([name, value] if name.startswith("-") else [value])
    if err == "exit 0":  # --help
        return None
    if err:
        return err
    if short := _spelt_out(argv, [parser, *(p for _, p in found)], "onlstm " + " ".join(w for w, _ in found)):
        return short
    for dest in placeheld:  # `--cell CELL`: a setting the text leaves open is checked as the preset's
        setattr(args, dest, None)
    return _refusal(lambda: _resolve(tuple(w for w, _ in found), args))[1]


def _spelt_out(argv: list[str], parsers: list[argparse.ArgumentParser], what: str) -> str | None:
    """argparse takes a unique prefix of a flag (``--asgd-start`` for ``--asgd-start-epoch``); a doc spells it out
    (the prefix is refused as soon as another flag begins with it)."""
    exact = {o for p in parsers for o in p._option_string_actions}
    short = [w for w in argv if w.startswith("--") and w.split("=")[0] not in exact]
    return f"{' '.join(short)}: no such flag of `{what}` (a prefix is not enough)" if short else None


def _resolve(path: tuple[str, ...], args: argparse.Namespace) -> None:
    """The settings checks a command makes before it reads anything: presets, choices, bounds."""
    if path == ("demo",):
        from onlstm.demo import DemoConfig

        Settings.resolve({"demo": DemoConfig}, args.config, args, experiment="demo").build("demo")
    elif path in (("lm", "train"), ("lm", "compare")):
        from onlstm.lm.config import explicit_settings, run_config

        run_config(explicit_settings(args.config, args, cells=getattr(args, "cells", None)), args.config)
    elif path in (("logic", "train"), ("logic", "compare")):
        from onlstm.logic.cli import parse_buckets
        from onlstm.logic.config import resolve

        what = resolve(args.config, args, path[1] == "compare")[3]
        if what is not None:
            parse_buckets(what.lengths)
    elif path == ("logic", "generate"):
        from onlstm.logic.cli import GenerateConfig

        Settings.resolve({"generate": GenerateConfig}, flags=args).build("generate")
    elif path == ("syneval",):
        from onlstm.syneval.cli import SynevalConfig

        Settings.resolve({"syneval": SynevalConfig}, args.config, args, experiment="syneval").build("syneval")


def _script_parser(module) -> argparse.ArgumentParser:
    """The parser a script's main builds, taken from it before it parses anything."""
    real = argparse.ArgumentParser.parse_args

    def stop(self, args=None, namespace=None):
        raise _Parsed(None, self)

    argparse.ArgumentParser.parse_args = stop  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            module.main([])
    except _Parsed as parsed:
        return parsed.parser
    finally:
        argparse.ArgumentParser.parse_args = real  # type: ignore[method-assign]
    raise AssertionError(f"{module.__name__}.main returned before parsing its command line")


def check_script(script: str, argv: list[str]) -> str | None:
    """Why ``python benchmarks/<script> argv`` is refused by the script's parser (None: accepted); nothing of its
    main runs but the building of its parser."""
    if not (ROOT / script).is_file():
        return f"no such script {script}"
    parser = _script_parser(importlib.import_module(Path(script).stem))
    argv = _fill(parser, argv)[0]
    return _refusal(lambda: parser.parse_args(argv))[1] or _spelt_out(argv, [parser], script)


def refusals(text: str) -> list[str]:
    """``line: command -> why`` for each command of a markdown text that today's code refuses. A command of an
    earlier version may stay as it was when its line (or one of the two before it) names that version's commit:
    the docs' rule for the figures of an archive."""
    out, lines = [], text.splitlines()
    for line, command in commands(text):
        read = words_of(command)
        if read is None:
            continue
        words, elided = read
        if words[0] == "onlstm":
            why = check_onlstm(words[1:])
        elif "-m" in words[:2]:
            why = check_onlstm(words[3:])
        elif elided:
            continue  # an elided script command: its words are not all there
        else:
            why = check_script(words[1], words[2:])
        if why and not COMMIT.search(" ".join(lines[max(0, line - 3) : line])):
            out.append(f"{line}: {command} -> {why.splitlines()[-1]}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_in_the_docs_is_accepted_today(doc):
    refused = refusals(doc.read_text(encoding="utf-8"))
    assert not refused, f"{doc.relative_to(ROOT)}: " + "\n".join(refused)


def test_the_docs_hold_commands_and_the_reader_finds_them():
    text = "\n".join(d.read_text(encoding="utf-8") for d in DOCS)
    found = [c for _, c in commands(text)]
    assert len(found) > 300
    assert any(c.startswith("python benchmarks/layer_speed.py --impls") for c in found)
    sample = "a\n\n```\nonlstm lm train --config ptb-cpu \\\n    --out R  # and --threads 2\nls | onlstm info --json > x\n```\n"
    sample += "run `onlstm logic\ntrain --config paper` (or `lm eval`)\n"
    assert commands(sample) == [
        (4, "onlstm lm train --config ptb-cpu      --out R"),
        (6, "onlstm info --json"),
        (8, "onlstm logic train --config paper"),
    ]


@pytest.mark.parametrize(
    "command, why",
    [
        (
            "onlstm lm train --config ptb-cpu --no-such-flag --data-dir D --out R",
            "unrecognized arguments: --no-such-flag",
        ),
        ("onlstm lm train --config ptb-cpu --asgd-start 2 --data-dir D --out R", "--asgd-start: no such flag"),
        ("onlstm lm train --config ptb-cpux --data-dir D --out R", "not a lm preset"),
        ("onlstm lm train --config ptb-cpu --cell nope --data-dir D --out R", "nope"),
        ("onlstm lm eval --checkpoint R --protocol papers", "invalid choice: 'papers'"),
        ("onlstm logic compare --config paper --data D --out O --lengths 7-x", "bad lengths"),
        ("onlstm lm evaluate --checkpoint R", "invalid choice: 'evaluate'"),
        ("onlstm eval-parse --checkpoint R", "no command 'eval-parse'"),
        ("python benchmarks/layer_speed.py --impls cpp --reps 7", "unrecognized arguments: --reps 7"),
        ("python benchmarks/layer_speed.py --impls cpp --rep 7", "--rep: no such flag"),
        ("python benchmarks/layer_speed.py --shapes 70x20", "a shape is TxBxINxHxC"),
    ],
)
def test_a_stale_command_is_caught(command, why):
    found = refusals(f"text\n\n```\n{command}   # a comment\n```\n")
    assert len(found) == 1 and why in found[0], found
    assert not refusals(f"Recorded in 43d2cb9, with the command of that version:\n```\n{command}\n```\n")


def test_the_docs_notation_is_read_as_a_reader_reads_it():
    accepted = [
        "onlstm parsing eval-parse --checkpoint RUN --treebank DIR [--wsj10] [--layers all|2,3] [--threads N]",
        "onlstm lm train|eval|compare …",
        "onlstm data download CORPUS --to DIR",
        "onlstm logic eval --split test --lengths 7-12",  # quoted in prose without --checkpoint and --data
        "onlstm import official --checkpoint PTB.pt --corpus corpus.0b5a….data --to DIR",
        "onlstm lm train --time-limit M --data-dir D --out R",
        "onlstm lm train: config file ptb-gpu does not exist",  # a line the command prints
    ]
    assert not refusals("```\n" + "\n".join(accepted) + "\n```\n")


@pytest.mark.parametrize("doc, module", [("docs/lm.md", "onlstm.lm.config"), ("docs/logic.md", "onlstm.logic.config")])
def test_the_settings_a_resume_may_change_are_the_ones_the_doc_lists(doc, module):
    """docs/lm.md names the fields `--resume` lets change, docs/logic.md their flags: a field made runtime (or no longer
    runtime) in the code without the doc would leave users told the wrong thing about resuming."""
    runtime = set(importlib.import_module(module).RUNTIME_FIELDS)
    text = " ".join((ROOT / doc).read_text(encoding="utf-8").split())
    if doc.endswith("lm.md"):
        listed = re.search(r"only runtime fields \(([^)]*)\) may change", text)
        assert listed, "docs/lm.md no longer lists the fields --resume may change"
        assert set(re.findall(r"`(\w+)`", listed.group(1))) == runtime
        return
    listed = re.search(r"changing what is learned is refused, except for (.*?) and the budget", text)
    assert listed, "docs/logic.md no longer lists what --resume may change"
    flags = {f.replace("-", "_") for f in re.findall(r"`--([\w-]+)`", listed.group(1))}
    # in words there: the progress bar, the reports (--log-every, --tensorboard, flags above) and the budget
    assert flags | {"progress"} | {"epochs", "max_steps", "time_limit"} == runtime
