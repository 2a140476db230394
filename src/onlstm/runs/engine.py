"""The training loop every experiment shares: an experiment plugs in a :class:`Task`, :class:`Engine` runs it
under a :class:`Budget` carrying a :class:`Progress` record; budgets, validation, best/last weights, the
divergence stop, Ctrl-C/SIGTERM and an exact resume (the stopping rules: docs/design.md §4.6)."""

from __future__ import annotations

import csv
import io
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from ..checkpoint import read_json
from ..errors import InputError, TrainingDiverged, WriteError
from ..files import write_json, write_text
from .device import StopRequest, progress_bar
from .dirs import RunDir, find_kind
from .resume import RESUME_FIX, Progress, check_history, read_training, restart_refusal, restore_training, save_training


@dataclass(frozen=True)
class Budget:
    """When a run stops: whichever of these comes first."""

    epochs: int
    valid_every: int  # updates between validation checks; 0: at the end of every pass
    max_steps: int | None = None
    time_limit: float | None = None  # minutes
    patience: int | None = None  # checks in a row without a new best
    check_at_stop: bool = True  # max_steps / time_limit validate the last update (else: the resume file only)
    save_every: int | None = None  # updates between resume files written between checks


#: The least time between two log lines of a run (its ``steps.csv`` has every report).
LINE_SECONDS = 30.0


@dataclass(frozen=True)
class Reporting:
    """What a run reports between validation checks, every ``every`` updates: the progress bar's figures, a
    plain log line instead when the bar is not on a terminal (``lines``), a row of ``csv`` and, with
    ``tensorboard`` (a folder), TensorBoard scalars. Off (``every=0``): the bar only. Log lines are kept at
    least ``line_seconds`` apart, so that a fast run's log stays readable (``steps.csv`` has every report)."""

    every: int = 0
    lines: bool = False
    csv: Path | None = None
    tensorboard: Path | None = None
    line_seconds: float = 30.0  # at least this long between two log lines (a pass's end always has one)

    @classmethod
    def for_run(cls, run: RunDir, every: int, progress: bool, tensorboard: bool, main: bool = True) -> Reporting:
        """A run's reporting: its ``steps.csv`` (and ``tensorboard/``) written by the main process only; log
        lines when ``progress`` is asked for and the bar would not be seen beside the log (stderr is not a
        terminal, or the log, stdout, goes elsewhere)."""
        lines = progress and main and not (_is_terminal(sys.stderr) and _is_terminal(sys.stdout))
        board = run.tensorboard_path if main and tensorboard else None
        return cls(every, lines, run.steps_path if main else None, board, LINE_SECONDS)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


class Interrupted(Exception):
    """Raised by a task's validation when a stop was requested during it."""


@dataclass
class Check:
    """One validation: ``score`` (higher is better; a non-finite one is never the best) and the history
    record (must hold ``step`` when ``valid_every`` counts updates)."""

    score: float
    record: dict[str, Any]


