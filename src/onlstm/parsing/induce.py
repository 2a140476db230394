"""From a trained ON-LSTM language model to trees: batched per-word distances (:func:`sentence_distances`,
with :meth:`onlstm.models.LanguageModel.parse`'s code in ``models``) and the trees they induce, under the
protocol of docs/design.md §2.2 (batched by length; a test checks batched == one by one)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from ..checkpoint import CheckpointError
from ..models.language_model import check_layer as check_layer
from ..models.language_model import load_language_model_run
from ..models.language_model import sentence_distances as sentence_distances
from ..saved import LoadedRun
from .trees import Tree, build_tree


def load_language_model(checkpoint: str | Path, tag: str = "best", device: str = "cpu") -> LoadedRun:
    """A language model run directory (or its ``.safetensors`` file) -> model in eval mode + vocabulary,
    refused when the model has no master gates to induce trees from."""
    run = load_language_model_run(
        checkpoint,
        tag,
        device,
        hint="parsing needs a language model: train one with `onlstm lm train` or `onlstm demo`",
        reads_sentences=True,
    )
    if not run.model.has_distances:
        raise CheckpointError(
            f"{run.run_dir}: a {run.model.config.cell!r} model has no master gates, so it induces "
            "no trees; use an ON-LSTM model (or the baselines of eval-parse)"
        )
    return run


def trees_from_distances(
    sentences: Sequence[Sequence[str]], distances: Sequence[torch.Tensor], layer: int
) -> list[Tree]:
    """Trees from the ``layer``-th (0-based) row of each sentence's distances."""
    return [build_tree(list(s), d[layer].tolist()) for s, d in zip(sentences, distances)]
