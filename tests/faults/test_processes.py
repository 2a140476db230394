"""Issue 48's harness, processes and locks: every long-running command killed by SIGHUP (its terminal closed) and by
SIGKILL (nothing can be caught), and every writer of :mod:`onlstm.files` killed in the middle of a write. SIGHUP
ends a command as Ctrl-C does (exit 130, each run's resume file saved); after either, no process the command
started is left running (a comparison's runs stop with it) and no lock is held: the next training of each run
folder takes it. A writer killed mid-write leaves temporary files that the next training of the folder removes,
saying so in one line, and nothing else of the folder is touched.

The cases are generated: :data:`COMMANDS` x :data:`KILLS`, :data:`WRITERS` x the points of a write at which a
kill can land. Linux only (/proc lists a process's children)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from onlstm.files import LEFTOVER
from onlstm.lock import RunLock
from onlstm.runs import RunDir
from support import REPO, TINY_LM, fault_cases, write_corpus

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl: Linux")

ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ONLSTM_NO_EXTENSION": "1", "PYTHONWARNINGS": "ignore"}
#: Longer than any of these tiny runs needs to start, save or stop, on a loaded machine.
PATIENCE_S = 180

LOGIC = ["--emb-size", "8", "--hidden-size", "16", "--chunk-size", "4", "--mlp-hidden", "16", "--no-progress"]
LOGIC += ["--batch-size", "8", "--threads", "1", "--epochs", "100000", "--patience", "100000", "--log-every", "1"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    from onlstm.logic.generate import GenerateConfig, generate_dataset

    work = tmp_path_factory.mktemp("inputs")
    write_corpus(work / "corpus", n_train=400)
    generate_dataset(work / "data", GenerateConfig(per_length=20, seed=3, max_ops=6, test_count=2))
    return work


def commands(inputs: Path, out: Path) -> dict[str, tuple[list[str], list[Path]]]:
    """Every command that trains for long, with a budget it never reaches here: ``name: (argv, its run folders)``."""
    lm = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(inputs / "corpus"), "--out", str(out / "lm")]
    logic = ["logic", "train", "--data", str(inputs / "data"), "--out", str(out / "logic"), *LOGIC]
    compare = ["logic", "compare", "--data", str(inputs / "data"), "--out", str(out / "cmp"), *LOGIC]
    compare += ["--cells", "onlstm", "lstm", "--seeds", "0", "--jobs", "2", "--lengths", "1-6"]
    return {
        "lm train": ([*lm, "--epochs", "100000"], [out / "lm"]),
        "logic train": (logic, [out / "logic"]),
        "logic compare --jobs 2": (compare, [out / "cmp" / "onlstm-seed0", out / "cmp" / "lstm-seed0"]),
    }


COMMANDS = list(commands(Path("in"), Path("out")))
KILLS = [signal.SIGHUP, signal.SIGKILL]
#: both kills of the comparison (its runs' processes must end with it), one of each trainer: the same engine
KILLED = fault_cases(COMMANDS, KILLS, always=tuple((c, k) for c in COMMANDS if "compare" in c for k in KILLS))


def descendants(pid: int) -> set[int]:
    """The processes ``pid`` started, and theirs (read from /proc now)."""
    found, todo = set(), [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = {int(c) for c in (task / "children").read_text().split()}
            except OSError:  # gone meanwhile
                continue
            todo += children - found
            found |= children
    return found


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, ended but not yet reaped by whoever adopted it, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(condition, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the command ended first (exit {proc.returncode}): {proc.stderr.read()}")
        assert time.monotonic() < deadline, f"{what}: not after {PATIENCE_S} s"
        time.sleep(0.1)


@pytest.mark.slow  # a process per case (torch's import, a tiny run until it reports, its stop): 5-15 s each
@pytest.mark.parametrize(("name", "signum"), KILLED, ids=[f"{n}-{s.name}" for n, s in KILLED])
def test_a_long_command_killed_leaves_no_process_running_and_no_lock_held(name, signum, inputs, tmp_path):
    argv, runs = commands(inputs, tmp_path)[name]
    cmd = [sys.executable, "-m", "onlstm", *argv]
    # SIGHUP at its default in the command, as under a terminal: run under `nohup` (CI beside other jobs), the test
    # would pass it on ignored, and onlstm rightly keeps an ignored SIGHUP ignored (docs/cli.md)
    proc = subprocess.Popen(cmd, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))  # fmt: skip
    family: set[int] = set()
    try:
        # every run is training: it holds its lock and has reported its first steps
        wait_for(lambda: all(RunDir(r).steps_path.exists() for r in runs), f"{name} training", proc)
        family = descendants(proc.pid)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=PATIENCE_S)
        wait_for(lambda: not any(map(alive, family)), f"{name}: the processes it started ({sorted(family)}) ending")
    finally:
        for pid in [proc.pid, *family]:  # a failed case leaves nothing running behind it
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    if signum == signal.SIGHUP:  # as Ctrl-C: every run stopped after its step, with its resume file
        assert proc.returncode == 130 and "Traceback" not in err, f"{name}: exit {proc.returncode}\n{err[-3000:]}"
        for run in runs:
            assert RunDir(run).results()["status"] == "interrupted" and RunDir(run).resume_path.exists(), run
    else:
        assert proc.returncode == -signal.SIGKILL
    for run in runs:  # the next training of each folder takes its lock
        RunLock(run, "onlstm next").acquire().release()


# -- writers killed mid-write ---------------------------------------------------------------------------------------
#: The file writers (onlstm.files.atomic_write, and the writers on it), each writing a few MB into ``folder``.
WRITERS = {
    "write_text": "from onlstm.files import write_text\nwrite_text(folder / 'log.csv', 'x' * (8 << 20))",
    "write_json": "from onlstm.files import write_json\nwrite_json(folder / 'history.json', list(range(10**6)))",
    "save_weights": "import torch\nfrom onlstm.checkpoint import save_weights\n"
    "save_weights(folder / 'model.last.safetensors', torch.nn.Linear(1000, 2000))",
}
#: Where the kill lands: before the final rename (the temporary file whole), or while the safetensors writer
#: writes its own temporary file (in a loop of saves, killed the moment that file is seen).
POINTS = {"before the rename": WRITERS, "inside safetensors": {"save_weights": WRITERS["save_weights"]}}
SAFETENSORS_TEMPORARY = re.compile(r"\.tmp[A-Za-z0-9]{6}")
CASES = [
    pytest.param(point, writer, id=f"{writer}, {point}", marks=[pytest.mark.slow] if "torch" in code else [])
    for point, writers in POINTS.items()
    for writer, code in writers.items()
]  # a writer that imports torch takes a few seconds to start: slow

WRITER = """
import os, sys, time
from pathlib import Path
folder, point = Path(sys.argv[1]), sys.argv[2]

