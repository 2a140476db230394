"""NT-ASGD, the language model's optimizer as the paper and the authors run it (docs/lm.md, "NT-ASGD"): SGD until
validation stops improving (:func:`nonmono_switch`), then torch's ASGD, whose running average of the iterates is
the model evaluated (:func:`averaged_weights`, put in place by :func:`weights_in_place`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .config import TrainConfig


def nonmono_switch(history: list[float], loss: float, nonmono: int) -> bool:
    """NT-ASGD's trigger (the reference's condition): this epoch's validation ``loss`` is worse than the best of the
    SGD epochs before the last ``nonmono`` ones (``history``: earlier SGD epochs' validation losses, oldest first)."""
    return len(history) > nonmono and loss > min(history[:-nonmono])


def make_optimizer(params, cfg: TrainConfig, averaging: bool = False) -> torch.optim.Optimizer:
    """The run's optimizer; with ``averaging`` NT-ASGD's averaging phase as the authors run it: torch's own ASGD
    with t0=0, lambd=0 (plain SGD steps plus the running average ``ax`` of the iterates). Its step size is fixed at
    the end of the previous step and its average starts from the second iterate (docs/lm.md, "NT-ASGD")."""
    if averaging:
        return torch.optim.ASGD(params, lr=cfg.lr, t0=0, lambd=0.0, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def averaged_weights(params: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """ASGD's running average (``ax``) of ``params``; a parameter ASGD has not stepped yet (just after the switch)
    counts with its current value, as ``ax`` would equal it after one step."""
    return [optimizer.state.get(p, {}).get("ax", p) for p in params]


@contextmanager
def weights_in_place(params: list[torch.Tensor], values: list[torch.Tensor] | None) -> Iterator[None]:
    """``params`` hold ``values`` inside the block (None: they keep their own), their own again after it."""
    if values is None:
        yield
        return
    saved = [p.detach().clone() for p in params]
    _assign(params, values)
    try:
        yield
    finally:
        _assign(params, saved)


@torch.no_grad()
def _assign(params: list[torch.Tensor], values: list[torch.Tensor]) -> None:
    for p, v in zip(params, values):
        p.copy_(v)
