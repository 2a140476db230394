"""The training engine every experiment shares (docs/design.md §4.6): :func:`train_run`, a training's one entry, and
:class:`Engine`, the one loop, which runs the experiment's :class:`Task`."""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from ..checkpoint import read_json, save_weights
from ..device import StopRequest, resolve_device, setup_torch
from ..errors import InputError, RunDirError, TrainingDiverged
from ..files import write_json
from ..saved import find_kind
from .budget import BUDGETS, Budget, BudgetOptions, budget_refusal, budget_spent
from .dirs import RunDir
from .dist import DistContext, setup, teardown
from .report import Report
from .resume import (
    RESUME_FIX,
    Progress,
    check_history,
    checked,
    not_a_run,
    read_training,
    restart_refusal,
    restore_training,
    resume_settings,
    save_training,
)


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
    """What the engine saves of a task: the ``model`` and ``optimizer`` it trains on ``device`` (in the resume file
    with the random state, :func:`~onlstm.runs.resume.save_training`), its own ``tensors`` and JSON ``meta``;
    ``evaluated()``: the context in which the model holds the weights evaluation uses (lm: the running average),
    those of the ``best`` and ``last`` weights files."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    evaluated: Callable[[], Any] = contextlib.nullcontext


class Task(Protocol):
    """What differs between experiments. Its attributes: ``state``, a new run's state (a dataclass: carried in
    ``Progress.task``, checked when read back), ``row``, the dataclass of a history row, ``header`` and
    ``vocab(path)``, a new run's ``config.json`` and vocabulary writer, ``valid_every`` (updates between checks; 0:
    at every pass's end), ``steps_per_epoch`` (0: a pass is an epoch), ``unit`` (what a step's ``n`` counts),
    ``perplexity`` (report ``exp(loss)``), ``desc`` (the words before its log lines), ``resume_command`` and
    ``score_words(score)`` (the best score in words). The engine sets ``engine``."""

    state: Any
    row: type
    header: dict
    vocab: Callable[[Path], None]
    valid_every: int
    steps_per_epoch: int
    unit: str
    perplexity: bool
    desc: str
    resume_command: str
    score_words: Callable[[float], str]
    engine: Engine

    def pass_batches(self, prog: Progress) -> Sequence:
        """The batches of the pass in progress, the same list again when resumed in the middle of it."""

    def train_step(self, batch, prog: Progress) -> dict[str, Any]:
        """One update; returns its running figures as sums: ``loss`` (summed over the step's items), ``n`` (its
        items) and others (``accuracy``: the items right), numbers or tensors on the device (read and checked when
        the engine reports or validates: no wait for the device per step); a non-finite loss stops the run."""

    def end_pass(self, prog: Progress, complete: bool) -> bool | None:
        """After every update (``complete``: the pass's last batch was used): None to go on with the pass, else
        whether the pass that ends counts as an epoch (the task prepares the next pass in ``prog.task``)."""

    def validation(self, prog: Progress) -> Check:
        """Score the current weights on the validation data (may raise :class:`Interrupted`); ``prog.sums`` holds
        the training figures since the last check."""

    def after_check(self, prog: Progress, check: Check, improved: bool) -> str:
        """Schedules that follow a check (e.g. decay the learning rate); returns the check's log line."""

    def resume(self, prog: Progress, read: tuple[dict, Any, Path] | None = None) -> Saved:
        """What the engine saves of the task at ``prog`` (every process is asked: a task may gather it); with
        ``read`` (the resume file's tensors, its metadata, the file's path), the task takes back its part
        first."""

    def finish(self, why: str, prog: Progress) -> tuple[dict[str, Any], str | None]:
        """After the loop stopped for ``why``: the experiment's figures for the result, and its status when it is
        not :data:`STATUS`'s (lm: a final test that was interrupted), else None."""


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


@dataclass
class Plan:
    """What a training asks of :func:`train_run` besides its task: its ``kind`` and ``command`` (``onlstm lm
    train``), the run directory ``out``; the settings ``given`` by the user (``{section: {field: value}}``), which
    ``parse`` checks (sections in, every setting out, defaults filled) and ``build`` turns into the configs
    (``{"train": BudgetOptions, ...}``); ``runtime``: the fields a resumed run may change. ``keep``: names a new
    run's folder may hold; ``replace``: a run of this kind may be trained over (``logic compare``);
    ``distributed``: joins the process group under torchrun; ``on_step(task)``: after every update."""

    kind: str
    command: str
    out: Path
    given: Mapping[str, Mapping]
    parse: Callable[[Mapping], dict[str, dict]]
    build: Callable[[dict[str, dict]], dict[str, Any]]
    runtime: tuple[str, ...]
    resume: bool = False
    keep: tuple[str, ...] = ()
    replace: bool = False
    distributed: bool = False
    log: Callable[[str], None] = print
    on_step: Callable[[Any], None] | None = None


def resolve(plan: Plan, run: RunDir) -> dict[str, Any]:
    """A run's settings, resolved once (the one resolver of every trainer): defaults < ``plan.given``; on resume the
    run's saved settings with the given ones over them, of which only the runtime fields may change, and the run
    must be resumable (:func:`resume_refusal`: a budget left, or no resume file and nothing to lose). Every setting
    is checked before anything is created or read."""
    if not plan.resume:
        return plan.build(plan.parse(plan.given))
    if refusal := not_a_run(run):
        raise RunDirError(refusal)
    header = run.read_config(plan.kind, f"a {find_kind(plan.kind).title} run", "train into a new --out")
    sections, clash = resume_settings(header, plan.parse, plan.given, plan.runtime, run.path)
    if clash:
        raise RunDirError(clash)
    settings = plan.build(sections)
    if refusal := resume_refusal(run, plan.kind, Budget.of(settings["train"])):
        raise RunDirError(refusal)
    return settings


def train_run(plan: Plan, start: Callable[[RunDir, dict[str, Any], DistContext], Task]) -> TrainResult:
    """Train (or resume) the run ``plan`` describes, its task made by ``start(run, settings, ctx)`` once the
    settings are resolved (:func:`resolve`) and the run locked (by the first process under torchrun); returns
    its :class:`TrainResult`, also in ``results.json``."""
    run = RunDir(plan.out).check_output(
        resume=plan.resume, command=plan.command, keep=plan.keep, replace_kind=plan.kind if plan.replace else None
    )
    settings = resolve(plan, run)
    cfg: BudgetOptions = settings["train"]
    main = int(os.environ.get("RANK", "0")) == 0
    try:
        with run.lock(plan.command, log=plan.log, enabled=main):
            setup_torch(cfg.threads)
            ctx = setup(cfg.device) if plan.distributed else DistContext(device=resolve_device(cfg.device))
            engine = Engine(start(run, settings, ctx), plan, cfg, ctx, run)
            result = engine.train()
            # every process done with its collectives before any leaves the group: once, under load, a process
            # that left first took the other down at exit ("terminate called without an active exception")
            ctx.barrier()
            return result
    finally:
        if plan.distributed:
            teardown()


class Engine:
    """Runs a :class:`Task` (made for the run ``run`` of ``plan``, trained with ``cfg`` by the processes of
    ``ctx``) under the budget of ``cfg``; :meth:`run` returns why it stopped: ``epochs``, ``patience``,
    ``max_steps``, ``time_limit``, ``interrupted`` or ``aborted``; :meth:`train` writes and returns the result."""

    def __init__(self, task: Task, plan: Plan, cfg: BudgetOptions, ctx: DistContext, run: RunDir):
        self.task, self.plan, self.ctx, self.run_dir, self.kind = task, plan, ctx, run, plan.kind
        self.budget = Budget.of(cfg, task.valid_every)
        self.progress, self.history = Progress(task=task.state), []
        self.log = plan.log if ctx.is_main else lambda msg: None
        self.report = Report(run, cfg.log_every, cfg.progress, cfg.tensorboard, ctx.is_main, task.desc, self.log)
        self.start = 0.0
        self.session = (0, 0.0)  # step and clock at this session's start: the speed behind the time left
        self.stop = StopRequest()
        self.sums: dict[str, Any] = {}  # the step's figures not yet read from the device
        self.since: dict[str, float] = {}  # the figures since the last report
        self.clock = 0.0  # when the training time was last added to prog.sums
        self.rewrite = False  # write the header again (a resumed run, at its first save)
        task.engine = self

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def begin(self) -> None:
        """A new run writes its header and vocabulary (:meth:`RunDir.write_header`, by the first process); a
        resumed one takes back its progress, history, weights, optimizer and random state from its resume file, or
        without one (it stopped before its first save: :func:`resolve` allowed it) starts from step 0; the files a
        full disk may have kept from being written are written again (the header with the first save)."""
        run, task, path = self.run_dir, self.task, self.run_dir.resume_path
        if not self.plan.resume:
            return self.ctx.main_writes(lambda: run.write_header(task.header, task.vocab))
        if not path.exists():
            self.log(f"{run.path} has no {run.RESUME} yet; starting from the beginning")
        else:  # the history as the resume file has it (a full disk may have kept it from being written)
            self._read(path)
            self.ctx.main_writes(self._write_history)
        self.rewrite = True  # the header (its new budget) and vocabulary with the first save
        if self.progress.epoch >= self.budget.epochs and not self.progress.check_due:
            self.log(f"the run has already done its {self.budget.epochs} epochs (pass --epochs N to train longer)")

    def _read(self, path: Path) -> None:
        """The run's progress, history and state from its resume file ``path``, checked."""
        task = self.task
        prog, tensors, meta = read_training(path, self.kind)
        raw = dict(prog.task) if isinstance(prog.task, dict) else {}
        # a resume file of an earlier version kept the running figures in the task's state
        old = {new: raw.pop(name) for name, new in getattr(task, "old_sums", {}).items() if name in raw}
        prog.task = checked(type(task.state), raw, path, "progress.task")
        old = checked(Progress, {"sums": old}, path, "progress.task").sums
        prog.sums = prog.sums or old
        old_history = "history" not in meta  # a logic resume file written before it held the history
        where = self.run_dir.history_path if old_history else path
        rows = read_json(where) if old_history else meta["history"]
        history = check_history(rows, task.row, where, RESUME_FIX, prog.n_checks)
        saved = task.resume(prog, (tensors, meta, path))
        restore_training(path, tensors, meta["optimizer"], saved.model, saved.optimizer, saved.device)
        self.progress, self.history = prog, history[: prog.n_checks]

    def train(self) -> TrainResult:
        """:meth:`begin`, :meth:`run`, the stop's line in the log (:meth:`stop_line`), what the task does then
        (``Task.finish``) and the result, written (:meth:`record`) and returned. A divergence's result (status
        ``diverged``) is written before the error goes on; a run ended by patience is final (its resume file goes)."""
        self.begin()
        try:
            why = self.run()
        except TrainingDiverged:
            self.record("diverged")
            raise
        line = self.stop_line(why)
        self.log(f"{self.task.desc}: {line}" if self.task.desc else line)
        # a Ctrl-C during the final test waits for the result to be written: else a run that trained to its end
        # would be left without results.json (a second Ctrl-C still aborts)
        with StopRequest(StopRequest.FINISHING if why not in ("interrupted", "aborted") else StopRequest.NOTE):
            result = self.record(why, *self.task.finish(why, self.progress))
        if why == "patience":
            self.ctx.main_writes(lambda: self.run_dir.resume_path.unlink(missing_ok=True))
        return result

    def run(self) -> str:
        prog, budget = self.progress, self.budget
        self.start = time.perf_counter() - prog.seconds
        self.session, self.clock = (prog.step, prog.seconds), time.perf_counter()
        self.report.open(prog.step, prog.seconds)
        why = "epochs"
        try:
            with self.stop as stop:
                if prog.check_due and self.check():
                    return "patience"
                # resumed with a budget already used up: no update past it
                spent = budget_spent(budget, prog, self.elapsed())
                if self.ctx.any(bool(spent)):
                    return spent or "time_limit"  # another process's clock: the one budget that can differ
                while prog.epoch < budget.epochs and (why := self._pass(stop)) == "epochs":
                    pass
                if why == "epochs" and budget.valid_every and prog.step:
                    if not self.history or self.history[-1]["step"] != prog.step:
                        self.check()  # the updates after the last check count too
        except Interrupted:  # during a validation: the resume file says that it is due
            why = "interrupted"
        except KeyboardInterrupt:  # a second Ctrl-C (or one outside the signal handler): no resume file written
            why = "aborted"
        finally:
            self.report.close()
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
        prog.pass_len, self.clock = len(batches), time.perf_counter()
        self.report.start_pass(len(batches), prog.pos, f"epoch {prog.epoch + 1}/{self.budget.epochs}")
        why = "epochs"
        for k in range(prog.pos, len(batches)):
            self._add(self.task.train_step(batches[k], prog))
            prog.step += 1
            prog.pos += 1
            if self.plan.on_step is not None:
                self.plan.on_step(self.task)
            self.report.advance()
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
        self.report.end_pass()
        return why

    def _after_step(self, stop: StopRequest, pass_ended: bool) -> str:
        """A validation check when one is due, then the stopping rules; returns ``epochs`` to go on."""
        prog, budget = self.progress, self.budget
        checked = prog.step % budget.valid_every == 0 if budget.valid_every else pass_ended
        if checked and self.check():
            return "patience"
        why = budget_spent(budget, prog, self.elapsed()) or ("interrupted" if stop.requested else "epochs")
        if not self.ctx.any(why != "epochs"):
            if budget.save_every and prog.step % budget.save_every == 0 and not checked:
                self.save_state()
            return "epochs"
        if why in ("max_steps", "time_limit") and not checked:
            # the run's last figures are those of its last update
            self.check() if budget.check_at_stop else self.save_state()
        return "interrupted" if why == "epochs" else why  # "epochs": another process was asked to stop

    def _add(self, figures: dict[str, Any]) -> None:
        """A step's running figures added up (on the device, when they are tensors); a loss known to be non-finite
        stops the run at once."""
        if not isinstance(figures, dict):  # a task's mistake, named as such (Task.train_step's contract)
            raise TypeError(f"{type(self.task).__name__}.train_step returned {type(figures).__name__}, not a dict of "
                            "its running figures (onlstm.runs.engine.Task)")  # fmt: skip
        loss = figures.get("loss")
        if isinstance(loss, float) and not math.isfinite(loss):
            self._diverged(loss, f"at step {self.progress.step + 1}")
        for name, value in figures.items():
            self.sums[name] = self.sums.get(name, 0) + value

    def flush(self) -> None:
        """The figures since the last flush read from the device, added up over the processes, into the figures
        since the last report and since the last check (``prog.sums``, with the training time); a loss that is not
        finite stops the run here, before anything is saved or validated, so diverged weights never reach a file."""
        prog, now, names = self.progress, time.perf_counter(), sorted(self.sums)
        values = torch.tensor([float(self.sums[k]) for k in names], dtype=torch.float64) if names else None
        added = dict(zip(names, self.ctx.all_reduce_sum(values).tolist())) if values is not None else {}
        self.sums = {}
        for name, value in {**added, "seconds": now - self.clock}.items():
            prog.sums[name] = prog.sums.get(name, 0.0) + value
            self.since[name] = self.since.get(name, 0.0) + value
        self.clock = now
        if not self.ctx.any(not math.isfinite(prog.sums.get("loss", 0.0))):
            return
        self._diverged(prog.sums["loss"] / max(prog.sums.get("n", 1), 1), f"by step {prog.step}")

    def _diverged(self, loss: float, when: str) -> None:
        """Every trainer's error for a NaN or infinite training loss ``when`` (``at step 7``), naming the files kept
        from before and how to train again."""
        self.report.end_pass()
        prog, kept = self.progress, []
        if prog.best is not None:
            kept.append(
                f"{RunDir.WEIGHTS.format(tag='best')} ({self.task.score_words(prog.best)} at step {prog.best_step})"
            )
        kept += [RunDir.RESUME] if self.run_dir.resume_path.exists() else []
        kept_text = f"; kept from before: {', '.join(kept)} in {self.run_dir.path}" if kept else ""
        raise TrainingDiverged(
            f"training diverged: the training loss is {loss} {when}; the diverged weights were not saved{kept_text}; "
            "lower --lr or set --clip (e.g. 1.0) and train into a new --out"
        )

    def _report(self, n_batches: int) -> None:
        """The figures since the last report (loss, a perplexity, the task's rates, the speed of all processes)."""
        self.flush()
        prog, since, self.since = self.progress, self.since, {}
        n = max(since.get("n", 0.0), 1.0)
        figures = {"loss": since.get("loss", 0.0) / n}
        # a diverging run's perplexity is infinite where exp overflows, not capped at a finite number
        figures.update(
            {"ppl": math.exp(figures["loss"]) if figures["loss"] < 700 else math.inf} if self.task.perplexity else {}
        )
        figures.update({k: v / n for k, v in since.items() if k not in ("loss", "n", "seconds")})
        figures[f"{self.task.unit}_per_s"] = since.get("n", 0.0) / max(since.get("seconds", 0.0), 1e-9)
        epoch, end = self.epochs(), prog.pos == n_batches  # the history's count (logic: by updates)
        self.report.log(
            prog.step, figures, epoch=epoch, elapsed=self.elapsed(), left=self.time_left(n_batches), end=end
        )

    def stop_line(self, why: str) -> str:
        """Where the run stopped (:meth:`run` returned ``why``), what is kept and how to go on (the task's
        ``resume_command``; its ``score_words(score)``: the best check's score in words, ``valid acc 97.10%``)."""
        prog, budget, epochs = self.progress, self.budget, self.epochs()
        resume, best = self.task.resume_command, self.task.score_words
        kept = "no best checkpoint yet (no validation check done)"
        if prog.best is not None:
            kept = f"best checkpoint kept ({best(prog.best)} at step {prog.best_step})"
        if why in ("interrupted", "aborted"):
            during = " during validation" if prog.check_due else ""
            what = "resume file saved" if why == "interrupted" else "not saved since the last resume file"
            saved = self.run_dir.resume_path.exists()
            go_on = f"continue with: {resume}" if saved else f"nothing saved yet: {resume} starts it again from step 0"
            return f"{why}{during} at step {prog.step} ({epochs:.2f} epochs): {what}; {kept}; {go_on}"
        line = f"stopped by {why} after {prog.step} steps ({epochs:.2f} epochs, {prog.seconds / 60:.1f} min); {kept}"
        if why == "patience":  # final
            return line
        # N must pass what the run has done, not only its budget: a resume with a smaller budget ends it at once
        done = {"epochs": math.floor(epochs), "max_steps": prog.step, "time_limit": prog.seconds / 60}[why]
        limit = max(
            done, {"epochs": budget.epochs, "max_steps": budget.max_steps, "time_limit": budget.time_limit}[why]
        )
        flag = f"--{why.replace('_', '-')}"
        resume = re.sub(rf" {flag}(?:=| )\S+", "", resume)  # a command that names the budget already: said once
        return f"{line}; to train further: {resume} {flag} N (N > {limit:g})"

    def record(self, why: str, figures: dict | None = None, status: str | None = None) -> TrainResult:
        """The run's :class:`TrainResult` after :meth:`train` returned ``why`` (or ``diverged``), written to its
        ``results.json``: ``figures``, the experiment's own; ``status``, when not :data:`STATUS`'s."""
        prog, run = self.progress, self.run_dir
        stopped_by = "interrupted" if why == "aborted" else why
        result = TrainResult(
            run.path, self.kind, status or STATUS[why], stopped_by, prog.best, prog.best_step, prog.step,
            self.epochs(), self.elapsed(), dict(figures or {}), self.history, prog,
        )  # fmt: skip
        self.ctx.main_writes(lambda: write_json(run.results_path, result.record()))
        return result

    def check(self) -> bool:
        """Validate, keep the best and last weights, record, write the resume file; True when patience ran out."""
        prog = self.progress
        self.flush()
        try:
            result = self.task.validation(prog)
        except Interrupted:
            prog.check_due = True
            raise
        prog.check_due, prog.sums, self.since = False, {}, {}
        improved = math.isfinite(result.score) and (prog.best is None or result.score > prog.best)
        if improved:
            prog.best, prog.best_step, prog.bad_checks = result.score, prog.step, 0
            self.save_weights("best", self.task.resume(prog))
        else:
            prog.bad_checks += 1
        note = self.task.after_check(prog, result, improved)
        self.history.append({**result.record, "best": improved})
        self.report.check(prog.step, result.record)
        self.save_state()
        self.report.write(note)
        self.clock = time.perf_counter()  # the training time leaves the validation out
        return self.budget.patience is not None and prog.bad_checks >= self.budget.patience

    def save_weights(self, tag: str, saved: Saved) -> None:
        """The weights evaluation uses of the task's ``saved`` model, as ``model.<tag>.safetensors``."""

        def write() -> None:
            with saved.evaluated():
                save_weights(self.run_dir.weights(tag), saved.model)

        self.ctx.main_writes(write)

    def epochs(self) -> float:
        """The passes done (a fraction for a part): by updates when the task counts ``steps_per_epoch``."""
        prog, per_epoch = self.progress, self.task.steps_per_epoch
        if per_epoch:
            return round(prog.step / per_epoch, 3)
        return prog.epoch + (prog.pos / prog.pass_len if prog.pass_len else 0.0)

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
        """Write the last weights, the resume file (:data:`~onlstm.runs.resume.RESUME_FORMAT`), then the history."""
        self.flush()
        prog, history, run = self.progress, self.history, self.run_dir
        prog.seconds, prog.n_checks = self.elapsed(), len(history)
        saved = self.task.resume(prog)
        state = (saved.model, saved.optimizer, saved.device, saved.tensors)
        self.save_weights("last", saved)  # before the resume file: a resumed run may not come back to it
        self.ctx.main_writes(
            lambda: save_training(run.resume_path, self.kind, prog, *state, history=history, **saved.meta)
        )
        self.ctx.main_writes(self._write_history)  # after it: written again when the run resumes

    def _write_history(self) -> None:
        """The run's one history file, ``history.json`` (the copy of the resume file's history for people, plots and
        ``logic compare``), and what the task derives from it (lm: ``log.csv``)."""
        run, task = self.run_dir, self.task
        if self.rewrite:
            run.write_config(task.header)
            task.vocab(run.vocab_path)
            self.rewrite = False
        write_json(run.history_path, self.history)
        if (derive := getattr(self.task, "write_history", None)) is not None:
            derive(self.history)