def hold(*args):
    print("holding", flush=True)
    time.sleep(600)

if point == "before the rename":
    os.replace = hold
    exec(sys.argv[3])
else:
    print("looping", flush=True)
    while True:
        exec(sys.argv[3])
"""


@pytest.mark.parametrize(("point", "writer"), CASES)
def test_a_writer_killed_mid_write_leaves_a_folder_the_next_training_cleans(point, writer, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    mine = ["notes.tmp", ".tmp", "config.json"]  # the user's and the run's own: never removed
    for name in mine:
        (folder / name).write_text("keep")
    cmd = [sys.executable, "-c", WRITER, str(folder), point, WRITERS[writer]]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wanted = SAFETENSORS_TEMPORARY if point == "inside safetensors" else LEFTOVER
    try:
        assert proc.stdout.readline().strip() in ("holding", "looping"), proc.stderr.read()
        wait_for(lambda: any(wanted.fullmatch(n) for n in os.listdir(folder)), f"{writer}: its temporary file", proc)
    finally:
        proc.kill()
        proc.communicate()
    left = [n for n in os.listdir(folder) if LEFTOVER.fullmatch(n)]  # none if the kill fell between two saves
    said: list[str] = []
    with RunLock(folder, "onlstm next", log=said.append):
        assert not [n for n in os.listdir(folder) if LEFTOVER.fullmatch(n)]
    assert len(said) == (1 if left else 0) and all(f"removed {len(left)} temporary file(s)" in line for line in said)
    assert all((folder / name).read_text() == "keep" for name in mine)
