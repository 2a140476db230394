"""Training of the AWD-style language model: the paper's recipe, exact resume, several processes.

The recipe (docs/design.md §2.1, the reference ``main.py``):

* the training text is cut into ``batch_size`` contiguous columns, read in segments of variable length
  (:func:`onlstm.lm.data.bptt_schedule`), the recurrent state carried (detached) from one segment to
  the next and reset at every epoch (an encoder with ``stateful=False`` in the registry, the Transformer,
  carries none: the model returns no state and every segment is read afresh); each step's learning rate is ``lr * seq_len / bptt``;
* loss = cross-entropy (full softmax) + AR ``alpha * mean(out^2)`` (``out`` the last layer's output
  before its dropout with ``ar_target: raw``, as the authors' ON-LSTM code; after it with ``dropped``,
  as AWD-LSTM's) + TAR ``beta * mean((raw_t - raw_{t-1})^2)`` on the last layer; gradient norm
  clipped at ``clip``;
* SGD (weight decay) until validation stops improving (NT-ASGD: worse than the best of all but the
  last ``nonmono`` SGD epochs), then, as the authors, a fresh ``torch.optim.ASGD(t0=0, lambd=0.)``
  driven by the same loop: its step size is the previous step's scaled rate and its average ``ax``
  starts from the second iterate (docs/lm.md); validation, the best checkpoint and the final test use
  ``ax``, which is optimizer state and so saved and resumed exactly.

Run directory (see :mod:`onlstm.checkpoint`)::

    config.json               kind "lm", model (LMConfig), train (TrainConfig), data
    vocab.json                the vocabulary
    model.best.safetensors    weights with the best validation loss (averaged once averaging started)
    model.last.safetensors    the weights evaluation would use now (averaged once averaging started)
    resume.safetensors        everything --resume needs, in one file written atomically: raw weights,
                              optimizer tensors, averaged weights, RNG state, the carried recurrent
                              state; the rest (epoch, position, histories) as JSON in its metadata
    log.csv                   one row per epoch
    results.json              final validation/test perplexity of the best weights
    tensorboard/              when the tensorboard package is installed

Resume continues exactly: a run stopped anywhere (``max_steps``, Ctrl-C, a checkpoint every
``checkpoint_every`` batches) and resumed gives the same weights, bit for bit, as an uninterrupted run
on the same machine and thread count.

Several processes: every process owns ``batch_size / world`` consecutive columns; the random state is
the same on every process and dropout masks are drawn for the whole batch and sliced, so a run on N
processes computes what one process with the whole batch computes (up to floating-point reduction
order). Checkpoints hold the whole batch's state, so a run can be resumed with another process count.
"""

from __future__ import annotations

import csv
import io
import math
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint import CheckpointError, atomic_write, config_header, read_json, save_weights, write_json
from ..config import ConfigError
from ..data.ptb import Corpus, load_corpus
from ..data.vocab import Vocab
from ..encoders import detach_state
from ..errors import TrainingDiverged
from ..nn import ONLSTM, kernels
from ..runs import (  # noqa: F401
    RunDirError,
    RunLock,
    StopRequest,
    check_output_dir,
    optimizer_from_data,
    optimizer_to_data,
    progress_bar,
    read_resume,
    restore_training,
    setup_torch,
    training_tensors,
    write_resume,
)
from .config import AR_TARGET_BEFORE_OPTION, RUNTIME_FIELDS, RunConfig, TrainConfig, check_model_section
from .data import batchify, bptt_schedule, column_share, segment
from .distributed import DistContext, setup, teardown
from .evaluate import Interrupted, perplexity
from .model import LanguageModel

RESUME_FILE = "resume.safetensors"
RESUME_FORMAT = "onlstm-lm-resume/1"
LOG_COLUMNS = (
    "epoch",
    "steps",
    "train_loss",
    "train_ppl",
    "valid_loss",
    "valid_ppl",
    "best_valid_ppl",
    "averaging",
    "tokens",
    "epoch_seconds",
    "tokens_per_s",
    "elapsed_s",
)


@dataclass
class Progress:
    """Where a run is; saved as JSON in the resume file."""

    epoch: int = 1  # current epoch, 1-based
    batch: int = 0  # segments of this epoch done
    step: int = 0  # optimizer steps since the start
    averaging: bool = False  # NT-ASGD has switched to averaging
    avg_count: int = 0  # steps averaged so far
    best_valid: float | None = None  # best validation loss (nats/token)
    sgd_valid_history: list = field(default_factory=list)  # validation losses of the SGD phase
    history: list = field(default_factory=list)  # one dict per finished epoch (log.csv)
    epoch_loss_sum: float = 0.0  # summed training cross-entropy of this epoch so far (all processes)
    epoch_tokens: int = 0
    epoch_seconds: float = 0.0
    elapsed: float = 0.0  # wall time of all sessions of this run
    finished: bool = False
    results: dict | None = None