@dataclass
class Saved:
    """A task's part of its resume file: the ``model`` and ``optimizer`` it trains on ``device`` (their state and the
    random state are saved: :func:`~onlstm.runs.resume.save_training`), its own ``tensors`` and JSON ``meta``."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


class Task(Protocol):
    """What an experiment plugs into :class:`Engine`; ``state``: the dataclass it carries in ``Progress.task``,
    ``row``: that of a validation record (both checked when read back: :func:`~onlstm.config.read_record`)."""

    state: type
    row: type

    def pass_batches(self, prog: Progress) -> Sequence:
        """The batches of the pass in progress, the same list again when resumed in the middle of it."""

    def train_step(self, batch, prog: Progress) -> float | None:
        """One update; returns the training loss (a non-finite one stops the run), or None when the task
        checks it itself (e.g. without waiting for the device at every step)."""

    def end_pass(self, prog: Progress, complete: bool) -> bool | None:
        """After every update (``complete``: the pass's last batch was used): None to go on with the pass, else
        whether the pass that ends counts as an epoch (the task prepares the next pass in ``prog.task``)."""

    def validation(self, prog: Progress) -> Check:
        """Score the current weights on the validation data (may raise :class:`Interrupted`)."""

    def after_check(self, prog: Progress, check: Check, improved: bool) -> str:
        """Schedules that follow a check (e.g. decay the learning rate); returns a note for the log line."""

    def save_weights(self, tag: str) -> None:
        """Write the weights of ``tag``, ``best`` or ``last``."""

    def fresh_progress(self) -> Progress:
        """A new run's progress record, with what ``Progress.task`` carries as it starts."""

    def resume_state(self, prog: Progress) -> Saved:
        """What the resume file holds of the task at ``prog`` (every process is asked: a task may gather it)."""

    def write_files(self, prog: Progress, history: list[dict]) -> None:
        """The task's files written after each resume file (its history for people and plots, its last weights)."""

    def restore(self, prog: Progress, tensors: dict, meta: dict, path: Path) -> Saved:
        """Take back the task's own part of the resume file ``path`` (its tensors and metadata values, checked);
        returns the model and optimizer whose saved state the engine then puts back."""

    def epochs(self, prog: Progress) -> float:
        """The passes done at ``prog`` (a fraction for a part), for the stop line and the result."""

    def finish(self, why: str, prog: Progress) -> tuple[dict[str, Any], str | None]:
        """After the loop stopped for ``why``: the experiment's figures for the result, and its status when it is
        not :data:`STATUS`'s (lm: a final test that was interrupted), else None."""

    def metrics(self, prog: Progress) -> dict[str, float]:
        """The training figures since the previous call (the loss, a perplexity or an accuracy, a speed named
        ``..._per_s``), for the progress bar, the log lines, ``steps.csv`` and TensorBoard."""


def budget_spent(budget: Budget, prog: Progress, seconds: float, epochs: bool = False) -> str:
    """The budget that a run at ``prog`` after ``seconds`` of training has used up, checked in the engine's order:
    ``max_steps``, ``time_limit``, then (``epochs=True``; the engine's loop checks them itself) ``epochs``; ""
    when none (training goes on). The one check for the engine's stops and a resume's refusal."""
    if budget.max_steps is not None and prog.step >= budget.max_steps:
        return "max_steps"
    if budget.time_limit is not None and seconds > 60 * budget.time_limit:
        return "time_limit"
    return "epochs" if epochs and prog.epoch >= budget.epochs else ""


def budget_refusal(budget: Budget, prog: Progress) -> str:
    """Why a resumed run at ``prog`` cannot train further under ``budget`` (:func:`budget_spent`), with the flag that
    raises the budget; "" when it can."""
    why = budget_spent(budget, prog, prog.seconds, epochs=True)
    if not why:
        return ""
    used = dict(max_steps=f"{prog.step} updates", time_limit=f"{prog.seconds / 60:.1f} min")
    used.update(epochs=f"{prog.epoch} epochs")
    spent = f"its {used[why]} reach {why} {getattr(budget, why):g}"
    return f"the run has used up its budget ({spent}; pass a larger --{why.replace('_', '-')} to train further)"


#: The stops a larger budget undoes (a run ended by patience is final).
BUDGETS = ("epochs", "max_steps", "time_limit")


def resume_refusal(run: RunDir, kind: str, budget: Budget) -> str:
    """Why ``--resume`` cannot train ``run`` further under ``budget``; "" when it can: a resume file and a budget
    not used up yet (an interrupted run, or one stopped by a budget that ``budget`` raises), or no resume file and
    nothing to lose (:func:`~onlstm.runs.restart_refusal`). The one rule of every trainer."""
    result = run.results() or {}
    finished = result.get("status") in ("finished", "stopped")
    if finished and result.get("stopped_by") not in BUDGETS:
        return f"{run.path} holds a run ended by {result.get('stopped_by')}, which is final; train into a new --out"
    if refusal := restart_refusal(run):
        return refusal
    if not finished:  # resumed whatever its budget: the engine ends it without an update past the budget
        return ""
    return budget_refusal(budget, read_training(run.resume_path, kind, tensors=False)[0])


#: A run's ``status`` for each reason :meth:`Engine.run` stops: ``finished`` (its epochs or patience ended it),
#: ``stopped`` (``max_steps`` or ``time_limit``: a larger one trains it further), ``interrupted`` (resumable).
STATUS = dict(epochs="finished", patience="finished", max_steps="stopped", time_limit="stopped")
STATUS.update(interrupted="interrupted", aborted="interrupted", diverged="diverged")


@dataclass
class TrainResult:
    """What every trainer returns, and as :meth:`record` the run's one result file (``results.json``, written when
    a training stops): its ``status`` (:data:`STATUS`), why it stopped (``stopped_by``), the best validation
    score (higher is better: a logic accuracy, a language model's minus loss) and its step, the updates, epochs
    and seconds of training, the experiment's own ``figures`` (lm: the final test), the validation ``history``
    and the engine's :class:`Progress` (these two are in the run's other files)."""

    out_dir: Path
    kind: str
    status: str
    stopped_by: str
    best: float | None
    best_step: int
    steps: int
    epochs: float
    seconds: float
    figures: dict[str, Any] = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress)

    @property
    def interrupted(self) -> bool:
        return self.status == "interrupted"

    def record(self) -> dict[str, Any]:
        """What ``results.json`` holds: everything but the history and the progress record."""
        rec = {k: getattr(self, k) for k in ("kind", "status", "stopped_by", "best", "best_step", "steps")}
        return {**rec, "epochs": round(self.epochs, 4), "seconds": round(self.seconds, 1), **self.figures}

    def model(self) -> Any:
        """The run's best model (its last weights when no check was done), opened as its kind opens it."""
        return find_kind(self.kind).model.from_pretrained(self.out_dir)


