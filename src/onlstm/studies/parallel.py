"""Runs trained as N processes at once, for ``logic compare --jobs N`` and ``lm compare --jobs N`` (docs/logic.md,
"Comparison"; docs/lm.md, "A study with seeds").

Each run is a process of its own (``python -c`` calling the experiment's ``entry`` function on the job's ``payload``,
its output in ``OUT/<cell>-seed<seed>.log``), started in a session of its own so that a Ctrl-C at the terminal reaches only
this process, which passes one stop request on to every running run: each then stops after its step and saves
its resume file, as a run alone does. A second Ctrl-C passes a second one on, which aborts them without saving.
SIGTERM and SIGHUP (the terminal closed) are a Ctrl-C here too. A comparison that ends without passing anything
on (SIGKILL) still stops its runs: each asked the kernel for a SIGTERM when its parent dies (:func:`_stop_with`),
so none goes on as an orphan holding its run's lock.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..device import StopRequest
from ..errors import EXIT_INTERRUPTED, OnlstmError, first_line
from ..nn.capabilities import usable_cpus
from ..saved import RunFiles


@dataclass
class Job:
    """One run to train: its name in the log, its folder, whether it goes on from its resume file, and what its
    process runs: ``entry`` (``module:function``, called with ``payload``, JSON values; returns the exit status)."""

    name: str
    run_dir: Path
    resume: bool
    entry: str
    payload: dict
    command: str = "onlstm"  # names the process's one-line errors, as the command itself would

    @property
    def log_path(self) -> Path:
        return self.run_dir.with_name(self.run_dir.name + ".log")


def threads_per_job(threads: int | None, jobs: int) -> int:
    """A run's CPU threads: ``threads`` when set, else the CPUs this process may use shared out between ``jobs``
    processes (each would otherwise take every core)."""
    return threads or max(1, usable_cpus() // jobs)


def train_in_processes(todo: list[Job], jobs: int, log: Callable[[str], None]) -> list[Ended]:
    """Train every job, ``jobs`` at a time; returns the runs that did not finish (interrupted, failed or, after
    a stop request, not started). A stop request starts no further run."""
    waiting, running, ended = list(todo), {}, []
    with StopRequest() as stop:
        forwarded = False
        try:
            while waiting or running:
                while waiting and len(running) < jobs and not stop.requested:
                    job = waiting.pop(0)
                    running[job.name] = (job, _start(job))
                    log(f"== {job.name}: {'resuming' if job.resume else 'training'} in a process of its own "
                        f"(log: {job.log_path})")  # fmt: skip
                if stop.requested and not forwarded:
                    _signal_all(running)
                    forwarded = True
                for name, (job, proc) in list(running.items()):
                    if proc.poll() is not None:
                        del running[name]
                        ended.append(_ended(job, proc.returncode, log))
                if stop.requested and waiting:
                    ended += [Ended(job.name, EXIT_INTERRUPTED, "not started") for job in waiting]
                    waiting.clear()
                time.sleep(0.2)
        except KeyboardInterrupt:  # a second Ctrl-C: the runs abort without saving, as one alone does
            _signal_all(running)
            raise
    return [e for e in ended if e.code != 0]


@dataclass
class Ended:
    """How a run's process ended: its exit status (0: its budget ended it) and, if not 0, why in words; ``signal``:
    the signal that killed it (its status is then 130, as for an interrupted run: its last checkpoint is kept)."""

    name: str
    code: int
    why: str = ""
    signal: str = ""


STOPPED_EARLY = "stopped before the run began: nothing saved"


def _start(job: Job) -> subprocess.Popen:
    spec = {"entry": job.entry, "payload": job.payload, "parent": os.getpid(), "command": job.command}
    log = open(job.log_path, "a", encoding="utf-8")  # the child holds it open; closed here at once
    try:
        # a stop request while the child imports torch and the experiment (seconds) is held until the imports are
        # done, then ends it in one line (a KeyboardInterrupt inside torch's C++ start-up failed the import: a
        # traceback, exit 1); one while onlstm.stops loads (nothing heavy) ends it the same way
        code = (
            "import sys\ntry:\n    from onlstm.stops import held_signals\n\n    with held_signals():\n"
            "        from onlstm.studies.parallel import child, entry\n\n        run = entry()\n"
            f"except KeyboardInterrupt:\n    print({STOPPED_EARLY!r}, flush=True)\n    sys.exit({EXIT_INTERRUPTED})\n"
            "child(run)"
        )
        # the same onlstm as this process's, installed or not
        here = str(Path(__file__).resolve().parents[2])
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
        }
        cmd = [sys.executable, "-c", code, json.dumps(spec)]
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    finally:
        log.close()


def _signal_all(running: dict) -> None:
    """One stop request (SIGINT) to every run's process still going."""
    for _, proc in running.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)


