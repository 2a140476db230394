"""Typed configuration of a language-model run: the architecture (:class:`LMConfig`) and the training
recipe (:class:`TrainConfig`), read from a YAML preset and overridden by command-line flags.

A preset has two sections, both optional (missing fields keep the defaults below, which are the
paper's command)::

    model:            # LMConfig fields except vocab_size (taken from the training text)
      emb_size: 400
      hidden_sizes: [1150, 1150, 400]
    train:            # TrainConfig fields
      lr: 30
      epochs: 1000

Every field is also a flag of ``onlstm lm train`` (``hidden_sizes`` -> ``--hidden-sizes 400 400``,
booleans as ``--averaging`` / ``--no-averaging``); a flag given on the command line wins over the file.
Unknown fields and values of the wrong type are errors that name the field.
"""
from __future__ import annotations

import argparse
import math
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from .model import LMConfig

OPTIMIZERS = ("sgd", "adam")


def _f(default, help: str, **kw):
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class TrainConfig:
    """The training recipe. Defaults are the paper's PTB command (DESIGN.md section 2)."""

    seed: int = _f(141, "random seed (weights, dropout masks, BPTT lengths)")
    epochs: int = _f(1000, "number of passes over the training text")
    batch_size: int = _f(20, "columns the training stream is cut into (split among processes)")
    eval_batch_size: int = _f(10, "columns of the validation stream during training (the reference: 10)")
    test_batch_size: int = _f(1, "columns of the test stream for the final test (the paper: 1)")
    bptt: int = _f(70, "mean segment length (truncated back-propagation through time)")
    variable_bptt: bool = _f(True, "draw each segment's length: bptt (or bptt/2 with bptt_short_prob) + N(0, bptt_std)")
    bptt_short_prob: float = _f(0.05, "probability of a segment centred on bptt/2")
    bptt_std: float = _f(5.0, "standard deviation of the segment length")
    min_seq_len: int = _f(5, "shortest drawn segment")
    optimizer: str = _f("sgd", "sgd (the paper; switches to averaging, NT-ASGD) or adam", choices=OPTIMIZERS)
    lr: float = _f(30.0, "learning rate, scaled per segment by seq_len / bptt")
    momentum: float = _f(0.0, "SGD momentum (the paper: 0)")
    weight_decay: float = _f(1.2e-6, "L2 weight decay")
    clip: float = _f(0.25, "gradient-norm clipping (0: none)")
    alpha: float = _f(2.0, "AR: alpha * mean(last layer's dropped output ^ 2)")
    beta: float = _f(1.0, "TAR: beta * mean((h_t - h_{t-1}) ^ 2) of the last layer's raw output")
    averaging: bool = _f(True, "with sgd: average the weights (ASGD, t0=0, lambd=0) once validation stalls")
    nonmono: int = _f(5, "switch to averaging when validation is worse than the best of all but the last nonmono epochs")
    asgd_start_epoch: int = _f(0, "with averaging: start averaging at this epoch at the latest (0: only the nonmono rule)")
    oov: str = _f("auto", "valid/test words outside the vocabulary: auto (error if the training text has <unk>), "
                          "error, or unk (map to <unk>)", choices=("auto", "error", "unk"))
    final_test: bool = _f(True, "after the last epoch, score the best weights on the test set (test_batch_size columns)")
    # --- runtime options (may change when resuming) ---
    device: str = _f("auto", "auto (cuda if available), cpu, cuda or cuda:N")
    threads: int = _f(0, "CPU threads per process (0: PyTorch's default)")
    log_every: int = _f(100, "batches between progress/TensorBoard updates")
    checkpoint_every: int = _f(1000, "batches between resumable checkpoints (also at every epoch end and on Ctrl-C)")
    progress: bool = _f(True, "show a progress bar")
    tensorboard: bool = _f(True, "write TensorBoard logs to RUN_DIR/tensorboard when tensorboard is installed")

    def __post_init__(self):
        _coerce_all(self, "train")
        positive = ("epochs", "batch_size", "eval_batch_size", "test_batch_size", "bptt", "min_seq_len",
                    "nonmono", "log_every", "checkpoint_every")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"train.{name} must be positive, got {getattr(self, name)}")
        for name in ("lr", "bptt_std", "weight_decay", "clip", "alpha", "beta"):
            v = getattr(self, name)
            if v < 0 or not math.isfinite(v):
                raise ValueError(f"train.{name} must be a finite number >= 0, got {v}")
        if self.lr == 0:
            raise ValueError("train.lr must be positive")
        if not 0 <= self.bptt_short_prob <= 1:
            raise ValueError(f"train.bptt_short_prob must be in [0, 1], got {self.bptt_short_prob}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"train.momentum must be in [0, 1), got {self.momentum}")
        if self.asgd_start_epoch < 0 or self.threads < 0:
            raise ValueError("train.asgd_start_epoch and train.threads must be >= 0")
        for f in fields(self):
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(f"train.{f.name} must be one of {', '.join(choices)}, got {getattr(self, f.name)!r}")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ValueError(f"train.device must be auto, cpu, cuda or cuda:N, got {self.device!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        _check_known(cls, d, "train")
        return cls(**d)


# Fields that describe how to run, not what is learned: they may differ when a run is resumed.
RUNTIME_FIELDS = ("epochs", "final_test", "device", "threads", "log_every", "checkpoint_every", "progress",
                  "tensorboard")

MODEL_HELP = {
    "emb_size": "embedding width (= last layer's width when tied)",
    "hidden_sizes": "width of every recurrent layer, e.g. 1150 1150 400",
    "cell": "recurrent layer: onlstm, lstm or gru",
    "chunk_size": "ON-LSTM chunk size (units per master-gate level)",
    "master_input": "ON-LSTM master input gate: paper (default, as published; its top chunk is never written) or reverse (no dead chunk)",
    "dropout_emb": "embedding row dropout (AWD dropoute)",
    "dropout_in": "locked dropout on the embedding output (dropouti)",
    "dropout_hidden": "locked dropout between layers (dropouth)",
    "dropout_out": "locked dropout on the last layer's output (dropout)",
    "dropconnect": "DropConnect on hidden-to-hidden weights (wdrop)",
    "tie_weights": "tie the decoder to the embedding",
}


# --------------------------------------------------------------------------- typed coercion


def _type_of(cls, name):
    return typing.get_type_hints(cls)[name]


def _coerce(value, tp, where: str):
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ValueError(f"{where} must be a list, got {value!r}")
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"{where} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ValueError(f"{where} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool):
            raise ValueError(f"{where} must be a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):          # YAML 1.1 reads 1e-6 as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ValueError(f"{where} must be a number, got {value!r}")
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a string, got {value!r}")
        return value
    return value


def _coerce_all(obj, section: str) -> None:
    for f in fields(obj):
        setattr(obj, f.name, _coerce(getattr(obj, f.name), _type_of(type(obj), f.name), f"{section}.{f.name}"))


def _check_known(cls, d: dict, section: str) -> None:
    if not isinstance(d, dict):
        raise ValueError(f"section {section!r} must be a mapping of field: value, got {type(d).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {section} fields {unknown}; known: {sorted(known)}")


def model_fields() -> list:
    return [f for f in fields(LMConfig) if f.name != "vocab_size"]


def check_model_section(d: dict) -> dict:
    """Validate the ``model`` section (without vocab_size) and coerce its types."""
    if not isinstance(d, dict):
        raise ValueError(f"section 'model' must be a mapping of field: value, got {type(d).__name__}")
    if "vocab_size" in d:
        raise ValueError("model.vocab_size is taken from the training text; remove it from the config")
    names = {f.name: f for f in model_fields()}
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise ValueError(f"unknown model fields {unknown}; known: {sorted(names)}")
    return {k: _coerce(v, _type_of(LMConfig, k), f"model.{k}") for k, v in d.items()}


def check_train_section(d: dict) -> dict:
    """Check the names of a (partial) ``train`` section and coerce its values to the fields' types."""
    _check_known(TrainConfig, d, "train")
    return {k: _coerce(v, _type_of(TrainConfig, k), f"train.{k}") for k, v in d.items()}


def default_model_section() -> dict:
    out = {}
    for f in model_fields():
        out[f.name] = f.default_factory() if f.default is MISSING else f.default
    return out


@dataclass
class RunConfig:
    """What ``onlstm lm train`` runs: the model section (without vocab_size) and the recipe."""

    model: dict
    train: TrainConfig

    def model_config(self, vocab_size: int) -> LMConfig:
        return LMConfig(vocab_size=vocab_size, **self.model)


def explicit_settings(path: Path | None = None, overrides: dict | None = None) -> dict:
    """What the user set: the config file's fields, then the flags' (``{"model": {...}, "train": {...}}``)."""
    model, train = {}, {}
    if path is not None:
        model, train = read_config_file(path)
    overrides = overrides or {}
    model.update(check_model_section(overrides.get("model", {})))
    train.update(overrides.get("train", {}))
    return {"model": model, "train": check_train_section(train)}


def load_config(path: Path | None = None, overrides: dict | None = None) -> RunConfig:
    """Defaults <- YAML file ``path`` <- ``overrides`` ({"model": {...}, "train": {...}})."""
    model, train = default_model_section(), {}
    if path is not None:
        model_file, train_file = read_config_file(path)
        model.update(model_file)
        train.update(train_file)
    overrides = overrides or {}
    model.update(check_model_section(overrides.get("model", {})))
    train.update(overrides.get("train", {}))
    try:
        return RunConfig(model, TrainConfig.from_dict(train))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path or 'configuration'}: {e}") from None


def read_config_file(path: Path) -> tuple[dict, dict]:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist (presets are in configs/lm/)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a mapping with sections 'model' and 'train'")
    unknown = sorted(set(data) - {"model", "train"})
    if unknown:
        raise ValueError(f"{path}: unknown sections {unknown}; a preset has 'model' and 'train'")
    try:
        model = check_model_section(data.get("model") or {})
        train = check_train_section(data.get("train") or {})
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    return model, train


# --------------------------------------------------------------------------- command-line flags


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_field_flag(group, name: str, tp, help: str, choices=None) -> None:
    dest = f"cfg__{name}"
    if tp is bool:
        group.add_argument(_flag(name), dest=dest, action=argparse.BooleanOptionalAction, default=None, help=help)
    elif typing.get_origin(tp) is list:
        group.add_argument(_flag(name), dest=dest, nargs="+", type=typing.get_args(tp)[0], default=None,
                           metavar="N", help=help)
    else:
        group.add_argument(_flag(name), dest=dest, type=tp, default=None, choices=choices, help=help,
                           metavar=None if choices else name.upper())


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per model and training field (the value given overrides the config file)."""
    g = parser.add_argument_group("model (override the config's model section)")
    for f in model_fields():
        _add_field_flag(g, f.name, _type_of(LMConfig, f.name), MODEL_HELP.get(f.name, ""))
    g = parser.add_argument_group("training (override the config's train section)")
    for f in fields(TrainConfig):
        _add_field_flag(g, f.name, _type_of(TrainConfig, f.name), f.metadata.get("help", ""),
                        f.metadata.get("choices"))


def overrides_from_args(args: argparse.Namespace) -> dict:
    model_names = {f.name for f in model_fields()}
    out: dict = {"model": {}, "train": {}}
    for key, value in vars(args).items():
        if key.startswith("cfg__") and value is not None:
            name = key[5:]
            out["model" if name in model_names else "train"][name] = value
    return out
