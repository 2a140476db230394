"""Paths and small data makers shared by the tests (importable because tests/ holds the root conftest.py)."""

from __future__ import annotations

import os
import random
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "src" / "onlstm" / "configs"  # the presets (package data; `configs` at the top links here)
TINY_LM = CONFIGS / "lm" / "tiny.yaml"
# The real data sets sit beside the checkout in this project's workspace; tests that use them skip without them.
SHARED_DATA = REPO.parent / "shared" / "data"
#: The fault tests' whole matrices (every signal with every command, every delay) with ONLSTM_FAULTS_FULL=1; else the
#: part CI's 10 minutes allow (fault_cases)
FAULTS_FULL = os.environ.get("ONLSTM_FAULTS_FULL") == "1"


def fault_cases(rows: list, columns: list, always: tuple = ()) -> list[tuple]:
    """The ``(row, column)`` cases of a fault test: all of them with ONLSTM_FAULTS_FULL=1, else a diagonal that
    takes each row and each column at least once, plus the cases in ``always`` (each costs processes of its own)."""
    every = [(r, c) for r in rows for c in columns]
    if FAULTS_FULL:
        return every
    n = max(len(rows), len(columns))
    diagonal = {(rows[i % len(rows)], columns[i % len(columns)]) for i in range(n)}
    return [case for case in every if case in diagonal or case in always]


WORDS = "the cat dog sat on mat a big small red ran fast slow".split()


def write_corpus(dir: Path, seed: int = 0, n_train: int = 110) -> Path:
    """A tiny PTB-layout corpus (``ptb.{train,valid,test}.txt``) of random sentences over :data:`WORDS`."""
    r = random.Random(seed)
    dir.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", n_train), ("valid", 16), ("test", 16)):
        lines = [" " + " ".join(r.choice(WORDS) for _ in range(r.randint(3, 9))) + " " for _ in range(n)]
        (dir / f"ptb.{name}.txt").write_text("\n".join(lines) + "\n")
    return dir


def quiet(msg: str) -> None:
    """A ``log`` callback that drops the message."""


def with_train(settings: dict, **train) -> dict:
    """``settings`` (``{"model": ..., "train": ...}``) with these train fields set, e.g. a budget: ``max_steps=4``
    (``None``: no limit, for a resumed run that had one)."""
    return {**settings, "train": {**settings.get("train", {}), **train}}


def problem_lines(err: str) -> list[str]:
    """The lines of a command's stderr that say a problem: a refusal is one of them. A note said on the way (which
    weights were opened: ``onlstm export: note: no best weights ...``) is not one."""
    return [line for line in err.strip().splitlines() if ": note: " not in line]


def command_parsers(parser, words: tuple[str, ...] = ()):
    """``(command words, parser)`` of ``parser`` and of every sub-command below it (``onlstm.cli.build_parser()``)."""
    import argparse

    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from command_parsers(child, (*words, name))


def needs_cpp(item) -> bool:
    """Marked ``cpp``, or run with the C++ kernel as a parameter (``impl`` of ``"cpp"``, ``"cpp:avx2"``, ...)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    named = any(isinstance(v, str) and (v == "cpp" or v.startswith("cpp:")) for v in params.values())
    return named or item.get_closest_marker("cpp") is not None


def buildable(impls: list[str]) -> list[str]:
    """``impls`` without ``cpp`` where no C++ kernel can be built here (no compiler, or ``ONLSTM_NO_EXTENSION=1``):
    a test that runs every implementation in turn checks the others there (tests/conftest.py skips those that run
    ``cpp`` alone); where a build is tried, all of them, so a kernel that fails to compile fails the test."""
    from onlstm.nn import cpp_kernel

    return [i for i in impls if i != "cpp"] if cpp_kernel.unbuildable() else list(impls)


def without_cpp_kernel(monkeypatch) -> None:
    """This test's layers take no C++ kernel, as under ``ONLSTM_NO_EXTENSION=1`` from the start, even where an earlier
    test of the process loaded it (the variable is read at the first load, and the loaded kernel is remembered)."""
    from onlstm.nn import cpp_kernel, kernels

    monkeypatch.setenv("ONLSTM_NO_EXTENSION", "1")
    # the extension's state as before its first load: its own keys, nothing tried (not a copy of its literal)
    monkeypatch.setattr(cpp_kernel, "_state", {**dict.fromkeys(cpp_kernel._state), "tried": False})
    for name in ("_loaded", "_errors"):
        monkeypatch.setattr(kernels, name, {})
    monkeypatch.setattr(kernels, "_warned", set())


def state_tensors(state):
    """Every tensor of a carried state: a tensor, None, or nested tuples and lists of them."""
    if isinstance(state, (tuple, list)):
        for s in state:
            yield from state_tensors(s)
    elif state is not None:
        yield state
