"""Training of the language model (docs/lm.md, docs/design.md §2.1): :class:`Trainer`, the language model's part of
:class:`onlstm.runs.engine.Engine`'s loop (NT-ASGD, exact resume, several processes), and :func:`train`."""

from __future__ import annotations

import csv
import functools
import io
import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint import CheckpointError, config_header, load_weights
from ..config import ConfigError, Real, count_option, option
from ..data.ptb import Corpus, load_corpus, split_file
from ..data.vocab import Vocab
from ..device import StopRequest, precision_refusal, resolve_device
from ..encoders import check_length_limit, detach_state
from ..errors import RunDirError
from ..files import sha256_file, write_text
from ..models.language_model import LanguageModel, use_onlstm_impl
from ..runs import RunDir
from ..runs.dist import DistContext
from ..runs.engine import Check, Plan, Progress, Saved, TrainResult, train_run, update
from ..runs.resume import checked
from .config import RUNTIME_FIELDS, SECTIONS, RunConfig, explicit_settings, run_configs, run_sections
from .data import TEXT_FINGERPRINT, batchify, bptt_schedule, column_share, same_training_text, segment, too_short
from .evaluate import Interrupted, exp_loss, perplexity
from .graphs import step_graphs
from .ntasgd import averaged_weights, make_optimizer, nonmono_switch, weights_in_place


@dataclass
class LMState:
    """What ``Progress.task`` carries for a language model: NT-ASGD's phase and the final test."""

    averaging: bool = False
    avg_count: int = count_option()
    sgd_valid_history: list[Real] = option([])  # the SGD epochs' validation losses, oldest first
    finished: bool = False
    results: dict | None = None  # the final test's


@dataclass
class LMRow:
    """An epoch's row of the history (``log.csv``'s columns, in order, and whether it was the best)."""

    epoch: int = count_option(MISSING)
    steps: int = count_option(MISSING)
    train_loss: float | None = None
    train_ppl: float | None = None
    valid_loss: Real | None = None  # a validation that was not finite is recorded as such
    valid_ppl: Real | None = None
    best_valid_ppl: Real | None = None
    averaging: int | None = count_option(None)
    tokens: int | None = count_option(None)
    epoch_seconds: float | None = None
    tokens_per_s: float | None = None
    elapsed_s: float | None = None
    best: bool = False


@dataclass
class LMResumeMeta:
    """The language model's own values in its resume file: the carried state's layout and the model's settings."""

    hidden_layout: list[int] = count_option(MISSING)
    model_config: dict = option(MISSING)


LOG_COLUMNS = tuple(f.name for f in fields(LMRow))[:-1]


class _Objective(nn.Module):
    """The training loss of one segment, as a module so that DistributedDataParallel can wrap it."""

    def __init__(self, model: LanguageModel, alpha: float, beta: float, ar_target: str = "raw"):
        super().__init__()
        self.model, self.alpha, self.beta, self.ar_target = model, alpha, beta, ar_target

    def forward(self, x, y, state, shard):
        out, state, extras = self.model(x, state, shard=shard)
        logits, r = self.model.logits(out), extras["raw"]
        loss = raw = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
        if self.alpha:
            loss = loss + self.alpha * extras[self.ar_target].pow(2).mean()
        if self.beta and r.shape[0] > 1:
            loss = loss + self.beta * (r[1:] - r[:-1]).pow(2).mean()
        return loss, raw.detach(), state


def float32_state(state):
    """A carried state (tensor or nested tuples) with every floating tensor in float32."""
    if isinstance(state, torch.Tensor):
        return state.float() if state.is_floating_point() else state
    return None if state is None else tuple(map(float32_state, state))


def write_log_csv(path: Path, history: list[dict]) -> None:
    w = csv.DictWriter(buf := io.StringIO(), LOG_COLUMNS, extrasaction="ignore")
    w.writeheader()
    w.writerows(history)
    write_text(path, buf.getvalue())