def _ended(job: Job, rc: int, log: Callable[[str], None]) -> Ended:
    if rc == 0:
        log(f"== {job.name}: finished")
        return Ended(job.name, 0)
    saved = RunFiles(job.run_dir).resume_path.exists()  # a run stopped before its first save has nothing to go on from
    if rc < 0:  # killed by a signal (Popen's -N): not an exit status a command documents
        name = _signal_name(-rc)
        kept = (
            "its last checkpoint is kept; the same command goes on from it"
            if saved
            else "nothing saved: it starts again"
        )
        why = f"killed by {name}; {kept}"
        log(f"== {job.name}: {why}; log: {job.log_path}")
        return Ended(job.name, EXIT_INTERRUPTED, why, name)
    stopped = "interrupted (its resume file saved)" if saved else "stopped before it saved anything"
    why = stopped if rc == EXIT_INTERRUPTED else f"failed (exit {rc}): {_last_line(job)}"
    log(f"== {job.name}: {why}; log: {job.log_path}")
    return Ended(job.name, rc, why)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _last_line(job: Job) -> str:
    try:
        lines = [line for line in job.log_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"


def entry() -> Callable:
    """This run's entry function (``module:function`` in the job's spec, this process's argument), imported."""
    module, function = json.loads(sys.argv[1])["entry"].split(":")
    return getattr(importlib.import_module(module), function)


def child(run: Callable) -> None:
    """A run's process: call its entry ``run`` (:func:`entry`) on its payload; exit with the status it returns (0:
    its budget ended it, 130: interrupted, resume file saved), or one line and the error's status."""
    spec = json.loads(sys.argv[1])
    signal.signal(signal.SIGTERM, _interrupt)  # until the training's own handler: a stop before it began
    # SIGINT too: a parent started in the background (`cmd &`, nohup) hands its children SIGINT ignored, and the
    # stop request a comparison passes on is a SIGINT
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _stop_with(spec["parent"])
        status = run(spec["payload"])
    except KeyboardInterrupt:  # a second stop request, or one before the training began: nothing saved
        sys.exit(EXIT_INTERRUPTED)
    except OnlstmError as exc:  # one line, as the command prints it, for the comparison to quote
        print(f"{spec['command']}: {first_line(exc)}", flush=True)
        sys.exit(exc.exit_code)
    sys.exit(status)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


#: prctl's option: the signal this process gets when the thread that started it ends (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def _stop_with(parent: int) -> None:
    """SIGTERM to this run's process (a stop request: it saves its resume file and releases its lock) as soon as the
    comparison ``parent`` is gone, however it ended. On Linux the kernel sends it (prctl's PR_SET_PDEATHSIG: no
    delay, nothing to poll; it follows the thread that started the process, which waits in
    :func:`train_in_processes` for every run); elsewhere a thread looks once a second whether the parent has changed."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0:
                if os.getppid() != parent:  # it was gone before the request was made
                    os.kill(os.getpid(), signal.SIGTERM)
                return
        except (OSError, AttributeError):  # no prctl in this C library: the thread below
            pass
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
