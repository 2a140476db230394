"""Typed settings of the logical-inference experiment: the classifier's architecture (saved with every run),
the training recipe, and what ``compare`` and ``eval`` run. Every field is a command-line flag and a key of
the YAML presets ``logic/<name>`` (``onlstm presets``; see :mod:`onlstm.config`)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import encoders
from ..config import Config, ConfigError, Runtime, Settings, option, runtime_fields, runtime_option, seed_option
from ..nn.functional import MASTER_INPUT_MODES
from ..runs.budget import BudgetOptions
from ..studies.grid import check_named_once
from .formulas import VOCABULARY
from .relations import RELATIONS

#: How ``valid_split`` picks the validation pairs (:func:`onlstm.logic.data.split_train_valid`).
VALID_SPLITS = ("random", "ordered")
#: Activations of the MLP's hidden layer (built in :mod:`onlstm.logic.model`).
MLP_ACTIVATIONS = ("relu", "elu")


@dataclass
class LogicModelConfig(Config):
    """Architecture of :class:`LogicClassifier` (saved in ``config.json``). ``chunk_size``, ``master_input`` and
    ``dropconnect`` are encoder options: each encoder receives those it declares (:mod:`onlstm.encoders`)."""

    section = "model"
    config_kind = "logic model config"

    cell: str = option("onlstm", lambda: encoders.cell_help())
    emb_size: int = option(128, "embedding size (paper: 128)", ge=1)
    hidden_size: int = option(400, "encoder units (paper: 400)", ge=1)
    chunk_size: int = option(
        10,
        encoders.option_help(
            "chunk_size", "ON-LSTM chunk size (10: 40 chunks of 10 units, the paper's language-model chunk size)"
        ),
        ge=1,
    )
    master_input: str = option(
        "paper",
        encoders.option_help(
            "master_input", "ON-LSTM master input gate: paper (the layer's default; top chunk never written) or reverse"
        ),
        choices=MASTER_INPUT_MODES,
    )
    dropout: float = option(0.2, "dropout on embeddings, features and MLP hidden layer (paper: 0.2)", ge=0, lt=1)
    dropconnect: float = option(
        0.0, encoders.option_help("dropconnect", "DropConnect on hidden-to-hidden weights"), ge=0, lt=1
    )
    mlp_hidden: int = option(400, "MLP hidden width; 0 = a single linear layer over the features", ge=0)
    mlp_activation: str = option(
        "relu", "activation of the MLP's hidden layer: relu or elu (the authors' script)", choices=MLP_ACTIVATIONS
    )
    encoder_options: dict[str, Any] = option({}, encoders.ENCODER_OPTIONS_HELP, omit_default=True)
    n_classes: int = option(len(RELATIONS), "number of relations", flag=False, ge=1)
    vocab_size: int = option(len(VOCABULARY) + 1, "token vocabulary size (with padding)", flag=False, ge=1)

    def validate(self) -> None:
        spec = encoders.check_cell(self.cell, "cell")
        spec.validate(self.hidden_size, self.layer_options())

    def layer_options(self, cell: str | None = None) -> dict:
        """The options this config gives encoder ``cell`` (default: its own): the fields the encoder declares
        and ``encoder_options``."""
        return encoders.options_for(cell or self.cell, self, self.encoder_options)


@dataclass
class LogicTrainConfig(BudgetOptions):
    """Options of :func:`train` (saved in ``config.json``); device, threads and progress from :class:`Runtime`, the
    budget (epochs, time_limit, max_steps) and reporting from :class:`~onlstm.runs.budget.BudgetOptions`."""

    section = "train"
    config_kind = "logic train config"

    max_train_ops: int = option(
        6, "train on pairs whose larger operator count is <= this (files train0…train{max_train_ops})", ge=0
    )
    valid_fraction: float = option(0.1, "share of those pairs held out for validation (early stopping)", gt=0, lt=1)
    valid_split: str = option(
        "random",
        "how the validation pairs are chosen: random (a seeded random valid_fraction) or ordered (every "
        "round(1 / valid_fraction)-th pair of the files read in order, train0 first: the authors' script)",
        choices=VALID_SPLITS,
    )
    score_test: bool = option(
        False,
        "also score the data's test{k} files at every validation check (recorded in history.json, as the "
        "authors' script prints its test accuracy every epoch); the run's result is still its best-validation check",
    )
    max_train_examples: int | None = option(
        None, "use a random subset of N pairs (before the validation split)", default_text="all", ge=2
    )
    # On the original data both models sit near the majority label for thousands of updates when every length is
    # mixed from the start, while pairs of <= 2 operators are learned within ~2,000 (docs/results.md, issue #15).
    curriculum_start: int | None = option(
        None,
        "train first on pairs with at most this many operators, one more every curriculum_steps updates up to "
        "max_train_ops (validation always on every length)",
        default_text="off: every length from the first update",
        ge=0,
    )
    curriculum_steps: int = option(2000, "updates per curriculum stage (0: none, overriding a preset)", ge=0)
    seed: int = seed_option(0, "seed of subset, split, init, dropout and batch order")
    batch_size: int = option(128, "pairs per step", ge=1)
    lr: float = option(1e-3, "Adam learning rate", gt=0)
    lr_decay: float = option(
        0.5, "lr factor after lr_patience checks in a row without improvement; 1 = constant", gt=0, le=1
    )
    # Both models sit on a ~65% plateau for thousands of steps before they learn the operators; decaying after
    # every such check (lr_patience 1) kept the LSTM there for good.
    lr_patience: int = option(
        3, "validation checks in a row without improvement before each decay (then counted anew)", ge=1
    )
    min_lr: float = option(1e-5, "never decay the learning rate below this (at most lr)", ge=0)
    weight_decay: float = option(0.0, "Adam's (L2) weight decay; the authors' script: 1.2e-6", ge=0)
    adam_eps: float = option(1e-8, "Adam's epsilon (torch's default; the authors' script: 1e-9)", gt=0)
    adam_beta1: float = option(
        0.9,
        "Adam's first-moment decay (torch's default, and the authors' logic script's: its betas=(0, 0.999) line is commented out)",
        ge=0,
        lt=1,
    )
    clip: float = option(1.0, "gradient norm clipping; 0 = none", ge=0)
    patience: int = option(8, "stop after this many validation checks in a row without improvement", ge=1)
    valid_every: int = option(0, "steps between validation checks; 0 = once per epoch", ge=0)
    eval_batch_size: int = runtime_option(512, "pairs per evaluation batch", ge=1)
    cuda_graphs: bool = runtime_option(
        True, 'on CUDA, replay the step as CUDA graphs over padded batches (docs/logic.md, "Training on a GPU")'
    )
    precision: str = runtime_option(
        "fp32",
        "fp32, or bf16: training steps under torch.autocast (matrix products in bfloat16, the ON-LSTM cell state and "
        "the loss in float32; on CUDA, and on CPUs with bfloat16 products); evaluation always runs in float32",
        choices=("fp32", "bf16"),
    )

    def validate(self) -> None:
        if self.curriculum_start is not None and self.curriculum_start > self.max_train_ops:
            raise ConfigError(
                f"curriculum_start must be in [0, max_train_ops={self.max_train_ops}] or None (no curriculum), "
                f"got {self.curriculum_start}"
            )
        if self.min_lr > self.lr:
            raise ConfigError(f"min_lr must be in [0, lr={self.lr}], got {self.min_lr}")


@dataclass
class CompareSettings(Config):
    """What ``onlstm logic compare`` compares (the ``compare:`` section of a config file, or flags)."""

    section = "compare"

    # The paper's comparison; any registered encoder can be named.
    cells: list[str] = option(["onlstm", "lstm"], lambda: f"encoders to compare, from: {', '.join(encoders.names())}")
    seeds: list[int] = seed_option([0], "seeds")
    lengths: str | list[int] = option("1-12", "test file numbers, e.g. 1-12 or 0-3,12")
    split: str = option(
        "test",
        "test: score each run on the test files; valid: on its own validation hold-out of the training files "
        "(for data whose test files are kept back)",
        choices=("test", "valid"),
    )

    finished_only: bool = option(
        False,
        "train nothing: score the runs already finished in OUT with these settings and list the others with how "
        "far they got (a study whose runs are still going)",
    )
    test_data: str | None = option(
        None,
        "score on the test files of this folder instead of --data's (e.g. another test distribution); "
        "training still reads --data",
    )
    jobs: int = option(
        1,
        "train this many runs at once, each in a process of its own with its log in OUT/<cell>-seed<seed>.log "
        "(several processes use one GPU or many CPU cores better than one; a train.threads of 0 is then shared "
        "out between them)",
        ge=1,
    )

    def validate(self) -> None:
        if bad := [c for c in self.cells if c not in encoders.names()]:
            raise ConfigError(f"unknown cells {bad}; choose from {encoders.names()}")
        if not self.cells or not self.seeds:
            raise ConfigError("compare.cells and compare.seeds must not be empty")
        for flag, values in (("--cells (compare.cells)", self.cells), ("--seeds (compare.seeds)", self.seeds)):
            check_named_once(flag, values, ConfigError)  # a run counted twice: a verdict from a fake second seed


@dataclass
class EvalSettings(Runtime):
    """Options of ``onlstm logic eval`` (and of ``logic trees``, which reads the same pairs) besides the checkpoint
    and the data."""

    section = "eval"

    split: str = option(
        "test",
        "which pairs to score: test{k} or train{k} files, or valid: the run's own validation hold-out of the "
        "train{k} files in --data (rebuilt from its seed and valid_fraction, as in training)",
        choices=("test", "train", "valid"),
    )
    lengths: str = option("1-12", "file numbers to evaluate, e.g. 1-12 or 0-12")
    tag: str = option("best", "weights file model.<tag>.safetensors")
    batch_size: int = option(512, "pairs per batch (`logic trees`: formulas per batch)", ge=1)


#: A config file's sections (checked against their dataclasses: names and value types) and its other keys.
SECTIONS = {"model": LogicModelConfig, "train": LogicTrainConfig, "compare": CompareSettings}
CONFIG_KEYS = ("data", "out")


def resolve(
    path: str | Path | None, flags: argparse.Namespace | dict | None, compare: bool = False
) -> tuple[Settings, LogicModelConfig, LogicTrainConfig, CompareSettings | None]:
    """``logic train``'s (``logic compare``'s) settings: defaults < the file or preset ``path`` < ``flags`` (the
    command line or ``{section: {field: value}}``), with the encoder checks (:mod:`onlstm.encoders`) for Python as
    for the commands. With ``compare`` the model takes the first compared cell (onlstm may not be one)."""
    settings = Settings.resolve(SECTIONS, path, flags or {}, experiment="logic", keys=CONFIG_KEYS)
    what = settings.build("compare") if compare else None
    cells = what.cells if what else [settings.given["model"].get("cell", LogicModelConfig.cell)]
    encoders.check_typed_options(cells, settings.typed["model"])  # a typed --chunk-size no trained cell uses
    encoders.check_option_clash(settings.given["model"])
    model = settings.build("model", cell=cells[0])
    for cell in cells[1:]:  # every cell must work with these settings before the first one trains
        encoders.get(cell).validate(model.hidden_size, model.layer_options(cell))
    return settings, model, settings.build("train"), what


def load_config(
    path: str | Path | None = None, overrides: dict[str, dict[str, Any]] | None = None
) -> tuple[LogicModelConfig, LogicTrainConfig]:
    """The model and training configs ``onlstm logic train --config PATH`` would use: defaults < the YAML file or
    preset ``path`` (``"smoke"``, ``"original"``, ...) < ``overrides`` (``{"model": {...}, "train": {...}}``, checked
    as flags are: :func:`resolve`), for :func:`onlstm.logic.train_classifier`."""
    _, model, train, _ = resolve(path, overrides)
    return model, train


#: Training settings that do not change what is learned (declared ``runtime``: display, evaluation batching,
#: threads, device, the budgets); a resumed run may change them.
RUNTIME_FIELDS = runtime_fields(LogicTrainConfig)


def read_sections(header: Mapping) -> dict[str, dict]:
    """A run's (or the given) settings read through the dataclasses, so that a field added later has its default."""
    model = asdict(LogicModelConfig.from_dict(header.get("model") or {}))
    return {"model": model, "train": asdict(LogicTrainConfig.from_dict(header.get("train") or {}))}
