"""The training loop every experiment shares: passes over the data, budgets, validation, best/last weights,
the divergence stop, Ctrl-C/SIGTERM and resume, bit for bit.

An experiment plugs in a :class:`Task` (how to draw a pass's batches, take one update, validate, save its
weights and carry its own state); :class:`Engine` runs it. What the loop carries from step to step is one typed
:class:`Progress` record, saved as JSON in the resume file next to the task's tensors, so that a resumed run
replays exactly the updates an uninterrupted one makes.

Stopping rules, checked after every update in this order: a validation check when one is due (``valid_every``
updates; patience counts checks without a new best), ``max_steps`` updates, ``time_limit`` minutes of training
(both validate the last update when it was not just checked), a stop request (Ctrl-C or SIGTERM: the resume
file is written after the current update; a second Ctrl-C aborts at once and keeps the file of the last check).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ..errors import TrainingDiverged
from .device import StopRequest
from .progress import progress_bar


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
    task: dict[str, Any] = field(default_factory=dict)  # what the experiment carries (JSON values)

    @classmethod
    def from_dict(cls, d: dict) -> Progress:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class Budget:
    """When a run stops: whichever of these comes first."""

    epochs: int
    valid_every: int  # updates between validation checks
    max_steps: int | None = None
    time_limit: float | None = None  # minutes
    patience: int | None = None  # checks in a row without a new best


@dataclass
class Check:
    """One validation: ``score`` (higher is better) and the history record (must hold ``step``)."""

    score: float
    record: dict[str, Any]


class Task(Protocol):
    """What an experiment plugs into :class:`Engine`."""

    def pass_batches(self, prog: Progress) -> Sequence:
        """The batches of the pass in progress, the same list again when resumed in the middle of it."""

    def train_step(self, batch, prog: Progress) -> float:
        """One update; returns the training loss (a non-finite one stops the run)."""

    def end_pass(self, prog: Progress, complete: bool) -> bool | None:
        """Called after every update; ``complete`` when the pass's last batch was just used. Returns None to
        go on with the pass, else whether the pass that ends counts as an epoch (the task then prepares the
        next pass in ``prog.task``)."""

    def validate(self, prog: Progress) -> Check:
        """Score the current weights on the validation data."""

    def after_check(self, prog: Progress, check: Check, improved: bool) -> str:
        """Schedules that follow a check (e.g. decay the learning rate); returns a note for the log line."""

    def save_weights(self, tag: str) -> None:
        """Write ``model.<tag>.safetensors`` (``best`` or ``last``)."""

    def save_state(self, prog: Progress, history: list[dict]) -> None:
        """Write the history and the resume file (``prog`` is up to date)."""

    def describe(self, prog: Progress) -> dict[str, str]:
        """Figures for the progress bar."""


class Engine:
    """Runs a :class:`Task` under a :class:`Budget`; :meth:`run` returns why it stopped: ``epochs``,
    ``patience``, ``max_steps``, ``time_limit``, ``interrupted`` or ``aborted``."""

    def __init__(
        self,
        task: Task,
        budget: Budget,
        progress: Progress,
        history: list[dict],
        log: Callable[[str], None],
        bar: bool = False,
        desc: str = "",
    ):
        self.task, self.budget, self.progress, self.history = task, budget, progress, history
        self.log, self.show_bar, self.desc = log, bar, desc
        self.bar: Any = None
        self.start = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def run(self) -> str:
        prog, budget = self.progress, self.budget
        self.start = time.perf_counter() - prog.seconds
        why = "epochs"
        try:
            with StopRequest() as stop:
                while prog.epoch < budget.epochs:
                    why = self._pass(stop)
                    if why != "epochs":
                        break
                else:
                    if prog.step and (not self.history or self.history[-1]["step"] != prog.step):
                        self.check()  # the updates after the last check count too
        except KeyboardInterrupt:  # a second Ctrl-C (or one outside the signal handler): no resume file written
            why = "aborted"
        self._close_bar()
        return why

    def _pass(self, stop: StopRequest) -> str:
        """The rest of the pass in progress; returns ``epochs`` when it ended and training goes on."""
        prog = self.progress
        batches = self.task.pass_batches(prog)
        self.bar = progress_bar(
            self.show_bar,
            total=len(batches),
            initial=prog.pos,
            desc=f"{self.desc} epoch {prog.epoch + 1}/{self.budget.epochs}",
            leave=False,
            dynamic_ncols=True,
        )
        for k in range(prog.pos, len(batches)):
            loss = self.task.train_step(batches[k], prog)
            if not math.isfinite(loss):
                self._diverged(loss)
            prog.step += 1
            prog.pos += 1
            self.bar.update(1)
            self.bar.set_postfix(self.task.describe(prog))
            counts = self.task.end_pass(prog, prog.pos == len(batches))
            if counts is not None:
                prog.epoch += int(counts)
                prog.pos = 0
            why = self._after_step(stop)
            if why != "epochs" or prog.pos == 0:
                break
        self._close_bar()
        return why

    def _after_step(self, stop: StopRequest) -> str:
        """A validation check when one is due, then the stopping rules; returns ``epochs`` to go on."""
        prog, budget = self.progress, self.budget
        checked = prog.step % budget.valid_every == 0
        if checked and self.check():
            return "patience"
        for why, over in (
            ("max_steps", budget.max_steps is not None and prog.step >= budget.max_steps),
            ("time_limit", budget.time_limit is not None and self.elapsed() > 60 * budget.time_limit),
        ):
            if over:
                if not checked:
                    self.check()  # the run's last figures are those of its last update
                return why
        return "interrupted" if stop.requested else "epochs"

    def check(self) -> bool:
        """Validate, keep the best and last weights, record, write the resume file; True when patience ran out."""
        prog = self.progress
        result = self.task.validate(prog)
        improved = prog.best is None or result.score > prog.best
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

    def _diverged(self, loss: float) -> None:
        """Stop at a NaN/infinite training loss: the weights are broken, so nothing more is saved."""
        prog = self.progress
        self._close_bar()
        kept = (
            f"; kept from before: model.best.safetensors (validation {prog.best:.4g} at step {prog.best_step})"
            if prog.best is not None
            else ""
        )
        raise TrainingDiverged(
            f"training diverged: the training loss is {loss} at step {prog.step + 1}; the diverged weights "
            f"were not saved{kept}; lower --lr or set --clip (e.g. 1.0) and train into a new --out"
        )


def progress_to_dict(prog: Progress) -> dict:
    return asdict(prog)
