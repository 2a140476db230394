"""The tree types and helpers of :mod:`onlstm.data.trees`, the greedy distance -> tree builder
:func:`build_tree` among them, re-exported for the parsing experiment (they live in ``data``: the treebank
reader and :meth:`onlstm.models.LanguageModel.parse` need them, and neither imports an experiment)."""

from __future__ import annotations

from ..data.trees import *  # noqa: F403  (the re-export)
from ..data.trees import Tree as Tree
from ..data.trees import _check_words as _check_words
from ..data.trees import build_tree as build_tree
from ..data.trees import is_labelled as is_labelled
from ..data.trees import labelled_tree_class as labelled_tree_class
from ..data.trees import lazy_labelled_tree

__getattr__ = lazy_labelled_tree(__name__)
