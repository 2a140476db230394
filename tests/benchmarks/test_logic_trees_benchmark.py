"""benchmarks/logic_trees.py: F1 by operator count from injected trees, and the control network is the one a
run's training started from (its seed, its settings)."""

from __future__ import annotations

import torch

import logic_trees
from onlstm.logic.config import LogicModelConfig, LogicTrainConfig
from onlstm.logic.train import LogicTask
from onlstm.logic.trees import FormulaTrees


def test_f1_by_operators_from_injected_trees():
    gold = [("a", ("and", "b")), (("not", "a"), ("or", "b")), (("not", "a"), ("or", "b"))]
    induced = [("a", ("and", "b")), (("not", "a"), ("or", "b")), ("not", ("a", ("or", "b")))]
    found = FormulaTrees(["x", "y", "z"], [1, 2, 2], gold, induced)
    # 2 operators: one formula right (F1 1); one whose spans (0,2) (2,4) meet the predicted (1,4) (2,4) once (F1 0.5)
    assert logic_trees.by_operators(found) == {1: 100.0, 2: 75.0}


def test_the_control_is_the_network_before_the_first_update(tmp_path):
    model_cfg, cfg = LogicModelConfig(emb_size=8, hidden_size=16, chunk_size=4, mlp_hidden=16), LogicTrainConfig(seed=7)
    start = LogicTask(model_cfg, cfg, tmp_path, [], [], log=print).model
    control = logic_trees.untrained({"model": model_cfg.to_dict(), "train": cfg.to_dict()})
    for (name, a), b in zip(start.state_dict().items(), control.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
