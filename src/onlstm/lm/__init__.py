"""Word-level language modelling (AWD-LSTM style) with ON-LSTM or baseline layers."""

from ..models.language_model import KIND, LanguageModel, LMConfig
from ..runs import RunKind, register_kind
from .config import train_command

# the demo's runs are of this kind too (an `lm train` run with the demo's settings added)
register_kind(RunKind(KIND, "language-model", LanguageModel, train_command))

__all__ = ["LMConfig", "LanguageModel"]
