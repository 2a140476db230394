"""Run directories written by an earlier version (tests/fixtures/old-runs, made by make_old_runs.py with the
code before the shared training engine) still resume and load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence

from onlstm.checkpoint import read_json, read_safetensors
from onlstm.lm import train as LM
from onlstm.logic import train as T
from onlstm.logic.config import LogicModelConfig, LogicTrainConfig
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.logic.model import LogicClassifier, _last_hidden, load_classifier
from onlstm.models.language_model import load_language_model_run
from support import quiet, write_corpus

OLD = Path(__file__).parent / "fixtures" / "old-runs"


@pytest.fixture
def old_logic(tmp_path) -> tuple[Path, Path]:
    made = json.loads((OLD / "made_with.json").read_text())
    data = tmp_path / "data"
    generate_dataset(data, GenerateConfig(**made["generate"]), log=None)
    run = tmp_path / "run"
    shutil.copytree(OLD / "logic-v1", run)
    return run, data


def test_an_old_logic_resume_file_is_read_as_the_same_progress(old_logic):
    run, _ = old_logic
    _, raw = read_safetensors(run / T.RESUME_FILE)
    assert raw["format"] == T.RESUME_FORMAT_1
    old = json.loads(raw["progress"])
    prog = T.progress_from_saved(old)
    assert (prog.step, prog.epoch, prog.pos, prog.best, prog.best_step) == (
        old["step"],
        old["epoch"],
        old["pos"],
        old["best_acc"],
        old["best_step"],
    )
    assert prog.task["epoch_rng"] == old["epoch_rng"] and prog.task["schedule_bad"] == old["schedule_bad"]
    fresh = T.progress_from_saved({**old, "best_acc": -1.0})
    assert fresh.best is None  # format 1 wrote -1 before the first check


def _encode_as_the_fixture_did(self, tokens, lengths):
    """LogicClassifier.encode of the version that wrote the fixture: embedding dropout over the padded batch.
    Today's draws its mask over the real tokens only, so the fixture's first updates used other masks."""
    x = F.dropout(self.embedding(tokens), self.config.dropout, self.training)
    _, state, _ = self.encoder(pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False))
    return _last_hidden(state)


def test_an_old_logic_run_resumes_to_the_end_like_an_uninterrupted_one(old_logic, tmp_path, monkeypatch):
    run, data = old_logic
    # Both runs compute as the fixture's version did, so that the comparison checks the resume state it left
    # (step, batch order, optimizer and random state), not a later change of the dropout mask's layout.
    monkeypatch.setattr(LogicClassifier, "encode", _encode_as_the_fixture_did)
    header = read_json(run / "config.json")
    model_cfg, cfg = LogicModelConfig.from_dict(header["model"]), LogicTrainConfig.from_dict(header["train"])
    torch.set_num_threads(1)
    old_history = read_json(run / "history.json")
    resumed = T.train(model_cfg, cfg, data, run, log=None, resume=True)
    whole = T.train(model_cfg, cfg, data, tmp_path / "whole", log=None)
    assert resumed.stopped_by == whole.stopped_by == "epochs" and resumed.steps == whole.steps
    assert resumed.history[: len(old_history)] == old_history  # the old checks are kept as they were
    assert [h["step"] for h in resumed.history] == [h["step"] for h in whole.history]
    # On the machine that wrote the fixture the weights are equal bit for bit; elsewhere its first 10 updates
    # were computed by another CPU's kernels, so allow float noise (a wrong batch order is off by ~1e-1).
    a, _ = read_safetensors(run / "model.last.safetensors")
    b, _ = read_safetensors(tmp_path / "whole" / "model.last.safetensors")
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-3, rtol=0, msg=k)
    model, _ = load_classifier(run)  # and the finished old run loads for evaluation
    assert model.config == model_cfg


# --------------------------------------------------------------------------- language model


@pytest.fixture
def old_lm(tmp_path) -> tuple[Path, Path, dict]:
    made = json.loads((OLD / "made_with.json").read_text())["lm"]
    corpus = write_corpus(tmp_path / "corpus", **made["corpus"])
    run = tmp_path / "run"
    shutil.copytree(OLD / "lm-v1", run)
    return run, corpus, made


LM_TIMINGS = ("epoch_seconds", "tokens_per_s", "elapsed_s")


def lm_rows(history: list[dict]) -> list[dict]:
    """log.csv's rows without the timings; losses to 3 decimals (the fixture's were computed on another CPU)."""
    return [
        {k: round(float(v), 3) for k, v in row.items() if k in LM.LOG_COLUMNS and k not in LM_TIMINGS}
        for row in history
    ]


def test_an_old_lm_resume_file_is_read_as_the_same_progress(old_lm):
    run, corpus, made = old_lm
    _, raw = read_safetensors(run / LM.RESUME_FILE)
    assert raw["format"] == "onlstm-lm-resume/1"
    old = json.loads(raw["progress"])
    assert (old["epoch"], old["batch"], old["step"], old["averaging"]) == (2, 3, made["max_steps"], True)
    trainer = LM.Trainer(run, corpus, {}, resume=True, log=quiet)
    now = vars(trainer.progress)
    for key in ("epoch", "batch", "step", "averaging", "avg_count", "best_valid", "sgd_valid_history", "history"):
        assert now[key] == old[key], key
    assert now["epoch_loss_sum"] == old["epoch_loss_sum"] and now["epoch_tokens"] == old["epoch_tokens"]
    assert isinstance(trainer.optimizer, torch.optim.ASGD) and trainer.hidden is not None


def test_an_old_lm_run_resumes_to_the_end_like_an_uninterrupted_one(old_lm, tmp_path):
    run, corpus, _ = old_lm
    header = read_json(run / "config.json")
    explicit = {"model": {k: v for k, v in header["model"].items() if k != "vocab_size"}, "train": header["train"]}
    torch.set_num_threads(1)
    resumed = LM.train(run, corpus, {}, resume=True, log=quiet)
    whole = LM.train(tmp_path / "whole", corpus, explicit, log=quiet)
    assert resumed["status"] == whole["status"] == "finished"
    assert resumed["progress"]["step"] == whole["progress"]["step"]
    assert lm_rows(resumed["progress"]["history"]) == lm_rows(whole["progress"]["history"])
    # On the machine that wrote the fixture the weights are equal bit for bit; elsewhere its first updates were
    # computed by another CPU's kernels, so allow float noise (a wrong segment or a lost state is off by ~1e-1).
    for name in ("model.last", "model.best"):
        a, _ = read_safetensors(run / f"{name}.safetensors")
        b, _ = read_safetensors(tmp_path / "whole" / f"{name}.safetensors")
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=1e-3, rtol=0, msg=k)
    assert read_json(run / "results.json")["steps"] == whole["progress"]["step"]
    loaded = load_language_model_run(run)  # and the finished old run loads for evaluation
    assert loaded.model.config.hidden_sizes == header["model"]["hidden_sizes"]
