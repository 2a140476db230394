"""Word-level language modelling (AWD-LSTM style) with ON-LSTM or baseline layers."""

from ..models.language_model import KIND
from ..runs import RunKind, register_kind
from .config import train_command
from .model import LanguageModel, LMConfig

# the demo's runs are of this kind too (an `lm train` run with the demo's settings added)
register_kind(RunKind(KIND, "language-model", LanguageModel, train_command))

__all__ = ["LMConfig", "LanguageModel"]
