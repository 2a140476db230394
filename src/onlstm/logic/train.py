"""Training of :class:`~onlstm.logic.model.LogicClassifier` on pairs with few operators, with a validation
hold-out and early stopping (docs/logic.md, "Training"); the loop is :class:`onlstm.runs.engine.Engine`'s.
"""

from __future__ import annotations

import math
import random
import shlex
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..checkpoint import config_header
from ..config import ConfigError, count_option, option
from ..device import precision_refusal, prepare_kernel, runtime_device
from ..encoders import check_length_limit
from ..errors import quote
from ..files import same_fingerprint, write_json
from ..runs import RunDir
from ..runs.engine import Check, Plan, Progress, Saved, TrainResult, train_run, update
from ..runs.resume import read_history as read_records
from . import model as classifier
from .config import RUNTIME_FIELDS, LogicTrainConfig, read_sections
from .data import (
    TRAIN_FINGERPRINT,
    Example,
    LogicDataError,
    load_test_examples,
    load_training_examples,
    split_train_valid,
    training_fingerprint,
)
from .graphs import step_graphs
from .model import (
    KIND,
    TOKENS,
    Encoded,
    LogicClassifier,
    LogicModelConfig,
    accuracy_by_ops,
    correct_flags,
    encode_examples,
    operator_count,
)


class PlateauSchedule:
    """Learning-rate decay on a validation plateau: after ``patience`` checks in a row without a new best,
    multiply every group's learning rate by ``factor`` (never below ``min_lr``) and count again."""

    def __init__(self, optimizer: torch.optim.Optimizer, factor: float, patience: int, min_lr: float = 0.0):
        self.optimizer, self.factor, self.patience, self.min_lr = optimizer, factor, patience, min_lr
        self.bad = 0

    def step(self, improved: bool) -> bool:
        """Record one validation check; returns True when the learning rate was decayed."""
        self.bad = 0 if improved else self.bad + 1
        if self.bad < self.patience or self.factor == 1.0:
            return False
        self.bad = 0
        changed = False
        for g in self.optimizer.param_groups:
            new = max(g["lr"] * self.factor, self.min_lr)
            changed |= new < g["lr"]
            g["lr"] = new
        return changed


