"""Models shared by several experiments (an experiment package never imports another; see docs/design.md)."""

from .language_model import LanguageModel, LMConfig, ParsedSentence

__all__ = ["LMConfig", "LanguageModel", "ParsedSentence"]
