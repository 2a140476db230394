"""Opening a saved run: config, vocabulary and weights, for any kind of model (the experiment builds it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoint import CheckpointError, load_weights
from .dirs import RunDir


@dataclass
class LoadedRun:
    model: nn.Module  # on the asked device, in eval mode
    config: dict  # the header (RunDir.read_config)
    vocab: Any  # what the ``vocab`` reader returned (None without one)
    run_dir: Path
    weights: Path


def load_run(
    path: str | Path,
    kind: str,
    build: Callable[[dict], nn.Module],
    *,
    tag: str = "best",
    device: str | torch.device = "cpu",
    vocab: Callable[[Path], Any] | None = None,
    check: Callable[[LoadedRun], None] | None = None,
    what: str | None = None,
    hint: str = "",
) -> LoadedRun:
    """Open the run directory ``path`` (or a ``.safetensors`` file in one: :meth:`RunDir.find`) holding a model of
    ``kind``.

    ``build(config["model"])`` makes the (untrained) model; a ``TypeError``/``ValueError``/``KeyError`` it
    raises is reported as a bad model config. ``vocab(run.vocab_path)`` reads the vocabulary;
    ``check(run)`` can refuse a run that does not fit (say, a vocabulary of the wrong size) before the
    weights are read. ``what`` names the kind for people and ``hint`` says what to do instead. Every
    failure is a :class:`~onlstm.checkpoint.CheckpointError` naming the file and the problem.
    """
    saved, weights = RunDir.find(path, tag)
    config = saved.read_config(kind, what, hint)
    try:
        model = build(config["model"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{saved.config_path}: bad model config ({exc})") from None
    run = LoadedRun(model, config, vocab(saved.vocab_path) if vocab else None, saved.path, weights)
    if check is not None:
        check(run)
    load_weights(weights, model)
    run.model = model.to(device).eval()
    return run
