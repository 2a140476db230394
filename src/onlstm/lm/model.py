"""The language model of the ``lm`` experiment: it lives in :mod:`onlstm.models.language_model` because
parsing and the demo read the same model; this module keeps the experiment template's ``model`` name."""

from __future__ import annotations

from ..models.language_model import LanguageModel, LMConfig, embedding_dropout, locked_dropout

__all__ = ["LMConfig", "LanguageModel", "embedding_dropout", "locked_dropout"]
