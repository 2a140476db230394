"""Issue 35's harness, signals: Ctrl-C (SIGINT) and SIGTERM delivered after a random delay (seeded, so that CI
is reproducible; ``--faults-seed`` draws others) to real processes of the main commands. Every one must end as
docs/cli.md promises: exit 130, one line ``onlstm <command>: interrupted`` (or the trainers' stop report, whose
last line names --resume), no traceback; a training stopped this way resumes to the same end as one that never
was. ``ONLSTM_FAULTS_FULL=1`` (or ``benchmarks/faults_full.sh``) tries more points."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ONLSTM_NO_EXTENSION": "1", "PYTHONWARNINGS": "ignore"}
FULL = os.environ.get("ONLSTM_FAULTS_FULL") == "1"
SEED = int(os.environ.get("ONLSTM_FAULTS_SEED", "35"))


def delays(n: int, low: float, high: float, salt: str) -> list[float]:
    """``n`` delays in seconds, drawn from the seed (the same in every CI run), ends included."""
    r = random.Random(f"{SEED}:{salt}")
    return [low, high, *sorted(r.uniform(low, high) for _ in range(max(n - 2, 0)))][:n]


def console_script() -> list[str]:
    """What the installed ``onlstm`` script runs (pip writes ``from MODULE import FUNC; sys.exit(FUNC())``),
    read from pyproject.toml so that the test follows the declared entry point."""
    found = re.search(r'^onlstm = "([\w.]+):(\w+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert found, "pyproject.toml declares no onlstm script"
    module, func = found.groups()
    return [sys.executable, "-c", f"import re, sys\nfrom {module} import {func}\nsys.exit({func}())", "onlstm"]


def interrupt(cmd: list[str], delay: float, signum: int = signal.SIGINT, cwd: Path | None = None):
    """Start ``cmd``, send ``signum`` after ``delay`` seconds (when it is still running) and wait for it."""
    proc = subprocess.Popen(cmd, env=ENV, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def assert_interrupted(rc: int, err: str, what: str) -> None:
    assert "Traceback" not in err, f"{what}:\n{err[-3000:]}"
    if rc == -signal.SIGINT and not err.strip():
        return  # the signal came before Python installed its handler (the first milliseconds): the shell says 130
    assert rc == 130, f"{what}: exit {rc}\n{err[-2000:]}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].endswith("interrupted"), f"{what}: {err[-2000:]}"


@pytest.mark.slow  # each run imports torch in a new process until the signal: about 1 s each
@pytest.mark.parametrize("how", ["module", "script"])
def test_ctrl_c_at_any_point_of_start_up_is_one_line_and_130(how):
    base = [sys.executable, "-m", "onlstm"] if how == "module" else console_script()
    for delay in delays(12 if FULL else 4, 0.0, 1.5, how):
        rc, _, err = interrupt([*base, "presets"], delay)
        if rc == 0:
            continue  # it finished first
        assert_interrupted(rc, err, f"SIGINT after {delay:.3f} s")