class _Objective(nn.Module):
    """The training loss of one segment, as a module so that DistributedDataParallel can wrap it."""

    def __init__(self, model: LanguageModel, alpha: float, beta: float, ar_target: str = "raw"):
        super().__init__()
        self.model, self.alpha, self.beta, self.ar_target = model, alpha, beta, ar_target

    def forward(self, x, y, state, shard):
        out, state, extras = self.model(x, state, shard=shard)
        logits = self.model.logits(out)
        raw = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
        loss = raw
        if self.alpha:
            loss = loss + self.alpha * extras[self.ar_target].pow(2).mean()
        if self.beta and extras["raw"].shape[0] > 1:
            r = extras["raw"]
            loss = loss + self.beta * (r[1:] - r[:-1]).pow(2).mean()
        return loss, raw.detach(), state


# Devices where train.precision=bf16 is accepted (a module constant so that a test can add the CPU).
AUTOCAST_DEVICES = ("cuda",)


def use_onlstm_impl(model: nn.Module, impl: str, device: torch.device) -> None:
    """Make every ON-LSTM layer of ``model`` run ``impl`` (a runtime choice, never saved with the weights);
    a kernel that cannot run on ``device`` is an error here, before the first step, not a silent fallback."""
    if impl not in ("auto", "reference"):
        try:
            chosen = kernels.resolve_impl(impl, device, torch.float32)
        except RuntimeError as exc:
            raise ConfigError(f"train.onlstm_impl={impl}: {exc}; use auto or reference") from None
        if chosen != impl:
            raise ConfigError(
                f"train.onlstm_impl={impl}: that kernel does not run on {device.type} float32 tensors; "
                "use auto (the fastest one that does) or reference"
            )
    for m in model.modules():
        if isinstance(m, ONLSTM):
            m.impl = impl


def float32_state(state):
    """A carried state (tensor or nested tuples) with every floating tensor in float32."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return state.float() if state.is_floating_point() else state
    return tuple(float32_state(s) for s in state)


def nonmono_switch(history: list[float], loss: float, nonmono: int) -> bool:
    """NT-ASGD's trigger (the reference's condition): switch to averaging when this epoch's validation
    ``loss`` is worse than the best of the SGD epochs before the last ``nonmono`` ones (``history`` =
    validation losses of the earlier SGD epochs, oldest first)."""
    return len(history) > nonmono and loss > min(history[:-nonmono])


# --------------------------------------------------------------------------- optimizer state as data


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def make_averaging_optimizer(params, cfg: TrainConfig) -> torch.optim.ASGD:
    """NT-ASGD's averaging phase as the authors run it: torch's own ASGD with t0=0, lambd=0 (plain SGD
    steps plus the running average ``ax`` of the iterates). Its step size is fixed at the end of the
    previous step and its average starts from the second iterate (docs/lm.md, "Averaging")."""
    return torch.optim.ASGD(params, lr=cfg.lr, t0=0, lambd=0.0, weight_decay=cfg.weight_decay)


def is_averaging_state(opt_meta: dict) -> bool:
    """Whether saved optimizer metadata (:func:`onlstm.runs.optimizer_to_data`) is torch's ASGD."""
    groups = opt_meta.get("param_groups") or [{}]
    return "t0" in groups[0]


def _flatten_state(state) -> tuple[dict[str, torch.Tensor], list[int]]:
    tensors, layout = {}, []
    for i, s in enumerate(state):
        parts = [s] if torch.is_tensor(s) else list(s)
        layout.append(0 if torch.is_tensor(s) else len(parts))
        for j, t in enumerate(parts):
            tensors[f"hidden.{i}.{j}"] = t
    return tensors, layout


def _unflatten_state(tensors: dict[str, torch.Tensor], layout: list[int], device) -> list:
    out = []
    for i, n in enumerate(layout):
        if n == 0:
            out.append(tensors[f"hidden.{i}.0"].to(device))
        else:
            out.append(tuple(tensors[f"hidden.{i}.{j}"].to(device) for j in range(n)))
    return out


# --------------------------------------------------------------------------- run directory


def run_config_from_saved(saved: dict) -> RunConfig:
    if saved.get("kind") != "lm":
        raise CheckpointError(f"config.json has kind {saved.get('kind')!r}, not 'lm': not a language-model run")
    model = dict(saved["model"])
    model.pop("vocab_size", None)
    # runs saved before ar_target existed trained AR on the dropped output: they resume doing so
    train = {"ar_target": AR_TARGET_BEFORE_OPTION, **saved["train"]}
    return RunConfig(check_model_section(model), TrainConfig.from_dict(train))


