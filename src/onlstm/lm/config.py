"""Settings of a language-model run: the ``model:`` section (:class:`~onlstm.models.language_model.LMConfig`, less
vocab_size) and the recipe (:class:`TrainConfig`, ``train:``), the paper's command by default; every field is also
a flag of ``onlstm lm train``. The machinery is :mod:`onlstm.config`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import encoders
from ..config import (
    ConfigError,
    Runtime,
    Settings,
    check_section,
    field_defaults,
    option,
    runtime_fields,
    runtime_option,
    seed_option,
    threads_option,
)
from ..flags import add_flags, command_line
from ..models.language_model import LMConfig, check_architecture
from ..nn import kernels
from ..runs.budget import BudgetOptions


@dataclass
class TrainConfig(BudgetOptions):
    """The training recipe. Defaults are the paper's PTB command (docs/design.md §2.1). The runtime fields
    (device, threads, progress) come from :class:`~onlstm.config.Runtime`, the budget (time_limit, max_steps) and
    reporting from :class:`~onlstm.runs.budget.BudgetOptions`."""

    section = "train"
    # max_steps and time_limit stop without validating: a check in the middle of an epoch would add a row to the
    # epoch log and could move NT-ASGD's switch
    check_at_stop = False

    seed: int = seed_option(141, "random seed (weights, dropout masks, BPTT lengths)")
    epochs: int = runtime_option(1000, "number of passes over the training text", ge=1)
    batch_size: int = option(20, "columns the training stream is cut into (split among processes)", ge=1)
    eval_batch_size: int = option(10, "columns of the validation stream in training (reference: 10)", ge=1)
    test_batch_size: int = option(1, "columns of the test stream for the final test (the paper: 1)", ge=1)
    bptt: int = option(70, "mean segment length (truncated back-propagation through time)", ge=1)
    variable_bptt: bool = option(True, "draw segment lengths: bptt (or bptt/2 with bptt_short_prob) + N(0, bptt_std)")
    bptt_short_prob: float = option(0.05, "probability of a segment centred on bptt/2", ge=0, le=1)
    bptt_std: float = option(5.0, "standard deviation of the segment length", ge=0)
    min_seq_len: int = option(5, "shortest drawn segment", ge=1)
    optimizer: str = option("sgd", "sgd (the paper; switches to averaging, NT-ASGD) or adam", choices=("sgd", "adam"))
    lr: float = option(30.0, "learning rate, scaled per segment by seq_len / bptt", gt=0)
    momentum: float = option(
        0.0, "SGD momentum (the paper: 0); the averaging phase (torch's ASGD) has none", ge=0, lt=1
    )
    weight_decay: float = option(1.2e-6, "L2 weight decay", ge=0)
    clip: float = option(0.25, "gradient-norm clipping (0: none)", ge=0)
    alpha: float = option(2.0, "AR: alpha * mean(last layer's output ^ 2), the output ar_target names", ge=0)
    ar_target: str = option(
        "raw",
        "the tensor AR penalises: raw (the last layer's output before its locked dropout, as the authors' "
        "ON-LSTM code does) or dropped (after it, as the original AWD-LSTM code does); docs/lm.md",
        choices=("raw", "dropped"),
    )
    beta: float = option(1.0, "TAR: beta * mean((h_t - h_{t-1}) ^ 2) of the last layer's raw output", ge=0)
    averaging: bool = option(True, "with sgd: once validation stalls, average weights (torch's ASGD, t0=0, lambd=0)")
    nonmono: int = option(
        5,
        "switch to averaging when validation is worse than the best of all but the last nonmono epochs",
        ge=1,
    )
    asgd_start_epoch: int = option(
        0, "with averaging: start averaging at this epoch at the latest (0: only the nonmono rule)", ge=0
    )
    # The paper's stopping rule with a cap: its runs train a fixed number of epochs, long after averaging began;
    # a run on a budget needs to know when the averaged model stopped gaining. Counted only once averaging
    # started (SGD epochs before the switch are expected to wobble: that wobble is what triggers it).
    patience: int = option(
        0,
        "with averaging: stop when the averaged weights have not improved validation for this many epochs in a "
        "row (0: never; the run trains its epochs)",
        ge=0,
    )
    oov: str = option(
        "auto",
        "valid/test words outside the vocabulary: auto (error if the training text has "
        "<unk>), error, or unk (map to <unk>)",
        choices=("auto", "error", "unk"),
    )
    max_vocab: int = option(
        0,
        "keep only the N most frequent training words (others become <unk>; 0: every word); with a "
        "vocab.txt in the data folder, its first N words",
    )
    final_test: bool = runtime_option(
        True, "at the end, score the best weights on the test set (test_batch_size columns)"
    )
    # --- runtime options (may change when resuming) ---
    onlstm_impl: str = runtime_option(
        "auto",
        "what runs the ON-LSTM layers: auto (the fastest available for the device: the C++ kernel on CPU, "
        "Triton on CUDA), reference (the step loop), or a registered kernel's name (onlstm info lists them)",
    )
    precision: str = runtime_option(
        "fp32",
        "fp32, or bf16: training steps under torch.autocast (matrix products in bfloat16, the ON-LSTM cell "
        "state and cumax and the loss in float32; on CUDA, or a CPU with bfloat16 products); evaluation always runs in float32",
        choices=("fp32", "bf16"),
    )
    cuda_graphs: bool = runtime_option(
        True,
        "on CUDA, replay each segment length's step (forward, loss, backward, clipping) as a CUDA graph "
        '(docs/lm.md, "Training on a GPU"); no effect elsewhere',
    )
    compile: bool = runtime_option(
        False,
        "compile the training step's model and loss with torch.compile (inductor; each ON-LSTM layer stays its "
        "kernel, one operator): 15-30 s of compiling at the start of each session, then a few percent faster "
        "(docs/lm.md); on CUDA it replaces the trainer's CUDA graphs; not under torchrun",
    )
    log_every: int = runtime_option(
        100, "batches between reports: the progress bar's figures, a log line, a row of steps.csv", ge=1
    )
    checkpoint_every: int = runtime_option(
        1000, "batches between resumable checkpoints (also at every epoch end and on Ctrl-C)", ge=1
    )

    def validate(self) -> None:
        if self.max_vocab != 0 and self.max_vocab < 3:
            raise ConfigError(f"train.max_vocab must be 0 (every word) or at least 3, got {self.max_vocab}")
        if self.onlstm_impl not in kernels.impl_choices():  # checked here: kernels may be registered at run time
            raise ConfigError(
                f"train.onlstm_impl must be one of {', '.join(kernels.impl_choices())}, got {self.onlstm_impl!r}"
            )


#: The fields that describe how to run, not what is learned (declared ``runtime``): they may change on resume.
RUNTIME_FIELDS = runtime_fields(TrainConfig)


@dataclass
class EvalRuntime(Runtime):
    """``onlstm lm eval``'s runtime flags: by default, the threads the run was trained with."""

    threads: int | None = threads_option(None, default_text="the run's own threads setting")
    cuda_graphs: bool = runtime_option(
        True, 'on CUDA, replay the segments of --bptt tokens as one CUDA graph (docs/lm.md, "Training on a GPU")'
    )


