"""Word-level language modelling (AWD-LSTM style) with ON-LSTM or baseline layers."""

from ..models.language_model import KIND, LanguageModel, LMConfig, ParsedSentence
from ..runs.engine import TrainResult
from ..saved import RunKind, register_kind
from .config import RunConfig, TrainConfig, load_config, train_command
from .train import train_language_model

# the demo's runs are of this kind too (an `lm train` run with the demo's settings added)
register_kind(RunKind(KIND, "language-model", LanguageModel, train_command))

__all__ = [
    "LMConfig",
    "LanguageModel",
    "ParsedSentence",
    "RunConfig",
    "TrainConfig",
    "TrainResult",
    "load_config",
    "train_language_model",
]