class Trainer:
    """The language model's :class:`~onlstm.runs.engine.Task`: passes are epochs of BPTT segments, the state carried;
    validation scores the weights evaluation uses (the score is minus the loss); NT-ASGD, resume, the final test."""

    row, unit, perplexity, desc, valid_every, steps_per_epoch = LMRow, "tokens", True, "", 0, 0
    # a resume file of an earlier version kept the epoch's running figures in the task's state
    old_sums: ClassVar = {"epoch_loss_sum": "loss", "epoch_tokens": "n", "epoch_seconds": "seconds"}
    engine: Any

    def __init__(
        self,
        run_dir: Path,
        data_dir: Path,
        settings: RunConfig,
        resume: bool = False,
        ctx: DistContext | None = None,
        log: Callable[[str], None] = print,
    ):
        """``settings``: the run's, resolved (:func:`~onlstm.runs.engine.resolve`, as :func:`train` does)."""
        self.rundir, self.data_dir, self.resuming, self.config = RunDir(run_dir), Path(data_dir), resume, settings
        cfg = self.cfg = self.config.train
        self.ctx, self._log = ctx or DistContext(device=resolve_device(cfg.device)), log
        if why := precision_refusal(cfg.precision, self.ctx.device, settings.model["cell"]):
            raise ConfigError(why)
        if cfg.compile and self.ctx.distributed:
            raise ConfigError("train.compile (--compile) is not supported under torchrun yet; leave it out")
        if self.ctx.distributed and cfg.batch_size % self.ctx.world:
            raise RunDirError(
                f"batch_size {cfg.batch_size} is not divisible by the {self.ctx.world} processes; "
                "every process must own the same number of columns"
            )
        self._load_data()
        self._build_model()
        self.state, self.header, self.vocab = LMState(), self._config_json(), self.corpus.vocab.save
        self.resume_command = f"onlstm lm train --out {self.rundir.path} --data-dir {self.data_dir} --resume"

    def score_words(self, best: float) -> str:
        return f"valid ppl {math.exp(-best):.2f}"

    @property
    def prog(self) -> Progress:
        return self.engine.progress

    def _load_data(self) -> None:
        """The corpus (with the run's vocabulary checked on resume) and this process's training columns."""
        cfg, saved = self.cfg, self.rundir.header().get("data", {}) if self.resuming else None
        self.text_sha256 = same_training_text(split_file(self.data_dir, "train"), saved, self.rundir.path, self.log)
        self.corpus: Corpus = load_corpus(self.data_dir, oov=cfg.oov, max_vocab=cfg.max_vocab)
        if any(s.n_unknown for s in self.corpus.splits.values()):  # perplexities flattered by <unk>: said once
            self.log(f"data: {self.corpus.summary()}")
        # the bytes the final test reads, kept with its figure: a study checks that its test file is this one
        self.test_sha256 = sha256_file(self.corpus.splits["test"].path)
        if self.resuming:
            saved_vocab = Vocab.load(self.rundir.vocab_path)
            if saved_vocab.words != self.corpus.vocab.words:
                raise RunDirError(
                    f"the training text in {self.data_dir} gives a different vocabulary "
                    f"({len(self.corpus.vocab)} words) from the run's {RunDir.VOCAB} ({len(saved_vocab)}); "
                    "resume with the --data-dir the run was started with"
                )
        self._check_eval_columns()
        start, stop = column_share(cfg.batch_size, self.ctx.rank, self.ctx.world)
        self.shard = (start, cfg.batch_size) if self.ctx.distributed else None
        columns = batchify(self.corpus["train"].ids, cfg.batch_size)
        self.train_data = columns[:, start:stop].contiguous().to(self.ctx.device)
        self.n_rows = columns.shape[0]

    def _check_eval_columns(self) -> None:
        """The validation and test streams fit their batch sizes: checked before the run's first file is written,
        not at the first validation (an epoch later) or at the final test (after the whole training)."""
        cfg = self.cfg
        checks = [("valid", cfg.eval_batch_size, "eval_batch_size")]
        if cfg.final_test and cfg.test_batch_size > 1:  # 1: the paper's protocol, the one column of a stream
            checks.append(("test", cfg.test_batch_size, "test_batch_size"))
        for split, size, name in checks:
            if why := too_short(self.corpus[split].ids.numel(), size):
                flag = "--" + name.replace("_", "-")
                raise ConfigError(
                    f"train.{name}={size} ({flag}) does not fit the {split} split: {why}; use a smaller {flag}"
                )

    def _build_model(self) -> None:
        """Model (seeded; its segment-length limit checked), optimizer, an empty progress record, the objective."""
        cfg, dev = self.cfg, self.ctx.device
        self.model_config = self.config.model_config(len(self.corpus.vocab))
        torch.manual_seed(cfg.seed)
        self.model = LanguageModel(self.model_config).to(dev)
        use_onlstm_impl(self.model, cfg.onlstm_impl, dev)
        self.param_names, self.params = map(list, zip(*self.model.named_parameters()))
        self.optimizer: torch.optim.Optimizer = make_optimizer(self.params, cfg)
        self.hidden = None
        self.may_average = cfg.optimizer == "sgd" and cfg.averaging  # NT-ASGD
        self.objective = _Objective(self.model, cfg.alpha, cfg.beta, cfg.ar_target)
        if cfg.compile:  # compiles at its first calls: the first segment, the first with a state, another length
            self.graphs, self.objective = None, torch.compile(self.objective)
        else:
            step = functools.partial(self.objective, shard=None)
            self.graphs = step_graphs(cfg, self.ctx, self.model, step, self.log)
        if self.ctx.distributed:
            ids = [dev.index] if dev.type == "cuda" else None
            self.objective = torch.nn.parallel.DistributedDataParallel(self.objective, device_ids=ids)
        if (limit := self.model.max_length) is not None:  # every segment of every epoch (drawing them is cheap)
            longest = max([cfg.bptt, *(s.length for e in range(1, cfg.epochs + 1) for s in self.schedule(e))])
            lower = f", lower --bptt (now {cfg.bptt}, bptt_std {cfg.bptt_std})"
            check_length_limit(limit, longest, "the training schedule has segments of", self.model_config.cell, lower)

    def log(self, msg: str) -> None:
        if self.ctx.is_main:
            self._log(msg)

    def _config_json(self) -> dict:
        # data_dir absolute: `lm eval` may run from another folder; vocab_limited: a vocab.txt or --max-vocab left
        # words out, which lm eval maps to <unk>
        c, data_dir = self.corpus, str(self.data_dir.resolve())
        data = dict(data_dir=data_dir, closed_vocab=c.closed_vocab, vocab_limited=c.limited, oov=self.cfg.oov)
        data.update({f"{k}_tokens": s.n_tokens for k, s in c.splits.items()}, **{TEXT_FINGERPRINT: self.text_sha256})
        # how the model reads English: the convention its training text shows (data/reader.py); not its vocabulary's,
        # which a cap or a vocab.txt may leave without a capital or a "." that the training text had (read as <unk>)
        text = c.text.to_dict()
        return config_header("lm", self.model_config.to_dict(), train=self.cfg.to_dict(), data=data, text=text)

    def schedule(self, epoch: int) -> list:
        """The BPTT segments of ``epoch`` (from 1)."""
        c = self.cfg
        return bptt_schedule(
            self.n_rows, c.bptt, c.seed, epoch, c.variable_bptt, c.bptt_short_prob, c.bptt_std, c.min_seq_len
        )

    def averaged_weights(self) -> list[torch.Tensor] | None:
        """ASGD's running average once averaging started (:func:`~onlstm.lm.ntasgd.averaged_weights`)."""
        return averaged_weights(self.params, self.optimizer) if self.prog.task.averaging else None

    def eval_weights(self):
        """The weights evaluation uses: the running average once averaging started, else the current ones."""
        return weights_in_place(self.params, self.averaged_weights())

    def _start_averaging(self) -> str:
        # the authors replace the optimizer by a fresh torch ASGD at the switch: so do we (no state carried)
        self.prog.task.averaging, self.prog.task.avg_count = True, 0
        self.optimizer = make_optimizer(self.params, self.cfg, averaging=True)
        return f"epoch {self.prog.epoch + 1}: switching to averaged SGD (NT-ASGD)"

    def pass_batches(self, prog: Progress) -> list:
        """The epoch's segments; at its start the state is reset and averaging may begin (``asgd_start_epoch``)."""
        if prog.pos == 0:
            self.hidden, start = None, self.cfg.asgd_start_epoch
            if self.may_average and not prog.task.averaging and start and prog.epoch + 1 >= start:
                self.log(self._start_averaging())
        return self.schedule(prog.epoch + 1)

    def train_step(self, seg, prog: Progress) -> dict:
        """One optimizer step on one segment (+ the running average once averaging started); its loss summed over
        its tokens stays on the device (the engine reads it when it reports)."""
        cfg = self.cfg
        x, y = segment(self.train_data, seg.start, seg.length)
        for g in self.optimizer.param_groups:
            g["lr"] = cfg.lr * seg.lr_scale
        if self.graphs is not None and (raw := self.graphs.step(x, y, self.hidden)) is not None:
            self.hidden = self.graphs.state  # the graphs' buffers, read by the next step
            self.optimizer.step()  # outside the graph: the learning rate is the segment's
        else:
            raw = self._eager_step(x, y)
        prog.task.avg_count += int(prog.task.averaging)
        return {"loss": raw.double() * y.numel(), "n": y.numel()}

    def _eager_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        self.hidden = detach_state(self.hidden)
        with torch.autocast(self.ctx.device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
            loss, raw, hidden = self.objective(x, y, self.hidden, self.shard)
        update(self.optimizer, loss, self.params, cfg.clip)
        # float32 whatever autocast made of it (evaluation and resume read it so), and cut from this step's graph at
        # once: alive, it held every gradient accumulator into the next capture (docs/lm.md, "Training on a GPU")
        self.hidden = detach_state(hidden if cfg.precision == "fp32" else float32_state(hidden))
        return raw

    def end_pass(self, prog: Progress, complete: bool) -> bool | None:
        return complete or None

    def _perplexity(self, model, split: str, protocol: str, batch_size: int, stop: StopRequest | None, **kw):
        """``model``'s perplexity on ``split``, stopped (Interrupted) when ``stop`` is requested."""
        should_stop = (lambda: stop.requested) if stop is not None else None
        ids, bptt, device = self.corpus[split].ids, self.cfg.bptt, self.ctx.device
        recorder = self.graphs.recorder if self.graphs is not None else None  # segments replayed as graphs
        return perplexity(model, ids, protocol, batch_size, bptt, device, should_stop=should_stop, recorder=recorder,
                          **kw)  # fmt: skip

    def validate(self):
        """The validation perplexity of the weights evaluation uses (raises Interrupted on Ctrl-C)."""
        stop = self.engine.stop if not self.ctx.distributed else None
        with self.eval_weights():  # every process scores its share
            return self._perplexity(self.model, "valid", "batched", self.cfg.eval_batch_size, stop, ctx=self.ctx)

    def validation(self, prog: Progress) -> Check:
        """The epoch's row of the log (its best is filled in by :meth:`after_check`)."""
        valid, sums = self.validate(), prog.sums
        tokens, seconds = int(round(sums.get("n", 0.0))), sums.get("seconds", 0.0)
        loss = sums.get("loss", 0.0) / max(tokens, 1)
        row = dict(epoch=prog.epoch, steps=prog.step, train_loss=round(loss, 6))
        row.update(train_ppl=round(exp_loss(loss), 3), valid_loss=round(valid.loss, 6))
        row.update(valid_ppl=round(valid.ppl, 3), averaging=int(prog.task.averaging), tokens=tokens)
        row.update(epoch_seconds=round(seconds, 2), tokens_per_s=round(tokens / max(seconds, 1e-9), 1))
        row.update(elapsed_s=round(self.engine.elapsed(), 1))
        return Check(-valid.loss, row)

    def after_check(self, prog: Progress, check: Check, improved: bool) -> str:
        """The best perplexity so far in the row, tensorboard and NT-ASGD's switch; returns the log line."""
        row, t = check.record, prog.task
        if not t.averaging:  # patience counts the averaged weights' checks only
            prog.bad_checks = 0
        row["best_valid_ppl"] = round(math.exp(-prog.best), 3) if prog.best is not None else float("nan")
        line = (
            f"epoch {row['epoch']:3d} | train ppl {row['train_ppl']:8.2f} | valid ppl {row['valid_ppl']:8.2f}"
            f"{' *' if improved else '  '} | {'ASGD' if t.averaging else self.cfg.optimizer.upper():4} | "
            f"{row['epoch_seconds']:.0f} s | {row['tokens_per_s']:,.0f} tok/s"
        )
        if self.may_average and not t.averaging:
            switch = nonmono_switch(t.sgd_valid_history, -check.score, self.cfg.nonmono)
            t.sgd_valid_history.append(-check.score)
            if switch:
                line += "\n" + self._start_averaging()
        return line

    def resume(self, prog: Progress, read: tuple | None = None) -> Saved:
        """The model, the optimizer and the carried state (all processes take part: the state is gathered); with
        ``read``, the resume file's, taken back first."""
        if read is not None:
            self._take_back(prog, *read)
        # the carried state as hidden.<layer>.<part>, the layout saying how many parts each layer has (0: one tensor)
        tensors, layout = {}, []
        for i, s in enumerate(self.hidden if self.hidden is not None and prog.pos > 0 else []):
            layout.append(0 if torch.is_tensor(s) else len(s))
            for j, t in enumerate([s] if torch.is_tensor(s) else s):
                tensors[f"hidden.{i}.{j}"] = self.ctx.gather_columns(t.detach(), dim=1).cpu().contiguous()
        meta = dict(hidden_layout=layout, model_config=self.model_config.to_dict(), world=self.ctx.world)
        return Saved(self.model, self.optimizer, self.ctx.device, tensors, meta, self.eval_weights)

    def write_history(self, history: list[dict]) -> None:
        """``log.csv``: the history as a table (docs/lm.md)."""
        write_log_csv(self.rundir.log_path, history)

    def _take_back(self, prog: Progress, tensors: dict, meta: dict, path: Path) -> None:
        own = checked(LMResumeMeta, meta, path, "metadata", strict=False)
        if own.model_config != self.model_config.to_dict():
            raise CheckpointError(
                f"{path} was written for another model ({own.model_config}) than {RunDir.CONFIG} "
                f"describes ({self.model_config.to_dict()}); the run directory is inconsistent"
            )
        if "t0" in (meta["optimizer"].get("param_groups") or [{}])[0]:  # saved in the averaging phase (torch's ASGD)
            self.optimizer = make_optimizer(self.params, self.cfg, averaging=True)
        if own.hidden_layout:
            self.hidden = self._restore_hidden(path, tensors, own.hidden_layout)
        averaging = " (averaging)" if prog.task.averaging else ""
        self.log(f"resumed {self.rundir.path} at epoch {prog.epoch + 1}, batch {prog.pos}, step {prog.step}{averaging}")

    def _restore_hidden(self, path: Path, tensors: dict[str, torch.Tensor], layout: list[int]) -> list:
        """The saved recurrent state (all columns, as :meth:`save_state` wrote it), cut to this process's columns."""
        size = self.cfg.batch_size
        start, stop = column_share(size, self.ctx.rank, self.ctx.world)
        names = [f"hidden.{i}.{j}" for i, n in enumerate(layout) for j in range(max(n, 1))]
        if missing := [k for k in names if k not in tensors]:
            raise CheckpointError(f"{path}: the saved state lacks {missing[0]}; the file is incomplete or was edited")
        bad = [tuple(t.shape) for k, t in tensors.items() if k.startswith("hidden.") and t.shape[1:2] != (size,)]
        if bad:
            raise CheckpointError(f"{path}: saved state has shape {bad[0]}, not {size} columns (batch_size)")
        cut = lambda i, j: tensors[f"hidden.{i}.{j}"][:, start:stop].contiguous().to(self.ctx.device)
        return [cut(i, 0) if n == 0 else tuple(cut(i, j) for j in range(n)) for i, n in enumerate(layout)]

    def finish(self, why: str, prog: Progress) -> tuple[dict | None, str | None]:
        """At the end of the epochs, the final test (``final_test``), once: its figures are the result's."""
        tested, task = "finished", prog.task
        if why in ("epochs", "patience"):
            task.finished = True
            if task.results is None and self.cfg.final_test:
                tested = self._final_test()
        return task.results, "interrupted" if tested == "interrupted" else None

    def _final_test(self) -> str:
        """Score the best weights on the first process; every process learns whether that was interrupted."""
        outcome, dev = {"status": "finished"}, self.ctx.device
        # the scoring model's initialisation must not move the random state the resume file keeps: a run extended
        # by --resume --epochs N would draw other dropout masks than one given those epochs from the start
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            self.ctx.main_writes(lambda: outcome.update(status=self._score_best()))
        status = "interrupted" if self.ctx.any(outcome["status"] == "interrupted") else "finished"
        if status == "finished":
            self.engine.save_state()
        return status

    def _score_best(self) -> str:
        """Score the best weights on valid (batched, eval_batch_size) and test (test_batch_size); the status."""
        cfg, prog, best = self.cfg, self.prog, self.rundir.weights("best")
        if not best.exists():
            self.log("no epoch had a finite validation loss, so there are no best weights to test")
            return "finished"
        model = LanguageModel(self.model_config).to(self.ctx.device)
        load_weights(best, model)
        try:
            with StopRequest(StopRequest.SCORING) as stop:
                valid = self._perplexity(model, "valid", "batched", cfg.eval_batch_size, stop)
                protocol = "paper" if cfg.test_batch_size == 1 else "batched"
                test = self._perplexity(model, "test", protocol, cfg.test_batch_size, stop, progress=cfg.progress)
        except Interrupted:
            self.log("final test interrupted; score the run later with onlstm lm eval")
            return "interrupted"
        tested = {**test.to_dict(), "sha256": self.test_sha256}
        prog.task.results = {"weights": best.name, "valid": valid.to_dict(), "test": tested}
        self.log(f"best weights: valid {valid.describe()}")
        self.log(f"best weights: test  {test.describe()}")
        return "finished"


def train_language_model(
    config: RunConfig | dict | str | Path,
    data_dir: str | Path,
    out: str | Path,
    *,
    resume: bool = False,
    log: Callable[[str], None] = print,
) -> TrainResult:
    """``onlstm lm train`` as a function: ``config`` is a :class:`~onlstm.lm.config.RunConfig` (from
    :func:`~onlstm.lm.config.load_config`), a preset name or YAML file, or ``{"model": {...}, "train": {...}}``;
    ``data_dir`` holds ``ptb.{train,valid,test}.txt``; ``out`` is the run directory (new, or resumed)."""
    if isinstance(config, RunConfig):
        explicit: dict = {"model": dict(config.model), "train": config.train.to_dict()}
    elif isinstance(config, dict):
        explicit = explicit_settings(None, config)  # its sections and names checked
    else:
        explicit = explicit_settings(config)
    return train(Path(out), Path(data_dir), explicit, resume=resume, log=log)


def train(
    run_dir: Path,
    data_dir: Path,
    explicit: dict | None = None,
    resume: bool = False,
    on_step=None,
    log: Callable[[str], None] = print,
    keep: tuple[str, ...] = (),
    trainer: Trainer | None = None,
) -> TrainResult:
    """Train (or resume) a run; ``explicit`` = ``{"model": {...}, "train": {...}}`` settings given by the user (config
    file and flags); ``on_step(trainer)`` after each update; ``log(message)``; ``keep``: names a new run's directory
    may already hold (the demo's corpus); ``trainer``: one made beforehand for these settings (hooks on its model).
    Returns the run's :class:`~onlstm.runs.engine.TrainResult` (also in ``results.json``); joins the process group
    under torchrun."""
    given, parts = (
        {name: (explicit or {}).get(name, {}) for name in SECTIONS},
        (run_sections, run_configs, RUNTIME_FIELDS),
    )
    plan = Plan("lm", "onlstm lm train", Path(run_dir), given, *parts, resume, keep, False, True, log, on_step)
    start = lambda run, settings, ctx: trainer or Trainer(run.path, data_dir, settings["model"], resume, ctx, log)
    return train_run(plan, start)
