"""Unsupervised constituency parsing, the model-independent part: distances -> trees, bracket strings,
spans, metrics and baselines.  Gold treebank reading lives in :mod:`onlstm.data.treebank`."""

# The submodule `evaluate` (scoring a model on a treebank) is loaded first, so that the package attribute
# `evaluate` ends up as the metrics function (the public name since the start) and a later
# `from onlstm.parsing.evaluate import ...` finds the module in sys.modules without rebinding it.
from . import evaluate as _evaluate_module  # noqa: F401
from .baselines import *  # noqa: F403  (the package's public names: baselines, metrics, trees)
from .metrics import *  # noqa: F403
from .trees import *  # noqa: F403
