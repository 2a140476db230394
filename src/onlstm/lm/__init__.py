"""Word-level language modelling (AWD-LSTM style) with ON-LSTM or baseline layers."""

from ..models.language_model import LanguageModel, LMConfig

__all__ = ["LMConfig", "LanguageModel"]
