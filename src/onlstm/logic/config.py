"""Typed settings of the logical-inference experiment: the classifier's architecture (saved with every run),
the training recipe, and what ``compare`` and ``eval`` run. Every field is a command-line flag and a key of
the YAML presets ``logic/<name>`` (``onlstm presets``; see :mod:`onlstm.config`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import encoders
from ..config import (
    Config,
    ConfigError,
    Runtime,
    Settings,
    check_probabilities,
    option,
    runtime_fields,
    runtime_option,
    seed_option,
)
from ..nn.functional import MASTER_INPUT_MODES
from ..runs.budget import BudgetOptions
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
    emb_size: int = option(128, "embedding size (paper: 128)", bounds=(1, None))
    hidden_size: int = option(400, "encoder units (paper: 400)", bounds=(1, None))
    chunk_size: int = option(
        10,
        encoders.option_help(
            "chunk_size", "ON-LSTM chunk size (10: 40 chunks of 10 units, the paper's language-model chunk size)"
        ),
        bounds=(1, None),
    )
    master_input: str = option(
        "paper",
        encoders.option_help(
            "master_input", "ON-LSTM master input gate: paper (the layer's default; top chunk never written) or reverse"
        ),
        choices=MASTER_INPUT_MODES,
    )
    dropout: float = option(0.2, "dropout on embeddings, features and MLP hidden layer (paper: 0.2)")
    dropconnect: float = option(0.0, encoders.option_help("dropconnect", "DropConnect on hidden-to-hidden weights"))
    mlp_hidden: int = option(400, "MLP hidden width; 0 = a single linear layer over the features", bounds=(0, None))
    mlp_activation: str = option(
        "relu", "activation of the MLP's hidden layer: relu or elu (the authors' script)", choices=MLP_ACTIVATIONS
    )
    encoder_options: dict[str, Any] = option({}, encoders.ENCODER_OPTIONS_HELP, omit_default=True)
    n_classes: int = option(len(RELATIONS), "number of relations", flag=False, bounds=(1, None))
    vocab_size: int = option(len(VOCABULARY) + 1, "token vocabulary size (with padding)", flag=False, bounds=(1, None))

    def validate(self) -> None:
        spec = encoders.check_cell(self.cell, "cell")
        check_probabilities(self, ["dropout", "dropconnect"])
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
        6, "train on pairs whose larger operator count is <= this (files train0…train{max_train_ops})", bounds=(0, None)
    )
    valid_fraction: float = option(0.1, "share of those pairs held out for validation (early stopping)")
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
        None, "use a random subset of N pairs (before the validation split)", default_text="all", bounds=(2, None)
    )
    # On the original data both models sit near the majority label for thousands of updates when every length is
    # mixed from the start, while pairs of <= 2 operators are learned within ~2,000 (docs/results.md, issue #15).
    curriculum_start: int | None = option(
        None,
        "train first on pairs with at most this many operators, one more every curriculum_steps updates up to "
        "max_train_ops (validation always on every length)",
        default_text="off: every length from the first update",
    )
    curriculum_steps: int = option(
        2000, "updates per curriculum stage (0: none, overriding a preset)", bounds=(0, None)
    )
    seed: int = seed_option(0, "seed of subset, split, init, dropout and batch order")
    batch_size: int = option(128, "pairs per step", bounds=(1, None))
    lr: float = option(1e-3, "Adam learning rate")
    lr_decay: float = option(0.5, "lr factor after lr_patience checks in a row without improvement; 1 = constant")
    # Both models sit on a ~65% plateau for thousands of steps before they learn the operators; decaying after
    # every such check (lr_patience 1) kept the LSTM there for good.
    lr_patience: int = option(
        3, "validation checks in a row without improvement before each decay (then counted anew)", bounds=(1, None)
    )
    min_lr: float = option(1e-5, "never decay the learning rate below this")
    weight_decay: float = option(0.0, "Adam's (L2) weight decay; the authors' script: 1.2e-6", bounds=(0, None))
    adam_eps: float = option(1e-8, "Adam's epsilon (torch's default; the authors' script: 1e-9)")
    adam_beta1: float = option(
        0.9,
        "Adam's first-moment decay (torch's default, and the authors' logic script's: its betas=(0, 0.999) line is commented out)",
    )
    clip: float = option(1.0, "gradient norm clipping; 0 = none", bounds=(0, None))
    patience: int = option(8, "stop after this many validation checks in a row without improvement", bounds=(1, None))
    valid_every: int = option(0, "steps between validation checks; 0 = once per epoch", bounds=(0, None))
    eval_batch_size: int = runtime_option(512, "pairs per evaluation batch", bounds=(1, None))

    def validate(self) -> None:
        if not 0.0 < self.valid_fraction < 1.0:
            raise ConfigError(f"valid_fraction must be in (0, 1), got {self.valid_fraction}")
        if self.curriculum_start is not None and not 0 <= self.curriculum_start <= self.max_train_ops:
            raise ConfigError(
                f"curriculum_start must be in [0, max_train_ops={self.max_train_ops}] or None (no curriculum), "
                f"got {self.curriculum_start}"
            )
        if self.lr <= 0 or not 0.0 < self.lr_decay <= 1.0:
            raise ConfigError(f"lr must be > 0 and lr_decay in (0, 1], got {self.lr}, {self.lr_decay}")
        if not 0.0 <= self.min_lr <= self.lr:
            raise ConfigError(f"min_lr must be in [0, lr={self.lr}], got {self.min_lr}")
        if self.adam_eps <= 0:
            raise ConfigError(f"adam_eps must be > 0, got {self.adam_eps}")
        check_probabilities(self, ["adam_beta1"])


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
        bounds=(1, None),
    )

    def validate(self) -> None:
        if bad := [c for c in self.cells if c not in encoders.names()]:
            raise ConfigError(f"unknown cells {bad}; choose from {encoders.names()}")
        if not self.cells or not self.seeds:
            raise ConfigError("compare.cells and compare.seeds must not be empty")


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
    batch_size: int = option(512, "pairs per batch (`logic trees`: formulas per batch)")


def load_config(
    path: str | Path | None = None, overrides: dict[str, dict[str, Any]] | None = None
) -> tuple[LogicModelConfig, LogicTrainConfig]:
    """The model and training configs ``onlstm logic train --config PATH`` would use: defaults < the YAML file or
    preset ``path`` (``"smoke"``, ``"original"``, ...) < ``overrides`` (``{"model": {...}, "train": {...}}``), for
    :func:`onlstm.logic.train_classifier`."""
    sections = {"model": LogicModelConfig, "train": LogicTrainConfig, "compare": CompareSettings}
    settings = Settings.resolve(sections, path, overrides or {}, experiment="logic", keys=("data", "out"))
    return settings.build("model"), settings.build("train")


#: Training settings that do not change what is learned (declared ``runtime``: display, evaluation batching,
#: threads, device, the budgets); a resumed run may change them.
RUNTIME_FIELDS = runtime_fields(LogicTrainConfig)


def read_sections(header: Mapping) -> dict[str, dict]:
    """A run's (or the given) settings read through the dataclasses, so that a field added later has its default."""
    model = asdict(LogicModelConfig.from_dict(header.get("model") or {}))
    return {"model": model, "train": asdict(LogicTrainConfig.from_dict(header.get("train") or {}))}
