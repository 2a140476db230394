"""Unsupervised constituency parsing, the model-independent part: distances -> trees, bracket strings,
spans, metrics and baselines.  Gold treebank reading lives in :mod:`onlstm.data.treebank`."""

# The submodule `evaluate` (scoring a model on a treebank) is loaded first, so that the package attribute
# `evaluate` ends up as the metrics function below (the public name since the start) and a later
# `from onlstm.parsing.evaluate import ...` finds the module in sys.modules without rebinding it.
from . import evaluate as _evaluate_module  # noqa: F401
from .baselines import (  # noqa: F401  (the package's public names)
    BASELINES,
    balanced,
    baseline_trees,
    left_branching,
    random_baseline_scores,
    random_tree,
    right_branching,
    score_baselines,
)
from .metrics import (  # noqa: F401
    F1Score,
    LabelRecall,
    ParseEvaluation,
    average_depth,
    corpus_f1,
    evalb_f1,
    evaluate,
    f1_scores,
    label_recall,
    prf_from_counts,
    register_metric,
    sentence_f1,
    sentence_prf,
)
from .trees import (  # noqa: F401
    Tree,
    TreeFormatError,
    build_tree,
    detect_format,
    labelled_spans,
    lazy_labelled_tree,
    leaves,
    parse_brackets,
    parse_tree_lines,
    span_info,
    spans,
    strip_function_tags,
    to_brackets,
    unlabel,
    word_depths,
)

__getattr__ = lazy_labelled_tree(__name__)  # LabelledTree: nltk is slow to import, so not with the package