def merge_for_resume(saved: RunConfig, explicit: dict) -> RunConfig:
    """Apply the explicitly given settings to a saved run: runtime fields may change, others must match."""
    clashes = []
    for k, v in explicit.get("model", {}).items():
        if saved.model.get(k) != v:
            clashes.append(f"model.{k} (run: {saved.model.get(k)!r}, given: {v!r})")
    train = saved.train.to_dict()
    given = TrainConfig.from_dict({**train, **explicit.get("train", {})}).to_dict()
    for k, v in given.items():
        if k in RUNTIME_FIELDS:
            train[k] = v
        elif v != train[k]:
            clashes.append(f"train.{k} (run: {train[k]!r}, given: {v!r})")
    if clashes:
        raise RunDirError(
            "cannot change " + ", ".join(clashes) + " when resuming; resume with the run's own "
            f"settings (only {', '.join(RUNTIME_FIELDS)} may change) or train into a new --out"
        )
    return RunConfig(dict(saved.model), TrainConfig.from_dict(train))


def write_log_csv(path: Path, history: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=LOG_COLUMNS, extrasaction="ignore")
    w.writeheader()
    for row in history:
        w.writerow(row)
    atomic_write(path, lambda tmp: Path(tmp).write_text(buf.getvalue()))


def _fmt_time(s: float) -> str:
    if not math.isfinite(s) or s < 0:
        return "?"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# --------------------------------------------------------------------------- the trainer


