"""Word-level language modelling (AWD-LSTM style) with ON-LSTM or baseline layers."""

from .model import LanguageModel, LMConfig

__all__ = ["LMConfig", "LanguageModel"]