def curriculum_bound(cfg: LogicTrainConfig, step: int) -> int:
    """The largest operator count trained on at update ``step`` (0-based): ``curriculum_start``, one more every
    ``curriculum_steps`` updates, up to ``max_train_ops``; ``max_train_ops`` throughout without a curriculum."""
    if cfg.curriculum_start is None or cfg.curriculum_steps == 0:
        return cfg.max_train_ops
    return min(cfg.curriculum_start + step // cfg.curriculum_steps, cfg.max_train_ops)


def train_step(model: LogicClassifier, opt: torch.optim.Optimizer, batch, clip: float, bf16: bool = False):
    """One update (cross-entropy, ``clip`` 0 = no clipping) on a collated batch on the model's device:
    ``(loss, logits)``, detached. ``bf16``: the forward under bfloat16 autocast, the loss in float32."""
    a, a_lengths, b, b_lengths, y = batch
    with torch.autocast(a.device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(a, a_lengths, b, b_lengths)  # (B, 7)
    loss = F.cross_entropy(logits.float() if bf16 else logits, y)  # a float64 model stays float64
    update(opt, loss, model.parameters(), clip)
    return loss.detach(), logits.detach()


def _by_count(value: dict | None, where: str) -> None:
    if value is not None and not all(k.isdigit() for k in value):
        raise ConfigError(f"{where} must be an object of numbers by count, got keys {quote(list(value)[:3])}")


def _rng_state(value: list, where: str) -> None:
    try:
        version, internal, gauss = value
        random.Random().setstate((version, tuple(internal), gauss))
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where} is {quote(value, 60)}, not a random generator's state") from None


@dataclass
class LogicRow:
    """A validation check's record in history.json (older runs recorded only the first three fields)."""

    step: int = count_option(MISSING)
    valid_accuracy: float = option(MISSING)
    train_accuracy: float = option(MISSING)
    epoch: float | None = None
    seconds: float | None = None
    train_loss: float | None = None
    valid_by_ops: dict[str, float] | None = option(None, check=_by_count)
    train_ops: int | None = count_option(None)
    lr: float | None = None
    best: bool = False
    test_by_length: dict[str, float] | None = option(None, check=_by_count)


@dataclass
class LogicState:
    """What ``Progress.task`` carries: the pass's operator bound and batch order (the generator's state at its
    start: a resumed run replays its shuffle), the plateau schedule's count."""

    pass_ops: int = count_option(MISSING)
    epoch_rng: list = option(MISSING, check=_rng_state)
    schedule_bad: int = count_option()


def read_history(run: Path, fix: str, at_least: int = 0) -> list[dict]:
    """The checked ``history.json`` of the logic run in ``run`` (at least ``at_least`` records)."""
    return read_records(RunDir(run).history_path, LogicRow, fix, at_least)


def train(
    model_cfg: LogicModelConfig,
    cfg: LogicTrainConfig,
    data: str | Path,
    out: str | Path,
    log: Callable[[str], None] | None = print,
    resume: bool = False,
    replace: bool = False,
    resume_command: str | None = None,
) -> TrainResult:
    """Train a classifier on ``data`` (a directory of ``train{k}`` files, or one file) into run dir ``out``.
    ``resume=True`` goes on from the resume file in ``out`` (same settings and training files required); otherwise
    a directory holding a run is refused, unless ``replace=True`` (``logic compare`` retraining its own run) and it
    is a logic run. On Ctrl-C returns with ``stopped_by == 'interrupted'`` after saving the last weights and the
    resume file (the best checkpoint is kept). ``resume_command``: the command the stop's line gives to go on
    (``logic compare``'s own), instead of ``logic train --resume``."""
    log, given = log or (lambda _msg: None), {"model": asdict(model_cfg), "train": asdict(cfg)}
    build = lambda sections: {"model": model_cfg, "train": cfg}  # on resume, sections are these: a clash is refused
    parts = (read_sections, build, RUNTIME_FIELDS, resume, (), replace)
    plan = Plan(KIND, "onlstm logic train", Path(out), given, *parts, log=log)
    start = lambda run, settings, ctx: _start(run, model_cfg, cfg, data, ctx, log, resume, resume_command)
    return train_run(plan, start)


def _start(run: RunDir, model_cfg: LogicModelConfig, cfg: LogicTrainConfig, data, ctx, log, resume, go_on) -> LogicTask:
    """The task of a run, its data read (in the lock: nothing is read before the settings are checked); a resumed
    run's training files must be those it recorded: others of the same names (generated again with another seed)
    would go on silently with other batches and another validation hold-out."""
    examples = load_training_examples(data, cfg)
    saved, fix = run.header().get("data", {}) if resume else None, "resume with the run's own --data, or a new --out"
    fingerprint = same_fingerprint(training_fingerprint(data, cfg), saved, TRAIN_FINGERPRINT, source=data,
                                   run=run.path, what="training data", fix=fix, warn=log)  # fmt: skip
    train_ex, valid_ex = split_train_valid(examples, cfg)
    task = LogicTask(model_cfg, cfg, run.path, encode_examples(train_ex), encode_examples(valid_ex), log, ctx.device)
    task.resume_command = go_on or f"onlstm logic train --out {shlex.quote(str(run.path))} --resume"
    if cfg.score_test:
        task.set_test(load_test_examples(data))
    if (limit := getattr(task.model.encoder, "max_length", None)) is not None:  # before the run's folder is written
        longest = max(len(side) for pair in (*task.train_data, *task.valid_data, *task.test_data) for side in pair[:2])
        what = f"the training, validation{' and test (--score-test)' if task.test_data else ''} formulas have"
        check_length_limit(limit, longest, what, model_cfg.cell)
    max_ops = max(ex.max_ops for ex in examples)
    data_summary = {"path": str(data), "n_train": len(train_ex), "n_valid": len(valid_ex), "max_ops": max_ops}
    data_summary[TRAIN_FINGERPRINT] = fingerprint
    task.header = config_header(KIND, model_cfg.to_dict(), train=cfg.to_dict(), data=data_summary)
    log(task.summary())
    return task


class LogicTask:
    """The classifier's part of a training run (run by :class:`~onlstm.runs.engine.Engine`); ``Progress.task``
    carries the schedule's count, the running training figures, the pass's operator bound and batch-order state."""

    row, unit, perplexity = LogicRow, "pairs", False
    resume_command = "onlstm logic train --out RUN --resume"  # the run's own path, set when the task is made
    # a resume file of an earlier version kept the running figures in the task's state
    old_sums: ClassVar = {"loss_sum": "loss", "correct_sum": "accuracy", "seen": "n"}
    engine: Any
    header: dict

    def __init__(
        self,
        model_cfg: LogicModelConfig,
        cfg: LogicTrainConfig,
        out: Path,
        train_data: list[Encoded],
        valid_data: list[Encoded],
        log: Callable[[str], None],
        device: torch.device | None = None,
    ):
        self.model_cfg, self.cfg, self.rundir, self.log, self.desc = model_cfg, cfg, RunDir(out), log, model_cfg.cell
        self.train_data, self.valid_data = train_data, valid_data
        self.train_ops = [operator_count(e) for e in train_data]
        self.valid_ops = [operator_count(e) for e in valid_data]
        self.device = device or runtime_device(cfg)
        if why := precision_refusal(cfg.precision, self.device, model_cfg.cell):
            raise ConfigError(why)
        torch.manual_seed(cfg.seed)
        self.model = LogicClassifier(model_cfg).to(self.device)
        prepare_kernel(self.model, self.device)  # a first use's compile before the clock starts, not in it
        adam = {"betas": (cfg.adam_beta1, 0.999), "eps": cfg.adam_eps, "weight_decay": cfg.weight_decay}
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, **adam)
        self.schedule = PlateauSchedule(self.opt, cfg.lr_decay, cfg.lr_patience, cfg.min_lr)
        self.graphs = step_graphs(cfg, self.model, self.device, log)
        self.steps_per_epoch = math.ceil(len(train_data) / cfg.batch_size)
        self.valid_every = cfg.valid_every or self.steps_per_epoch
        self.order_rng = random.Random(f"onlstm-logic-order/{cfg.seed}")
        # each pass's shuffle is drawn from the batch-order generator's state at the pass's start (JSON: a list),
        # so a resumed run replays the shuffle of the pass it stopped in
        self.state = LogicState(curriculum_bound(cfg, 0), list(self.order_rng.getstate()))
        self.test_data: list[Encoded] = []
        self.test_lengths: list[int] = []

    def set_test(self, examples: list[Example]) -> None:
        """Pairs scored at every validation check besides the validation pairs (``score_test``), by file number."""
        self.test_data, self.test_lengths = encode_examples(examples), [ex.length for ex in examples]

    def vocab(self, path: Path) -> None:
        write_json(path, list(TOKENS))

    def score_words(self, best: float) -> str:
        return f"valid acc {100 * best:.2f}%"

    def summary(self) -> str:
        cfg, curriculum = self.cfg, ""
        if curriculum_bound(cfg, 0) < cfg.max_train_ops:
            curriculum = (
                f"; curriculum: <= {cfg.curriculum_start} operators first, one more every {cfg.curriculum_steps} steps"
            )
        return (
            f"{self.model_cfg.cell} on {self.device}: {sum(p.numel() for p in self.model.parameters()):,} parameters; "
            f"{len(self.train_data)} training pairs, {len(self.valid_data)} validation pairs (<= {cfg.max_train_ops} "
            f"operators); {self.steps_per_epoch} steps/epoch, validation every {self.valid_every} steps; "
            f"run dir {self.rundir.path}{curriculum}"
        )

    def pass_batches(self, prog: Progress) -> list[list[int]]:
        """The pass over the pairs with at most ``pass_ops`` operators (all of them once a curriculum is over),
        shuffled, in batches of pair indices."""
        version, internal, gauss = prog.task.epoch_rng
        self.order_rng.setstate((version, tuple(internal), gauss))
        bound = prog.task.pass_ops
        order = [i for i, k in enumerate(self.train_ops) if k <= bound]
        if not order:
            raise LogicDataError(f"no training pair has at most {bound} operators: raise curriculum_start")
        self.order_rng.shuffle(order)
        bs = self.cfg.batch_size
        return [order[i : i + bs] for i in range(0, len(order), bs)]

    def end_pass(self, prog: Progress, complete: bool) -> bool | None:
        """A pass ends with its last batch, or early when the curriculum moves on (the next pass is over the
        longer pairs too); only whole passes over every length are epochs."""
        bound, nxt = prog.task.pass_ops, curriculum_bound(self.cfg, prog.step)
        if not complete and nxt == bound:
            return None
        prog.task.pass_ops, prog.task.epoch_rng = nxt, list(self.order_rng.getstate())
        return complete and bound == self.cfg.max_train_ops

    def train_step(self, idx: list[int], prog: Progress) -> dict:
        batch = classifier.collate([self.train_data[j] for j in idx])
        n = len(batch[-1])
        if self.graphs is not None and (done := self.graphs.step(batch)) is not None:
            self.opt.step()  # outside the graph: the plateau schedule sets its learning rate
            return {"loss": done[0] * n, "accuracy": done[1], "n": n}
        batch = [t.to(self.device) for t in batch]
        loss, logits = train_step(self.model, self.opt, batch, self.cfg.clip, self.cfg.precision == "bf16")
        return {"loss": float(loss) * n, "accuracy": int((logits.argmax(-1) == batch[-1]).sum()), "n": n}

    def validation(self, prog: Progress) -> Check:
        flags = correct_flags(self.model, self.valid_data, self.cfg.eval_batch_size)
        acc, sums, seen = sum(flags) / len(flags), prog.sums, max(prog.sums.get("n", 0.0), 1)
        rec = {
            "step": prog.step,
            "epoch": round(prog.step / self.steps_per_epoch, 3),
            "seconds": round(self.engine.elapsed(), 1),
            "train_loss": sums.get("loss", 0.0) / seen,
            "train_accuracy": sums.get("accuracy", 0.0) / seen,
            "valid_accuracy": acc,
            "valid_by_ops": accuracy_by_ops(flags, self.valid_ops),
            "train_ops": curriculum_bound(self.cfg, max(prog.step - 1, 0)),  # the bound of the last update
            "lr": self.opt.param_groups[0]["lr"],
        }
        if self.test_data:
            flags = correct_flags(self.model, self.test_data, self.cfg.eval_batch_size)
            rec["test_by_length"] = accuracy_by_ops(flags, self.test_lengths)
        return Check(acc, rec)

    def after_check(self, prog: Progress, check: Check, improved: bool) -> str:
        """The plateau schedule; returns the check's log line."""
        decayed = self.schedule.step(improved)
        prog.task.schedule_bad = self.schedule.bad
        rec, lr = check.record, self.opt.param_groups[0]["lr"]
        best = " (best)" if improved else f" (best {100 * (prog.best or 0.0):.2f}% at step {prog.best_step})"
        return (
            f"step {prog.step} (epoch {rec['epoch']:.2f}, {rec['seconds']:.0f} s): train loss "
            f"{rec['train_loss']:.4f} acc {100 * rec['train_accuracy']:.1f}%, valid acc "
            f"{100 * check.score:.2f}%{best}"
            + (f"; learning rate now {lr:.3g}" if decayed else "")
            + "; by operators "
            + " ".join(f"{k}:{100 * v:.1f}" for k, v in rec["valid_by_ops"].items())
            + (f" (training on <= {rec['train_ops']})" if rec["train_ops"] < self.cfg.max_train_ops else "")
        )

    def resume(self, prog: Progress, read: tuple | None = None) -> Saved:
        if read is not None:
            self.schedule.bad = prog.task.schedule_bad
            self.log(
                f"resuming {self.rundir.path} at step {prog.step} (epoch {prog.epoch + 1}, batch {prog.pos + 1}); best "
                f"valid acc {100 * (prog.best or 0.0):.2f}% at step {prog.best_step}"
            )
        return Saved(self.model, self.opt, self.device)

    def finish(self, why: str, prog: Progress) -> tuple[dict, None]:
        """The last weights of an interrupted run; the data sizes and best accuracy for the result."""
        if why == "aborted":  # an interrupted run's were saved with its resume file
            self.engine.save_weights("last", self.resume(prog))
        figures = {"best_valid_accuracy": prog.best or 0.0, "n_train": len(self.train_data)}
        return {**figures, "n_valid": len(self.valid_data)}, None
