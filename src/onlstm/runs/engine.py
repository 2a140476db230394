"""The training loop every experiment shares: an experiment plugs in a :class:`Task`, :class:`Engine` runs it
under a :class:`Budget` carrying a :class:`Progress` record; budgets, validation, best/last weights, the
divergence stop, Ctrl-C/SIGTERM and an exact resume (the stopping rules: docs/design.md §4.6)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..errors import InputError, TrainingDiverged
from .device import StopRequest, progress_bar
from .dirs import RunDir


@dataclass
class Progress:
    """Where a run stands; everything here is saved in the resume file (JSON)."""

    step: int = 0  # updates done
    epoch: int = 0  # whole passes over the training data done
    pos: int = 0  # batches done in the pass in progress
    best: float | None = None  # best validation score so far (higher is better)
    best_step: int = 0
    bad_checks: int = 0  # validation checks in a row without a new best
    seconds: float = 0.0  # training time of the sessions before this one
    n_checks: int = 0  # validation checks recorded in the history
    check_due: bool = False  # a validation was interrupted: it is done first on resume
    task: dict[str, Any] = field(default_factory=dict)  # what the experiment carries (JSON values)

    @classmethod
    def from_dict(cls, d: dict) -> Progress:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


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


class Interrupted(Exception):
    """Raised by a task's validation when a stop was requested during it."""


@dataclass
class Check:
    """One validation: ``score`` (higher is better; a non-finite one is never the best) and the history
    record (must hold ``step`` when ``valid_every`` counts updates)."""

    score: float
    record: dict[str, Any]


class Task(Protocol):
    """What an experiment plugs into :class:`Engine`."""

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

    def save_state(self, prog: Progress, history: list[dict]) -> None:
        """Write the history and the resume file (``prog`` is up to date)."""

    def describe(self, prog: Progress) -> dict[str, str]:
        """Figures for the progress bar."""


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
    ``agree``: a process's wish to stop -> the decision every process takes."""

    def __init__(
        self,
        task: Task,
        budget: Budget,
        progress: Progress,
        history: list[dict],
        log: Callable[[str], None],
        bar: bool = False,
        desc: str = "",
        on_step: Callable[[], None] | None = None,
        agree: Callable[[bool], bool] = bool,
    ):
        self.task, self.budget, self.progress, self.history = task, budget, progress, history
        self.log, self.show_bar, self.desc, self.on_step, self.agree = log, bar, desc, on_step, agree
        self.bar: Any = None
        self.start = 0.0
        self.stop = StopRequest()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def run(self) -> str:
        prog, budget = self.progress, self.budget
        self.start = time.perf_counter() - prog.seconds
        why = "epochs"
        try:
            with self.stop as stop:
                if prog.check_due and self.check():
                    return "patience"
                spent = self._budget_stop()  # resumed with a budget already used up: no update past it
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
            self.bar.set_postfix(self.task.describe(prog))
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
        why = self._budget_stop() or ("interrupted" if stop.requested else "epochs")
        if not self.agree(why != "epochs"):
            if budget.save_every and prog.step % budget.save_every == 0 and not checked:
                self.save_state()
            return "epochs"
        if why in ("max_steps", "time_limit") and not checked:
            # the run's last figures are those of its last update
            self.check() if budget.check_at_stop else self.save_state()
        return "interrupted" if why == "epochs" else why  # "epochs": another process was asked to stop

    def _budget_stop(self) -> str:
        """``max_steps`` or ``time_limit`` when that budget is used up, else ""."""
        prog, budget = self.progress, self.budget
        if budget.max_steps is not None and prog.step >= budget.max_steps:
            return "max_steps"
        if budget.time_limit is not None and self.elapsed() > 60 * budget.time_limit:
            return "time_limit"
        return ""

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
        self.save_state()
        self._write(note)
        return self.budget.patience is not None and prog.bad_checks >= self.budget.patience

    def save_state(self) -> None:
        self.progress.seconds, self.progress.n_checks = self.elapsed(), len(self.history)
        self.task.save_state(self.progress, self.history)

    def _write(self, msg: str) -> None:
        if self.bar is not None and self.log is print:
            self.bar.write(msg)  # keeps a progress bar intact
        else:
            self.log(msg)

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def diverged(loss: float, when: str, kept: str = "", clip: float = 1.0) -> TrainingDiverged:
    """Every trainer's error for a NaN or infinite training loss ``when`` (``at step 7``), naming the files
    ``kept`` from before and how to train again."""
    kept = f"; kept from before: {kept}" if kept else ""
    return TrainingDiverged(
        f"training diverged: the training loss is {loss} {when}; the diverged weights were not saved{kept}; "
        f"lower --lr or set --clip (e.g. {clip}) and train into a new --out"
    )
