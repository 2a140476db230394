"""When a run stops: the budget options every trainer's settings share (:class:`BudgetOptions`, declared once), the
:class:`Budget` the engine runs under (built once, by :meth:`Budget.of`) and the one check of a used-up budget
(docs/design.md §4.6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..config import Runtime, runtime_option

#: The stops a larger budget undoes (a run ended by patience is final).
BUDGETS = ("epochs", "max_steps", "time_limit")


@dataclass
class BudgetOptions(Runtime):
    """The budget and reporting options of every trainer (``train:`` section, one flag each): runtime settings, so a
    run stopped by its budget trains further with a larger one. ``check_at_stop``: whether ``max_steps`` and
    ``time_limit`` validate the last update (else they write the resume file only)."""

    check_at_stop: ClassVar[bool] = True

    epochs: int = runtime_option(30, "passes over the training data at most", ge=1)
    time_limit: float | None = runtime_option(
        None,
        "stop after this many minutes of training (every session of the run counted; checked after every update)",
        default_text="no limit",
        gt=0,
    )
    max_steps: int | None = runtime_option(
        None,
        "stop after this many updates in all (with epochs and time_limit, whichever comes first); the resume file "
        "is written",
        default_text="no limit",
        ge=1,
    )
    log_every: int = runtime_option(
        50, "updates between reports: the progress bar's figures, a log line, a row of steps.csv", ge=1
    )
    tensorboard: bool = runtime_option(
        False, "also write the reports to RUN_DIR/tensorboard (needs the tensorboard package)"
    )


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

    @classmethod
    def of(cls, cfg: BudgetOptions, valid_every: int = 0) -> Budget:
        """The budget of a trainer's settings ``cfg``; its ``patience`` (0: none) and ``checkpoint_every`` when
        it has them."""
        patience, save_every = getattr(cfg, "patience", 0) or None, getattr(cfg, "checkpoint_every", None)
        return cls(cfg.epochs, valid_every, cfg.max_steps, cfg.time_limit, patience, cfg.check_at_stop, save_every)


def budget_spent(budget: Budget, prog: Any, seconds: float, epochs: bool = False) -> str:
    """The budget that a run at ``prog`` after ``seconds`` of training has used up, checked in the engine's order:
    ``max_steps``, ``time_limit``, then (``epochs=True``; the engine's loop checks them itself) ``epochs``; ""
    when none (training goes on). The one check for the engine's stops and a resume's refusal."""
    if budget.max_steps is not None and prog.step >= budget.max_steps:
        return "max_steps"
    if budget.time_limit is not None and seconds > 60 * budget.time_limit:
        return "time_limit"
    return "epochs" if epochs and prog.epoch >= budget.epochs else ""


def budget_refusal(budget: Budget, prog: Any) -> str:
    """Why a resumed run at ``prog`` cannot train further under ``budget`` (:func:`budget_spent`), with the flag that
    raises the budget; "" when it can."""
    why = budget_spent(budget, prog, prog.seconds, epochs=True)
    if not why:
        return ""
    used = dict(max_steps=f"{prog.step} updates", time_limit=f"{prog.seconds / 60:.1f} min")
    used.update(epochs=f"{prog.epoch} epochs")
    spent = f"its {used[why]} reach {why} {getattr(budget, why):g}"
    return f"the run has used up its budget ({spent}; pass a larger --{why.replace('_', '-')} to train further)"
