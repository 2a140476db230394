"""Logical inference (Bowman et al. 2015): formulas, relations, data files, the relation classifier,
training, evaluation by length and comparison of encoders; ``onlstm logic …`` (docs/logic.md).
"""

# ruff: noqa: F401  (the names imported below are the package's public API)

from ..saved import RunKind, register_kind
from .cli import train_command
from .compare import CompareResult
from .compare import compare as compare_encoders  # not `compare`: that name is the submodule
from .config import load_config
from .data import (
    Example,
    LogicDataError,
    bucket_of,
    check_file_numbers,
    format_line,
    parse_line,
    read_examples,
    read_file,
    relabel_mismatches,
    select,
    write_file,
)
from .evaluate import LengthAccuracy, count_by_length, evaluate_examples, format_table, predict
from .formulas import (
    FULL_SET,
    VARIABLES,
    Binary,
    Formula,
    FormulaSyntaxError,
    Not,
    Var,
    count_operators,
    parse,
    to_text,
    truth_set,
)
from .generate import GenerateConfig, generate_dataset, random_formula
from .model import KIND, LogicClassifier, LogicModelConfig, load_classifier, pad_batch, pair_features, token_ids
from .relations import RELATION_NAMES, RELATIONS, relation, relation_of_sets
from .train import LogicTrainConfig, TrainResult
from .train import train as train_classifier  # not `train`: that name is the submodule

register_kind(RunKind(KIND, "logic", LogicClassifier, train_command))