def update(optimizer, loss, params, clip: float) -> None:
    """Every trainer's backward pass and optimizer step, the gradient norm clipped at ``clip`` (0: none)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(params, clip)
    optimizer.step()


class Engine:
    """Runs a :class:`Task` under a :class:`Budget`; :meth:`run` returns why it stopped: ``epochs``, ``patience``,
    ``max_steps``, ``time_limit``, ``interrupted`` or ``aborted``. ``on_step``: called after every update;
    ``agree``: a process's wish to stop -> the decision every process takes; ``run``, ``kind``: the run directory
    and its kind, where :meth:`record` writes the result (``writes``: how; several processes: by the first)."""

    def __init__(
        self,
        task: Task,
        budget: Budget,
        log: Callable[[str], None],
        bar: bool = False,
        desc: str = "",
        on_step: Callable[[], None] | None = None,
        agree: Callable[[bool], bool] = bool,
        report: Reporting | None = None,
        run: RunDir | None = None,
        kind: str = "",
        writes: Callable[[Callable[[], object]], object] = lambda write: write(),
    ):
        self.task, self.budget, self.progress, self.history = task, budget, task.fresh_progress(), []
        self.run_dir, self.kind, self.writes = run, kind, writes
        self.log, self.show_bar, self.desc, self.on_step, self.agree = log, bar, desc, on_step, agree
        self.report = report or Reporting()
        self.bar: Any = None
        self.start = 0.0
        self.session = (0, 0.0)  # step and clock at this session's start: the speed behind the time left
        self.last_line = 0.0  # clock of the last log line
        self.stop = StopRequest()
        self.steps: StepLog | None = None
        self.why = ""  # why the run stopped (:meth:`run`)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def begin(self, resume: bool, header: dict, vocab: Callable[[Path], None]) -> bool:
        """A new run writes its ``header`` and vocabulary (:meth:`RunDir.write_header`, by the first process); a
        resumed one takes back its progress, history, weights, optimizer and random state from its resume file, or
        without one (it stopped before its first save: the trainer's pre-check allowed it) starts from step 0.
        True when it goes on from a resume file."""
        run, task = self.run_dir, self.task
        assert run is not None, "Engine(run=...) says where the run is"
        path = run.resume_path
        if not resume:
            self.writes(lambda: run.write_header(header, vocab))
        elif not path.exists():
            self.log(f"{run.path} has no {run.RESUME} yet; starting from the beginning")
        if not (resume and path.exists()):
            return False
        prog, tensors, meta = read_training(path, self.kind, task=task.state)
        old = "history" not in meta  # a logic resume file written before it held the history: its history.json
        where = run.history_path if old else path
        history = check_history(
            read_json(where) if old else meta["history"], task.row, where, RESUME_FIX, prog.n_checks
        )
        saved = task.restore(prog, tensors, meta, path)
        restore_training(path, tensors, meta["optimizer"], saved.model, saved.optimizer, saved.device)
        self.progress, self.history = prog, history[: prog.n_checks]
        return True

    def run(self) -> str:
        prog, budget = self.progress, self.budget
        self.start = time.perf_counter() - prog.seconds
        self.session, self.last_line = (prog.step, prog.seconds), prog.seconds
        self.steps = StepLog(self.report, prog.step, self._write)
        why = "epochs"
        try:
            with self.stop as stop:
                if prog.check_due and self.check():
                    return "patience"
                # resumed with a budget already used up: no update past it
                spent = budget_spent(budget, prog, self.elapsed())
                if self.agree(bool(spent)):
                    return spent or "time_limit"  # another process's clock: the one budget that can differ
                while prog.epoch < budget.epochs:
                    why = self._pass(stop)
                    if why != "epochs":
                        break
                else:
                    if budget.valid_every and prog.step and (not self.history or self.history[-1]["step"] != prog.step):
                        self.check()  # the updates after the last check count too
        except Interrupted:  # during a validation: the resume file says that it is due
            why = "interrupted"
        except KeyboardInterrupt:  # a second Ctrl-C (or one outside the signal handler): no resume file written
            why = "aborted"
        finally:
            self._close_bar()
            self.steps.close()
        if why == "interrupted":
            self.save_state()
        return why

    def _pass(self, stop: StopRequest) -> str:
        """The rest of the pass in progress; returns ``epochs`` when it ended and training goes on."""
        prog = self.progress
        batches = self.task.pass_batches(prog)
        if not 0 <= prog.pos < len(batches):  # else the loop below would not run and nothing would end the pass
            raise InputError(
                "no training batches in a pass: the training data is too small for the batch size"
                if not batches
                else f"the saved position (batch {prog.pos} of the pass) is past its {len(batches)} batches: "
                "the resume file was changed or belongs to other data; train again without --resume"
            )
        desc = f"{self.desc} epoch {prog.epoch + 1}/{self.budget.epochs}".strip()
        bar = {"total": len(batches), "initial": prog.pos, "desc": desc, "leave": False, "dynamic_ncols": True}
        self.bar = progress_bar(self.show_bar, **bar)
        for k in range(prog.pos, len(batches)):
            loss = self.task.train_step(batches[k], prog)
            if loss is not None and not math.isfinite(loss):  # the weights are broken: nothing more is saved
                self._close_bar()
                best = RunDir.WEIGHTS.format(tag="best")
                kept = "" if prog.best is None else f"{best} (validation {prog.best:.4g} at step {prog.best_step})"
                raise diverged(loss, f"at step {prog.step + 1}", kept)
            prog.step += 1
            prog.pos += 1
            if self.on_step is not None:
                self.on_step()
            self.bar.update(1)
            every = self.report.every
            if every and (prog.step % every == 0 or prog.pos == len(batches)):
                self._report(len(batches))
            counts = self.task.end_pass(prog, prog.pos == len(batches))
            if counts is not None:
                prog.epoch += int(counts)
                prog.pos = 0
            why = self._after_step(stop, counts is not None)
            if why != "epochs" or prog.pos == 0:
                break
        self._close_bar()
        return why

    def _after_step(self, stop: StopRequest, pass_ended: bool) -> str:
        """A validation check when one is due, then the stopping rules; returns ``epochs`` to go on."""
        prog, budget = self.progress, self.budget
        checked = prog.step % budget.valid_every == 0 if budget.valid_every else pass_ended
        if checked and self.check():
            return "patience"
        why = budget_spent(budget, prog, self.elapsed()) or ("interrupted" if stop.requested else "epochs")
        if not self.agree(why != "epochs"):
            if budget.save_every and prog.step % budget.save_every == 0 and not checked:
                self.save_state()
            return "epochs"
        if why in ("max_steps", "time_limit") and not checked:
            # the run's last figures are those of its last update
            self.check() if budget.check_at_stop else self.save_state()
        return "interrupted" if why == "epochs" else why  # "epochs": another process was asked to stop

    def train(self, resume: str, best: Callable[[float], str]) -> TrainResult:
        """:meth:`run`, the stop's line in the log (:meth:`stop_line`), what the task does then (``Task.finish``) and
        the result, written (:meth:`record`) and returned; ``why``: the reason :meth:`run` gave. A divergence's
        result (status ``diverged``) is written before the error goes on; a run ended by patience is final (its
        resume file goes)."""
        try:
            self.why = self.run()
        except TrainingDiverged:
            self.record("diverged")
            raise
        line = self.stop_line(self.why, resume, best)
        self.log(f"{self.desc}: {line}" if self.desc else line)
        result = self.record(self.why, *self.task.finish(self.why, self.progress))
        if self.why == "patience" and (run := self.run_dir) is not None:
            self.writes(lambda: run.resume_path.unlink(missing_ok=True))
        return result

    def stop_line(self, why: str, resume: str, best: Callable[[float], str]) -> str:
        """Where the run stopped (:meth:`run` returned ``why``), what is kept and how to go on: ``resume``, the
        command that continues it; ``best(score)``, the best check's score in words (``valid acc 97.10%``)."""
        prog, budget, epochs = self.progress, self.budget, self.task.epochs(self.progress)
        kept = "no best checkpoint yet (no validation check done)"
        if prog.best is not None:
            kept = f"best checkpoint kept ({best(prog.best)} at step {prog.best_step})"
        if why in ("interrupted", "aborted"):
            during = " during validation" if prog.check_due else ""
            what = "resume file saved" if why == "interrupted" else "not saved since the last resume file"
            saved = self.run_dir is not None and self.run_dir.resume_path.exists()
            go_on = f"continue with: {resume}" if saved else f"nothing saved yet: {resume} starts it again from step 0"
            return f"{why}{during} at step {prog.step} ({epochs:.2f} epochs): {what}; {kept}; {go_on}"
        line = f"stopped by {why} after {prog.step} steps ({epochs:.2f} epochs, {prog.seconds / 60:.1f} min); {kept}"
        if why == "patience":  # final
            return line
        limit = {"epochs": budget.epochs, "max_steps": budget.max_steps, "time_limit": budget.time_limit}[why]
        return f"{line}; to train further: {resume} --{why.replace('_', '-')} N (N > {limit:g})"

    def record(self, why: str, figures: dict | None = None, status: str | None = None) -> TrainResult:
        """The run's :class:`TrainResult` after :meth:`train` returned ``why`` (or ``diverged``), written to its
        ``results.json``: ``figures``, the experiment's own; ``status``, when not :data:`STATUS`'s."""
        prog, run = self.progress, self.run_dir
        assert run is not None, "Engine(run=...) says where the result goes"
        stopped_by = "interrupted" if why == "aborted" else why
        result = TrainResult(
            run.path, self.kind, status or STATUS[why], stopped_by, prog.best, prog.best_step, prog.step,
            self.task.epochs(prog), self.elapsed(), dict(figures or {}), self.history, prog,
        )  # fmt: skip
        self.writes(lambda: write_json(run.results_path, result.record()))
        return result

    def check(self) -> bool:
        """Validate, keep the best and last weights, record, write the resume file; True when patience ran out."""
        prog = self.progress
        try:
            result = self.task.validation(prog)
        except Interrupted:
            prog.check_due = True
            raise
        prog.check_due = False
        improved = math.isfinite(result.score) and (prog.best is None or result.score > prog.best)
        if improved:
            prog.best, prog.best_step, prog.bad_checks = result.score, prog.step, 0
            self.task.save_weights("best")
        else:
            prog.bad_checks += 1
        note = self.task.after_check(prog, result, improved)
        self.task.save_weights("last")
        self.history.append({**result.record, "best": improved})
        if self.steps is not None:
            self.steps.scalars("check", prog.step, result.record)
        self.save_state()
        self._write(note)
        return self.budget.patience is not None and prog.bad_checks >= self.budget.patience

    def _report(self, n_batches: int) -> None:
        """The task's figures since the last report on the bar, in a log line (when the bar is not seen) and in
        the run's ``steps.csv`` and TensorBoard; ``n_batches``: the pass in progress's length."""
        prog, figures = self.progress, self.task.metrics(self.progress)
        left, epoch = self.time_left(n_batches), prog.epoch + prog.pos / max(n_batches, 1)
        shown = {name.replace("_per_s", "/s"): _figure(name, value) for name, value in figures.items()}
        self.bar.set_postfix({**shown, "left": _duration(left)})
        now, end = self.elapsed(), prog.pos == n_batches
        if self.report.lines and (end or now - self.last_line >= self.report.line_seconds):
            self.last_line = now
            parts = [f"step {prog.step}", f"epoch {epoch:.2f}", *(f"{k} {v}" for k, v in shown.items())]
            parts += [f"elapsed {_duration(now)}", f"left {_duration(left)}"]
            self._write(" | ".join([f"{self.desc} {parts[0]}".strip(), *parts[1:]]))
        if self.steps is not None:
            self.steps.add(prog.step, epoch, self.elapsed(), figures)

    def time_left(self, n_batches: int) -> float | None:
        """Seconds until the budget ends at this session's speed (validation included), None before any step:
        the rest of the epochs (the passes as long as this one), ``max_steps`` and ``time_limit``, whichever
        comes first."""
        prog, budget = self.progress, self.budget
        steps, seconds = prog.step - self.session[0], self.elapsed() - self.session[1]
        if steps <= 0 or seconds <= 0:
            return None
        todo = n_batches - prog.pos + max(budget.epochs - prog.epoch - 1, 0) * n_batches
        if budget.max_steps is not None:
            todo = min(todo, budget.max_steps - prog.step)
        left = max(todo, 0) * seconds / steps
        if budget.time_limit is not None:
            left = min(left, 60 * budget.time_limit - self.elapsed())
        return max(left, 0.0)

    def save_state(self) -> None:
        """Write the resume file (:data:`~onlstm.runs.resume.RESUME_FORMAT`), then the task's files that go with it."""
        prog, history, run = self.progress, self.history, self.run_dir
        assert run is not None, "Engine(run=...) says where the resume file goes"
        prog.seconds, prog.n_checks = self.elapsed(), len(history)
        saved = self.task.resume_state(prog)

        def write() -> None:
            model, optimizer, device = saved.model, saved.optimizer, saved.device
            save_training(
                run.resume_path, self.kind, prog, model, optimizer, device, saved.tensors, history=history, **saved.meta
            )
            self.task.write_files(prog, history)

        self.writes(write)

    def _write(self, msg: str) -> None:
        if self.bar is not None and self.log is print:
            self.bar.write(msg)  # keeps a progress bar intact
        else:
            self.log(msg)

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _figure(name: str, value: float) -> str:
    if name.endswith("_per_s"):
        return f"{value:,.0f}"
    if name == "accuracy":
        return f"{100 * value:.1f}%"
    return f"{value:.4g}"


def _duration(seconds: float | None) -> str:
    """``1:02:03`` or ``2:03``; ``?`` when not known."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class StepLog:
    """A run's figures between validation checks: rows of ``steps.csv`` (step, epoch, elapsed_s, the task's
    figures) and, when asked for and installed, TensorBoard scalars (``train/...`` and each check's ``check/...``).
    A resumed run keeps the rows up to the step it resumes from; a new one starts the file anew. A file that
    cannot be written is reported once and left alone: these figures are a view of the training, which goes on."""

    def __init__(self, report: Reporting, from_step: int, log: Callable[[str], None]):
        self.path, self.log, self.columns = report.csv, log, None
        self.tensorboard: Any = None
        if self.path is not None:
            self._keep_until(from_step)
        if report.tensorboard is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                log(
                    "no TensorBoard logs: the tensorboard package is not installed (pip install tensorboard); "
                    f"the training figures are in {report.csv or RunDir.STEPS}"
                )
            else:
                self.tensorboard = SummaryWriter(str(report.tensorboard))

    def _keep_until(self, step: int) -> None:
        if self.path is None:
            return
        path = self.path
        try:
            rows = list(csv.reader(io.StringIO(path.read_text()))) if path.exists() else []
            kept = [r for r in rows[1:] if r and int(r[0]) <= step] if step else []
        except (OSError, ValueError):  # unreadable or not ours: begun anew
            rows, kept = [], []
        if rows and kept:
            self.columns = rows[0]
            self._guard(lambda: write_text(path, _csv_text([rows[0], *kept])))
        else:
            self._guard(lambda: path.unlink(missing_ok=True))

    def add(self, step: int, epoch: float, elapsed: float, figures: dict[str, float]) -> None:
        path = self.path
        if path is not None:
            row = {"step": step, "epoch": round(epoch, 4), "elapsed_s": round(elapsed, 1)}
            row.update({k: round(v, 6) for k, v in figures.items()})
            lines = [list(row.values())]
            if self.columns != list(row):  # a new file (or other figures than an earlier session's): a header
                lines.insert(0, list(row))
                self.columns = list(row)
                self._guard(lambda: path.unlink(missing_ok=True))
            self._guard(lambda: self._append(_csv_text(lines)))
        self.scalars("train", step, figures)

    def _append(self, text: str) -> None:
        if self.path is None:  # given up after a failed write
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)

    def _guard(self, write: Callable[[], None]) -> None:
        try:
            write()
        except OSError as exc:
            if self.path is not None:
                self.log(f"{WriteError(self.path, exc, atomic=False)}; the training figures are no longer written")
            self.path = None

    def scalars(self, prefix: str, step: int, values: dict[str, Any]) -> None:
        """The numbers among ``values`` (finite ints and floats) as TensorBoard scalars ``prefix/name``."""
        if self.tensorboard is not None:
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self.tensorboard.add_scalar(f"{prefix}/{name}", value, step)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None


def _csv_text(rows: list[list]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def diverged(loss: float, when: str, kept: str = "", clip: float = 1.0) -> TrainingDiverged:
    """Every trainer's error for a NaN or infinite training loss ``when`` (``at step 7``), naming the files
    ``kept`` from before and how to train again."""
    kept = f"; kept from before: {kept}" if kept else ""
    return TrainingDiverged(
        f"training diverged: the training loss is {loss} {when}; the diverged weights were not saved{kept}; "
        f"lower --lr or set --clip (e.g. {clip}) and train into a new --out"
    )