class Trainer:
    def __init__(
        self,
        run_dir: Path,
        data_dir: Path,
        explicit: dict,
        resume: bool = False,
        ctx: DistContext | None = None,
        log: Callable[[str], None] = print,
    ):
        self.run_dir, self.data_dir = Path(run_dir), Path(data_dir)
        self.resume = resume
        self.config = self._resolve_config(explicit)
        cfg = self.cfg = self.config.train
        setup_torch(cfg.threads)
        self.ctx = ctx or setup(cfg.device)
        if cfg.precision != "fp32" and self.ctx.device.type not in AUTOCAST_DEVICES:
            raise ConfigError(
                f"train.precision={cfg.precision} is for CUDA; on {self.ctx.device.type} train in fp32 "
                "(torch's CPU LSTM fails under bfloat16 autocast on CPUs without bfloat16 support, and it "
                "would not be faster on them)"
            )
        self._log = log
        if self.ctx.distributed and cfg.batch_size % self.ctx.world:
            raise RunDirError(
                f"batch_size {cfg.batch_size} is not divisible by the {self.ctx.world} processes; "
                "every process must own the same number of columns"
            )
        self._load_data()
        self._build_model()
        self._check_segment_lengths()
        if self.ctx.is_main and not resume:
            write_json(self.run_dir / "config.json", self._config_json())
            self.corpus.vocab.save(self.run_dir / "vocab.json")
        self.ctx.barrier()
        resume_file = self.run_dir / RESUME_FILE
        if resume and resume_file.exists():
            self._load(resume_file)
        elif resume:
            self.log(f"{self.run_dir} has no {RESUME_FILE} yet; starting from the beginning")
        self.stop = StopRequest()
        self._tb = None

    def _resolve_config(self, explicit: dict) -> RunConfig:
        """The run's settings: the saved ones (+ allowed changes) on resume, else defaults < explicit."""
        run_dir = self.run_dir
        if self.resume:
            if not (run_dir / "config.json").exists():
                raise RunDirError(
                    f"--resume: {run_dir} holds no config.json; it is not a run directory "
                    "(drop --resume to start a new run there)"
                )
            return merge_for_resume(run_config_from_saved(read_json(run_dir / "config.json")), explicit)
        check_output_dir(run_dir, command="onlstm lm train")
        from .config import load_config

        return load_config(None, explicit)

    def _load_data(self) -> None:
        """The corpus (with the run's vocabulary checked on resume) and this process's training columns."""
        cfg = self.cfg
        self.corpus: Corpus = load_corpus(self.data_dir, oov=cfg.oov, max_vocab=cfg.max_vocab)
        if self.resume:
            saved_vocab = Vocab.load(self.run_dir / "vocab.json")
            if saved_vocab.words != self.corpus.vocab.words:
                raise RunDirError(
                    f"the training text in {self.data_dir} gives a different vocabulary "
                    f"({len(self.corpus.vocab)} words) from the run's vocab.json ({len(saved_vocab)}); "
                    "resume with the --data-dir the run was started with"
                )
        start, stop = column_share(cfg.batch_size, self.ctx.rank, self.ctx.world)
        self.shard = (start, cfg.batch_size) if self.ctx.distributed else None
        columns = batchify(self.corpus["train"].ids, cfg.batch_size)
        self.train_data = columns[:, start:stop].contiguous().to(self.ctx.device)
        self.n_rows = columns.shape[0]

    def _build_model(self) -> None:
        """Model (seeded), optimizer, an empty progress record and the training objective."""
        cfg, dev = self.cfg, self.ctx.device
        self.model_config = self.config.model_config(len(self.corpus.vocab))
        torch.manual_seed(cfg.seed)
        self.model = LanguageModel(self.model_config).to(dev)
        use_onlstm_impl(self.model, cfg.onlstm_impl, dev)
        self.params = [p for _, p in self.model.named_parameters()]
        self.param_names = [n for n, _ in self.model.named_parameters()]
        self.optimizer: torch.optim.Optimizer = make_optimizer(self.params, cfg)
        self.progress = Progress()
        self.hidden = None
        objective = _Objective(self.model, cfg.alpha, cfg.beta, cfg.ar_target)
        if self.ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            objective = DDP(objective, device_ids=[dev.index] if dev.type == "cuda" else None)
        self.objective = objective

    def _check_segment_lengths(self) -> None:
        """A model whose layers have a length limit (learned positions) must accept every segment of every
        epoch: checked now, not when a long segment is drawn hours into the run (drawing them is cheap)."""
        limit, cfg = self.model.max_length, self.cfg
        if limit is None:
            return
        args = (cfg.variable_bptt, cfg.bptt_short_prob, cfg.bptt_std, cfg.min_seq_len)
        drawn = (
            s.length for e in range(1, cfg.epochs + 1) for s in bptt_schedule(self.n_rows, cfg.bptt, cfg.seed, e, *args)
        )
        longest = max([cfg.bptt, *drawn])
        if longest > limit:
            raise ConfigError(
                f"the training schedule has segments of up to {longest} tokens (bptt {cfg.bptt}, bptt_std "
                f"{cfg.bptt_std}) but the {self.model_config.cell!r} layers accept at most {limit} "
                f"(max_length); raise it (--encoder-options max_length={2 * longest}), lower --bptt, or (transformer) "
                "use positions=sinusoidal, which has no limit"
            )

    # -- helpers ---------------------------------------------------------------------------------
    def log(self, msg: str) -> None:
        if self.ctx.is_main:
            self._log(msg)

    def _config_json(self) -> dict:
        c = self.corpus
        data = {
            "data_dir": str(self.data_dir.resolve()),  # absolute: `lm eval` may run from another folder
            "closed_vocab": c.closed_vocab,
            "vocab_limited": c.limited,  # a vocab.txt or --max-vocab left words out: lm eval maps them to <unk>
            "oov": self.cfg.oov,
            **{f"{k}_tokens": s.n_tokens for k, s in c.splits.items()},
        }
        return config_header("lm", self.model_config.to_dict(), train=self.cfg.to_dict(), data=data)

    def averaged_weights(self) -> list[torch.Tensor] | None:
        """ASGD's running average (``ax``) once averaging started; a parameter ASGD has not stepped yet
        (just after the switch) counts with its current value, as ``ax`` would equal it after one step."""
        if not self.progress.averaging:
            return None
        state = self.optimizer.state
        return [state.get(p, {}).get("ax", p) for p in self.params]

    @contextmanager
    def eval_weights(self):
        """The weights evaluation uses: the running average once averaging started, else the current ones."""
        avg = self.averaged_weights()
        if avg is None:
            yield
            return
        saved = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p, a in zip(self.params, avg):
                p.copy_(a)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, s in zip(self.params, saved):
                    p.copy_(s)

    def _start_averaging(self) -> None:
        # the authors replace the optimizer by a fresh torch ASGD at the switch: so do we (no state carried)
        self.progress.averaging = True
        self.progress.avg_count = 0
        self.optimizer = make_averaging_optimizer(self.params, self.cfg)
        self.log(f"epoch {self.progress.epoch}: switching to averaged SGD (NT-ASGD)")

    # -- checkpoints -----------------------------------------------------------------------------
    def save(self) -> None:
        """Write the resume file and model.last (all processes take part: the state is gathered)."""
        self._flush_epoch_loss()
        self._check_finite()
        prog = self.progress
        tensors: dict[str, torch.Tensor] = {}
        layout: list[int] = []
        if self.hidden is not None and 0 < prog.batch:
            flat, layout = _flatten_state(self.hidden)
            for k, t in flat.items():
                tensors[k] = self.ctx.gather_columns(t.detach(), dim=1).cpu().contiguous()
        if not self.ctx.is_main:
            self.ctx.barrier()
            return
        common, opt_meta = training_tensors(self.model, self.optimizer, self.ctx.device)
        tensors.update(common)
        write_resume(
            self.run_dir / RESUME_FILE,
            RESUME_FORMAT,
            tensors,
            {
                "progress": asdict(prog),
                "optimizer": opt_meta,
                "hidden_layout": layout,
                "model_config": self.model_config.to_dict(),
                "world": self.ctx.world,
            },
        )
        with self.eval_weights():
            save_weights(self.run_dir / "model.last.safetensors", self.model)
        write_log_csv(self.run_dir / "log.csv", prog.history)
        self.ctx.barrier()

    def _load(self, path: Path) -> None:
        fix = f"move {path} away to start this run again from the beginning, or train into a new --out"
        tensors, meta = read_resume(
            path,
            RESUME_FORMAT,
            "an onlstm language-model resume file",
            ("model_config", "progress", "optimizer", "hidden_layout"),
            fix,
        )
        try:
            prog = Progress(**meta["progress"])
        except TypeError as e:
            raise CheckpointError(f"{path}: metadata is incomplete or corrupt ({e}); {fix}") from None
        if meta["model_config"] != self.model_config.to_dict():
            raise CheckpointError(
                f"{path} was written for another model ({meta['model_config']}) than config.json "
                f"describes ({self.model_config.to_dict()}); the run directory is inconsistent"
            )
        if is_averaging_state(meta["optimizer"]):
            self.optimizer = make_averaging_optimizer(self.params, self.cfg)
        restore_training(path, tensors, meta["optimizer"], self.model, self.optimizer, self.ctx.device)
        if prog.averaging and not is_averaging_state(meta["optimizer"]):
            self._continue_old_average(path, tensors, prog, meta["optimizer"])
        if meta["hidden_layout"]:
            self.hidden = self._restore_hidden(path, tensors, meta["hidden_layout"])
        self.progress = prog
        self.log(
            f"resumed {self.run_dir} at epoch {prog.epoch}, batch {prog.batch}, step {prog.step}"
            + (" (averaging)" if prog.averaging else "")
        )

    def _continue_old_average(self, path: Path, tensors: dict, prog: Progress, opt_meta: dict) -> None:
        """A file saved in the averaging phase before it used torch's ASGD holds SGD state and its own mean
        ``avg.*`` of the last ``avg_count`` iterates. Go on with ASGD from that mean: ASGD's state after
        step s averages s - 1 iterates (mu = 1/s), and eta is the rate of the last step."""
        self.optimizer = make_averaging_optimizer(self.params, self.cfg)
        k = prog.avg_count
        if k == 0:  # no averaged step yet: a fresh ASGD is exactly that state
            return
        eta = float(opt_meta["param_groups"][0]["lr"])
        for n, p in zip(self.param_names, self.params):
            if f"avg.{n}" not in tensors:
                raise CheckpointError(f"{path}: averaged weights avg.{n} missing; the file is incomplete")
            scalar = {"dtype": p.dtype, "device": p.device}
            self.optimizer.state[p] = {
                "step": torch.tensor(float(k + 1), **scalar),
                "eta": torch.tensor(eta, **scalar),
                "mu": torch.tensor(1.0 / (k + 1), **scalar),
                "ax": tensors[f"avg.{n}"].to(**scalar).clone(),
            }

    def _restore_hidden(self, path: Path, tensors: dict[str, torch.Tensor], layout: list[int]) -> list:
        """The saved recurrent state (all columns), cut to this process's columns."""
        full = _unflatten_state(tensors, layout, "cpu")
        start, stop = column_share(self.cfg.batch_size, self.ctx.rank, self.ctx.world)

        def cut(t):
            if t.shape[1] != self.cfg.batch_size:
                raise CheckpointError(
                    f"{path}: saved state has {t.shape[1]} columns, batch_size is {self.cfg.batch_size}"
                )
            return t[:, start:stop].contiguous().to(self.ctx.device)

        return [cut(s) if torch.is_tensor(s) else tuple(cut(t) for t in s) for s in full]

    # -- training ----------------------------------------------------------------------------------
    def _flush_epoch_loss(self) -> None:
        t = torch.stack([self._acc_loss, self._acc_tok]).cpu()
        t = self.ctx.all_reduce_sum(t)
        self.progress.epoch_loss_sum += float(t[0])
        self.progress.epoch_tokens += int(round(float(t[1])))
        self._acc_loss.zero_()
        self._acc_tok.zero_()
        now = time.perf_counter()
        self.progress.elapsed += now - self._clock
        if self._in_epoch:
            self.progress.epoch_seconds += now - self._clock
        self._clock = now

    def _check_finite(self) -> None:
        """Stop (no checkpoint written: the last good one is kept) once the training loss is NaN or
        infinite; checked before every save and validation, so diverged weights never reach a file."""
        prog = self.progress
        if not self.ctx.any(not math.isfinite(prog.epoch_loss_sum)):
            return
        best = self.run_dir / "model.best.safetensors"
        kept = [
            f"{best.name} (valid ppl {math.exp(prog.best_valid):.2f})" if prog.best_valid is not None else "",
            RESUME_FILE if (self.run_dir / RESUME_FILE).exists() else "",
        ]
        kept = [k for k in kept if k]
        raise TrainingDiverged(
            f"training diverged: the training loss is {prog.epoch_loss_sum / max(prog.epoch_tokens, 1)} in epoch "
            f"{prog.epoch} (by step {prog.step}); the diverged weights were not saved"
            + (f"; kept from before: {', '.join(kept)} in {self.run_dir}" if kept else "")
            + "; lower --lr or set --clip (e.g. 0.25) and train into a new --out"
        )

    def _tensorboard(self):
        if self._tb is None and self.cfg.tensorboard and self.ctx.is_main:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            except Exception:  # tensorboard not installed: CSV log only
                self._tb = False
        return self._tb or None

    def validate(self):
        with self.eval_weights():
            return perplexity(
                self.model,
                self.corpus["valid"].ids,
                "batched",
                self.cfg.eval_batch_size,
                self.cfg.bptt,
                self.ctx.device,
                rank=self.ctx.rank,
                world=self.ctx.world,
                reduce=self.ctx.all_reduce_sum,
                should_stop=(lambda: self.stop.requested) if not self.ctx.distributed else None,
            )

    def run(self, max_steps: int | None = None, on_step: Callable[[Trainer], None] | None = None) -> dict:
        """Train to ``cfg.epochs`` (or until ``max_steps`` optimizer steps in total, or a stop request),
        then (``final_test``) score the best weights. Returns ``{"status": ..., "progress": ...}``."""
        cfg, prog, ctx = self.cfg, self.progress, self.ctx
        self._acc_loss = torch.zeros((), dtype=torch.float64, device=ctx.device)
        self._acc_tok = torch.zeros((), dtype=torch.float64, device=ctx.device)
        self._clock = time.perf_counter()
        self._in_epoch = False
        self.model.train()
        status = "finished"
        with self.stop:
            try:
                status = self._epochs(max_steps, on_step)
            except KeyboardInterrupt:
                self.log("aborted without saving; the last checkpoint is kept")
                raise
        if status == "finished" and prog.results is None and cfg.final_test:
            status = self._final_test()
        if self._tb:
            self._tb.close()
        return {"status": status, "progress": asdict(prog)}

    def _epochs(self, max_steps, on_step) -> str:
        cfg, ctx = self.cfg, self.ctx
        prog = self.progress
        averaging_allowed = cfg.optimizer == "sgd" and cfg.averaging
        if prog.epoch > cfg.epochs:
            self.log(f"the run has already done its {cfg.epochs} epochs (pass --epochs N to train longer)")
        while prog.epoch <= cfg.epochs:
            sched = bptt_schedule(
                self.n_rows,
                cfg.bptt,
                cfg.seed,
                prog.epoch,
                cfg.variable_bptt,
                cfg.bptt_short_prob,
                cfg.bptt_std,
                cfg.min_seq_len,
            )
            if prog.batch == 0:
                self.hidden = None
                if (
                    averaging_allowed
                    and not prog.averaging
                    and cfg.asgd_start_epoch
                    and prog.epoch >= cfg.asgd_start_epoch
                ):
                    self._start_averaging()
            status = self._train_epoch(sched, max_steps, on_step)
            if status != "running":
                return status
            # validation at the end of the epoch
            self._flush_epoch_loss()
            self._check_finite()
            self._in_epoch = False
            try:
                valid = self.validate()
            except Interrupted:
                self.save()
                self.log(self._stopped_message("interrupted during validation"))
                return "interrupted"
            self._end_of_epoch(valid, averaging_allowed)
            if ctx.any(self.stop.requested):
                self.log(self._stopped_message("interrupted"))
                return "interrupted"
        prog.finished = True
        return "finished"

    def _train_epoch(self, sched, max_steps, on_step) -> str:
        cfg, ctx, prog = self.cfg, self.ctx, self.progress
        bar = progress_bar(
            cfg.progress and ctx.is_main,
            total=len(sched),
            initial=prog.batch,
            desc=f"epoch {prog.epoch}/{cfg.epochs}",
            unit="batch",
            leave=False,
            dynamic_ncols=True,
        )
        self._in_epoch = True
        # the running figures of the progress bar: since the last report, and since this session started
        self._since = {
            "tokens": 0,
            "loss": torch.zeros((), dtype=torch.float64, device=ctx.device),
            "clock": time.perf_counter(),
            "session_start": time.perf_counter(),
            "session_batches": 0,
        }
        try:
            for k in range(prog.batch, len(sched)):
                self._step(sched[k])
                prog.batch = k + 1
                bar.update(1)
                if on_step is not None:
                    on_step(self)
                if prog.step % cfg.log_every == 0 or k + 1 == len(sched):
                    self._report(bar, len(sched), len(sched) - k - 1)
                stop = ctx.any(self.stop.requested or bool(max_steps and prog.step >= max_steps))
                if stop or prog.step % cfg.checkpoint_every == 0:
                    self.save()
                if stop:
                    if self.stop.requested:
                        self.log(self._stopped_message("interrupted"))
                        return "interrupted"
                    self.log(self._stopped_message(f"stopped after {prog.step} steps (max_steps)"))
                    return "stopped"
        finally:
            bar.close()
        return "running"

    def _step(self, seg) -> None:
        """One optimizer step on one segment (+ the running average once averaging started)."""
        cfg, prog = self.cfg, self.progress
        x, y = segment(self.train_data, seg.start, seg.length)
        self.hidden = detach_state(self.hidden)
        for g in self.optimizer.param_groups:
            g["lr"] = cfg.lr * seg.lr_scale
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(self.ctx.device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
            loss, raw, hidden = self.objective(x, y, self.hidden, self.shard)
        # the carried state stays float32 whatever autocast made of it, so that evaluation, resume and a
        # later fp32 session read it as they would without autocast
        self.hidden = hidden if cfg.precision == "fp32" else float32_state(hidden)
        loss.backward()
        if cfg.clip:
            torch.nn.utils.clip_grad_norm_(self.params, cfg.clip)
        self.optimizer.step()  # in the averaging phase torch's ASGD: the step and its running average
        prog.avg_count += int(prog.averaging)
        prog.step += 1
        n = y.numel()
        self._acc_loss += raw.double() * n
        self._acc_tok += n
        self._since["loss"] += raw.double() * n
        self._since["tokens"] += n
        self._since["session_batches"] += 1

    def _report(self, bar, n_batches: int, left_in_epoch: int) -> None:
        """Loss, speed and time left on the progress bar (and tensorboard) since the last report."""
        cfg, prog, since = self.cfg, self.progress, self._since
        now = time.perf_counter()
        cur = float(since["loss"]) / max(since["tokens"], 1)
        tok_s = since["tokens"] * self.ctx.world / max(now - since["clock"], 1e-9)
        rate = since["session_batches"] / max(now - since["session_start"], 1e-9)
        left = (left_in_epoch + (cfg.epochs - prog.epoch) * n_batches) / rate
        bar.set_postfix_str(
            f"loss {cur:.3f} ppl {math.exp(min(cur, 50)):.1f} {tok_s:,.0f} tok/s left {_fmt_time(left)}", refresh=False
        )
        tb = self._tensorboard()
        if tb:
            tb.add_scalar("train/loss", cur, prog.step)
            tb.add_scalar("train/tokens_per_s", tok_s, prog.step)
        since["tokens"], since["clock"] = 0, now
        since["loss"].zero_()

    def _end_of_epoch(self, valid, averaging_allowed: bool) -> None:
        cfg, prog = self.cfg, self.progress
        # a non-finite validation loss is never the best (it would replace good weights with broken ones)
        improved = math.isfinite(valid.loss) and (prog.best_valid is None or valid.loss < prog.best_valid)
        if improved:
            prog.best_valid = valid.loss
            if self.ctx.is_main:
                with self.eval_weights():
                    save_weights(self.run_dir / "model.best.safetensors", self.model)
        train_loss = prog.epoch_loss_sum / max(prog.epoch_tokens, 1)
        row = {
            "epoch": prog.epoch,
            "steps": prog.step,
            "train_loss": round(train_loss, 6),
            "train_ppl": round(math.exp(min(train_loss, 50)), 3),
            "valid_loss": round(valid.loss, 6),
            "valid_ppl": round(valid.ppl, 3),
            "best_valid_ppl": round(math.exp(prog.best_valid), 3) if prog.best_valid is not None else float("nan"),
            "averaging": int(prog.averaging),
            "tokens": prog.epoch_tokens,
            "epoch_seconds": round(prog.epoch_seconds, 2),
            "tokens_per_s": round(prog.epoch_tokens / max(prog.epoch_seconds, 1e-9), 1),
            "elapsed_s": round(prog.elapsed, 1),
        }
        prog.history.append(row)
        self.log(
            f"epoch {prog.epoch:3d} | train ppl {row['train_ppl']:8.2f} | valid ppl {valid.ppl:8.2f}"
            f"{' *' if improved else '  '} | {'ASGD' if prog.averaging else 'SGD '} | "
            f"{row['epoch_seconds']:.0f} s | {row['tokens_per_s']:,.0f} tok/s"
        )
        tb = self._tensorboard()
        if tb:
            tb.add_scalar("valid/ppl", valid.ppl, prog.epoch)
            tb.add_scalar("train/epoch_ppl", row["train_ppl"], prog.epoch)
        if averaging_allowed and not prog.averaging:
            switch = nonmono_switch(prog.sgd_valid_history, valid.loss, cfg.nonmono)
            prog.sgd_valid_history.append(valid.loss)
            if switch:
                self._start_averaging()
        prog.epoch += 1
        prog.batch = 0
        prog.epoch_loss_sum, prog.epoch_tokens, prog.epoch_seconds = 0.0, 0, 0.0
        self.hidden = None
        self.save()

    def _stopped_message(self, why: str) -> str:
        p = self.progress
        return (
            f"{why}: saved {self.run_dir / RESUME_FILE} at epoch {p.epoch}, batch {p.batch}, step {p.step}; "
            f"continue with: onlstm lm train --out {self.run_dir} --data-dir {self.data_dir} --resume"
        )

    def _final_test(self) -> str:
        """Score the best weights on valid (batched, eval_batch_size) and test (test_batch_size)."""
        cfg, prog = self.cfg, self.progress
        status = "finished"
        best = self.run_dir / "model.best.safetensors"
        if self.ctx.is_main and not best.exists():
            self.log("no epoch had a finite validation loss, so there are no best weights to test")
        elif self.ctx.is_main:
            model = LanguageModel(self.model_config).to(self.ctx.device)
            from ..checkpoint import load_weights

            load_weights(best, model)
            test_protocol = "paper" if cfg.test_batch_size == 1 else "batched"
            try:
                with self.stop:
                    stop = lambda: self.stop.requested
                    valid = perplexity(
                        model,
                        self.corpus["valid"].ids,
                        "batched",
                        cfg.eval_batch_size,
                        cfg.bptt,
                        self.ctx.device,
                        should_stop=stop,
                    )
                    test = perplexity(
                        model,
                        self.corpus["test"].ids,
                        test_protocol,
                        cfg.test_batch_size,
                        cfg.bptt,
                        self.ctx.device,
                        progress=cfg.progress,
                        should_stop=stop,
                    )
            except Interrupted:
                self.log("final test interrupted; score the run later with onlstm lm eval")
                status = "interrupted"
            else:
                prog.results = {
                    "weights": "model.best.safetensors",
                    "valid": valid.to_dict(),
                    "test": test.to_dict(),
                    "epochs": prog.epoch - 1,
                    "steps": prog.step,
                    "train_seconds": round(prog.elapsed, 1),
                }
                write_json(self.run_dir / "results.json", prog.results)
                self.log(f"best weights: valid {valid.describe()}")
                self.log(f"best weights: test  {test.describe()}")
        if self.ctx.distributed:
            flag = torch.tensor([1.0 if status == "interrupted" else 0.0])
            flag = self.ctx.all_reduce_sum(flag)
            status = "interrupted" if float(flag[0]) > 0 else status
        if status == "finished":
            self.save()
        return status


def train(
    run_dir: Path,
    data_dir: Path,
    explicit: dict | None = None,
    resume: bool = False,
    max_steps: int | None = None,
    on_step=None,
    log: Callable[[str], None] = print,
) -> dict:
    """Train (or resume) a run; ``explicit`` = ``{"model": {...}, "train": {...}}`` settings given by the
    user (config file and flags). Returns ``{"status", "progress"}``; joins the process group under torchrun."""
    check_output_dir(run_dir, resume=resume, command="onlstm lm train")
    if not resume:  # every setting checked (the model's too) before anything is created or read
        from .config import load_config

        load_config(None, explicit or {}).model_config(vocab_size=1)
    main = int(os.environ.get("RANK", "0")) == 0  # under torchrun the first process holds the lock
    try:
        with RunLock(run_dir, "onlstm lm train", log=log, enabled=main):
            trainer = Trainer(run_dir, data_dir, explicit or {}, resume=resume, log=log)
            return trainer.run(max_steps=max_steps, on_step=on_step)
    finally:
        teardown()
