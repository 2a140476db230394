"""Issue 35's harness, a full disk during every writer: each command that writes is run once to list its writes (every
file goes through ``onlstm.files.atomic_write``, a multi-file result is published by one rename, a training takes
its lock first), then once per write with the disk full (ENOSPC) at that write. Each must end as docs/cli.md
promises: exit 4, one line naming the file, no traceback, nothing the user had before changed, no temporary file
or half-made multi-file result left; a training resumes from what it kept to the end of a run that met no fault.

The write points are found at run time, not listed; which commands write is checked against the parser: a command
missing from :data:`RECIPES` and :data:`NOT_COVERED` fails :func:`test_every_command_is_covered`."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors.torch import load_file

import onlstm.files
from onlstm.cli import build_parser, main
from onlstm.errors import EXIT_WRITE_FAILED, WriteError
from onlstm.lock import RunLock
from support import TINY_LM, without_cpp_kernel, write_corpus

LOGIC = ["--emb-size", "8", "--hidden-size", "16", "--chunk-size", "4", "--mlp-hidden", "16", "--no-progress"]
LOGIC += ["--batch-size", "8", "--valid-every", "4", "--epochs", "1", "--threads", "1"]


class Disk:
    """Counts the writes of a command; with ``full_at=k`` the k-th one fails as a full disk does."""

    def __init__(self, monkeypatch, full_at: int | None = None):
        self.writes: list[str] = []
        self.full_at = full_at
        original = onlstm.files.atomic_write
        wrapped = self._wrap_write(original)
        for module in [m for name, m in sys.modules.items() if name.startswith("onlstm")]:
            # a module first imported under an earlier Disk kept that Disk's wrapper (monkeypatch restores only
            # what it set): its writes would be counted there, not here
            held = getattr(module, "atomic_write", None)
            if held is original or getattr(held, "counts_writes", False):
                monkeypatch.setattr(module, "atomic_write", wrapped)
        swap = onlstm.files._swap_into_place
        monkeypatch.setattr(onlstm.files, "_swap_into_place", self._wrap_publish(swap))
        create = RunLock._try_take
        monkeypatch.setattr(RunLock, "_try_take", self._wrap_lock(create))

    def _full(self, what: str) -> bool:
        self.writes.append(what)
        return len(self.writes) == self.full_at

    @staticmethod
    def _enospc(name) -> OSError:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(name))

    def _wrap_write(self, original) -> Callable:
        def atomic_write(path, write):
            if not self._full(f"write {Path(path).name}"):
                return original(path, write)

            def half(tmp):  # some bytes reach the temporary file, then the disk is full
                write(tmp)
                raise self._enospc(tmp)

            return original(path, half)

        atomic_write.counts_writes = True  # type: ignore[attr-defined]
        return atomic_write

    def _wrap_publish(self, original) -> Callable:
        def swap(new, target):
            if self._full(f"publish {Path(target).name}"):
                raise self._enospc(target)
            return original(new, target)

        return swap

    def _wrap_lock(self, original) -> Callable:
        def create(lock):
            if self._full("lock"):
                raise WriteError(lock.path, self._enospc(lock.path))
            return original(lock)

        return create


def run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, err.getvalue()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- the commands: each recipe makes its inputs in ``work`` (untouched by the faults) and returns
# (argv, target, resume argv or None). ``target`` is what the command writes; a training's may stay half-made
# (it is resumable), any other's must be as it was.
def _lm_train(work: Path):
    corpus = work / "corpus" if (work / "corpus").exists() else write_corpus(work / "corpus")
    argv = ["lm", "train", "--config", TINY_LM, "--data-dir", corpus, "--out", work / "run", "--epochs", "1"]
    return argv, work / "run", [*argv, "--resume"]


def _logic_data(work: Path) -> Path:
    from onlstm.logic.generate import GenerateConfig, generate_dataset

    data = work / "data"
    if not data.exists():
        generate_dataset(data, GenerateConfig(per_length=6, seed=3, max_ops=4, test_count=2))
    return data


def _logic_train(work: Path):
    argv = ["logic", "train", "--data", _logic_data(work), "--out", work / "run", *LOGIC]
    return argv, work / "run", [*argv, "--resume"]


def _logic_generate(work: Path, again: bool = False):
    argv = ["logic", "generate", "--out", work / "gen", "--per-length", "5", "--max-ops", "4", "--test-count", "2"]
    if again and not (work / "gen").exists():
        assert main([str(a) for a in argv]) == 0  # an earlier output of the same command, replaced all at once
    return [*argv, "--seed", "9"] if again else argv, work / "gen", None


def _lm_checkpoint(work: Path) -> Path:
    if not (work / "lm").exists():
        corpus = write_corpus(work / "corpus")
        base = ["lm", "train", "--config", TINY_LM, "--data-dir", corpus, "--out", work / "lm", "--max-steps", "2"]
        assert main([str(a) for a in base]) == 0
    return work / "lm"


def _export(work: Path, again: bool = False):
    argv = ["export", "--checkpoint", _lm_checkpoint(work), "--to", work / "shared"]
    if again and not (work / "shared").exists():
        assert main([str(a) for a in argv]) == 0
    return argv, work / "shared", None


def _logic_curves(work: Path):
    run = work / "logic-run"
    if not run.exists():
        assert main([str(a) for a in ["logic", "train", "--data", _logic_data(work), "--out", run, *LOGIC]]) == 0
    return ["logic", "curves", run, "--out", work / "plots"], work / "plots", None


def _logic_trees(work: Path):
    _logic_curves(work)  # its run: an ON-LSTM classifier (the default cell)
    argv = ["logic", "trees", "--checkpoint", work / "logic-run", "--data", _logic_data(work), "--out", work / "trees"]
    return [*argv, "--threads", "1"], work / "trees", None


def _marvin_linzen(work: Path):
    return ["data", "marvin-linzen", "--out", work / "ml", "--case", "simple_agrmt"], work / "ml", None


RECIPES: dict[str, Callable] = {
    "lm train": _lm_train,
    "logic train": _logic_train,
    "logic generate": _logic_generate,
    "logic generate (over its own output)": lambda w: _logic_generate(w, again=True),
    "export": _export,
    "export (over its own output)": lambda w: _export(w, again=True),
    "logic curves": _logic_curves,
    "logic trees": _logic_trees,
    "data marvin-linzen": _marvin_linzen,
}
#: Commands this harness does not run, and why (each writes through the same writers, or writes nothing).
NOT_COVERED = {
    "presets": "writes nothing",
    "info": "writes nothing (the kernel cache: tests/nn/test_extension.py)",
    "parsing eval-parse": "writes nothing",
    "parsing compare-trees": "writes nothing",
    "logic check": "writes nothing",
    "logic stats": "writes nothing",
    "logic eval": "prints its table",
    "logic predict": "prints its lines",
    "lm surprisal": "prints its table",
    "lm eval": "one file through write_text (a plain atomic_write, tests/test_faults.py)",
    "parsing parse": "one file per layer through write_text (tests/test_faults.py: text)",
    "parsing plot": "figures through save_figure (tests/test_faults.py: plot)",
    "logic holdout": "data files through publish_folder, as logic generate",
    "logic compare": "the logic train runs above and table.md through write_text; minutes long",
    "lm compare": "the lm train runs above, then compare.json and tables.md through write_json / write_text",
    "syneval": "results through publish_folder, as export; needs a trained model and test items",
    "demo": "lm train's run and a data folder through publish_folder; needs nltk and minutes",
    "import official": "needs the authors' checkpoint (tests/test_official_import.py builds one)",
    "data download": "needs the network",
}


def test_every_command_is_covered():
    from test_generated import _commands

    names = {" ".join(words) for words, _ in _commands(build_parser())}
    recipes = {name.split(" (")[0] for name in RECIPES}
    assert names == recipes | set(NOT_COVERED), (names - recipes - set(NOT_COVERED), recipes | set(NOT_COVERED) - names)


def _points(n: int) -> list[int]:
    """Which writes to fail: every one (the tiny commands write a few dozen files at most)."""
    return list(range(1, n + 1))


@pytest.mark.slow  # a few seconds per command: each write point is one more (tiny) run
@pytest.mark.parametrize("name", RECIPES)
def test_a_full_disk_at_every_write(name, tmp_path, monkeypatch):
    # no C++ kernel, even one an earlier test of this process loaded: its timed GEMM choice writes a cache the
    # first time only (and only on an idle machine), which made the first run's writes differ from the next ones'
    without_cpp_kernel(monkeypatch)
    clean = tmp_path / "clean"
    clean.mkdir()
    argv, target, resume = RECIPES[name](clean)
    with pytest.MonkeyPatch.context() as mp:
        disk = Disk(mp)
        rc, err = run(argv)
    assert rc == 0, err[-2000:]
    assert disk.writes, f"{name} wrote nothing"
    whole = snapshot(target)
    for k in _points(len(disk.writes)):
        work = tmp_path / f"at-{k}"
        shutil.copytree(clean, work, ignore=shutil.ignore_patterns(target.name))
        argv, target, resume = RECIPES[name](work)
        before = snapshot(work)
        with pytest.MonkeyPatch.context() as mp:
            faulty = Disk(mp, full_at=k)
            rc, err = run(argv)
        what = f"{name}: the disk full at write {k} ({disk.writes[k - 1]})"
        # the same writes in the same order up to the fault: else the command's writes depend on more than its input
        assert faulty.writes == disk.writes[:k], f"{what}: other writes than the first run's: {faulty.writes}"
        lines = [line for line in err.splitlines() if line.strip()]
        assert rc == EXIT_WRITE_FAILED and "Traceback" not in err, f"{what}: exit {rc}\n{err[-3000:]}"
        assert "No space left on device" in lines[-1], f"{what}: {lines[-1]}"
        assert not [p for p in work.rglob("*") if p.name.endswith((".tmp", ".old"))], f"{what}: temporary files left"
        after = snapshot(work)
        outside = {k: v for k, v in before.items() if not (work / k).is_relative_to(target)}
        assert {k: after.get(k) for k in outside} == outside, f"{what}: the user's files changed"
        if resume is None:  # all or nothing: the target as it was (absent, or the earlier output)
            assert {k: v for k, v in after.items() if (work / k).is_relative_to(target)} == {
                k: v for k, v in before.items() if (work / k).is_relative_to(target)
            }, f"{what}: {target.name} changed"
            continue
        again = resume if (target / "config.json").exists() else argv  # a run that kept its header resumes
        rc, err = run(again)
        assert rc == 0, f"{what}, then {' '.join(map(str, again[:2]))} again: exit {rc}\n{err[-2000:]}"
        done = snapshot(target)
        for weights in [n for n in whole if n.startswith("model.") and n.endswith(".safetensors")]:
            a, b = load_file(str(clean / target.name / weights)), load_file(str(target / weights))
            assert a.keys() == b.keys() and all((a[t] == b[t]).all() for t in a), f"{what}: {weights} differs"
        assert set(whole) - {"steps.csv"} <= set(done), f"{what}: missing after resume: {set(whole) - set(done)}"