#: The sections of a preset and of ``onlstm lm train``'s flags (the model without vocab_size: the text gives it).
SECTIONS = {"model": LMConfig, "train": TrainConfig}


@dataclass
class RunConfig:
    """What ``onlstm lm train`` runs: the model section (without vocab_size), checked whole here before the text
    gives the vocabulary size, and the recipe; :meth:`model_config` builds the run's one :class:`LMConfig`."""

    model: dict
    train: TrainConfig

    def __post_init__(self):
        self.model = {**field_defaults(LMConfig), **check_section(LMConfig, self.model, "model")}
        check_architecture(self.model)

    def model_config(self, vocab_size: int) -> LMConfig:
        return LMConfig(vocab_size=vocab_size, **self.model)


def explicit_settings(
    path: Path | str | None = None, overrides: argparse.Namespace | dict | None = None, cells: list[str] | None = None
) -> dict:
    """What the user set: the config file's (or preset's) fields, then the flags' (``{"model": {...}, "train":
    {...}}``); ``overrides``: the parsed command line or such a dict. The encoder checks (:mod:`onlstm.encoders`)
    run here, for ``cells`` (default: the model's cell)."""
    settings = Settings.resolve(SECTIONS, path, overrides, experiment="lm")
    model = settings.given["model"]
    encoders.check_typed_options(cells or [model.get("cell", LMConfig.cell)], settings.typed["model"])
    encoders.check_option_clash(model)
    return settings.given


def load_config(path: Path | str | None = None, overrides: argparse.Namespace | dict | None = None) -> RunConfig:
    """Defaults <- YAML file or preset ``path`` <- ``overrides`` (as :func:`explicit_settings`)."""
    return run_config(explicit_settings(path, overrides), path)


def run_config(given: dict, source: Path | str | None = None) -> RunConfig:
    """The settings ``given`` (:func:`explicit_settings`' result, read from ``source``) over the defaults."""
    try:
        return RunConfig(given.get("model", {}), TrainConfig.from_dict(given.get("train", {})))
    except (TypeError, ValueError) as e:
        if source is None and isinstance(e, ConfigError):
            raise  # it names the setting; "configuration:" would say nothing more
        raise ConfigError(f"{source or 'configuration'}: {e}") from None


def run_sections(header: dict) -> dict[str, dict]:
    """A run's settings (its ``config.json``) as sections of checked values (the model's without vocab_size: the
    text gives it)."""
    model = {k: v for k, v in header["model"].items() if k != "vocab_size"}
    return {"model": check_section(LMConfig, model, "model"), "train": TrainConfig.from_dict(header["train"]).to_dict()}


def run_configs(sections: dict[str, dict]) -> dict[str, Any]:
    """The configs of checked sections (:func:`run_sections`): the run's :class:`RunConfig` and its recipe."""
    config = RunConfig({**field_defaults(LMConfig), **sections["model"]}, TrainConfig.from_dict(sections["train"]))
    return {"model": config, "train": config.train}


def add_config_flags(parser: argparse.ArgumentParser, grid: bool = False) -> None:
    """One flag per model and training field (the value given overrides the config file); ``grid``: less ``--cell``
    and ``--seed``, which a grid of runs sets per run (``lm compare``'s ``--cells``, ``--seeds``)."""
    add_flags(parser, LMConfig, "model", "model (override the config's model section)", skip=("cell",) if grid else ())
    add_flags(
        parser, TrainConfig, "train", "training (override the config's train section)", skip=("seed",) if grid else ()
    )


def train_command(config: dict) -> str | None:
    """The ``onlstm lm train`` command that reproduces a run's settings, from its ``config.json`` (None for a
    run that ``lm train`` did not write, e.g. the demo's). ``--out`` is a placeholder."""
    if not isinstance(config.get("train"), dict):
        return None
    data_dir = (config.get("data") or {}).get("data_dir") or "DATA_DIR"
    return command_line(["onlstm", "lm", "train", "--data-dir", str(data_dir), "--out", "RUN"], config, SECTIONS)
