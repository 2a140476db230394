"""``logic compare --jobs N``'s part of :mod:`onlstm.studies.parallel`: a logic run as a job, and what its process runs."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_INTERRUPTED
from ..studies.parallel import Job
from .config import LogicTrainConfig
from .model import LogicModelConfig


def logic_job(
    run_dir: Path,
    model: LogicModelConfig,
    cfg: LogicTrainConfig,
    data: str | Path,
    resume: bool,
    go_on: str | None = None,
) -> Job:
    """The job that trains (or resumes) one logic run in a process of its own (``go_on``: the command its log gives
    to go on after an interruption, the comparison's)."""
    payload = {"run_dir": str(run_dir), "data": str(data), "resume": resume, "go_on": go_on}
    payload.update(model=model.to_dict(), train=cfg.to_dict())
    entry, name = "onlstm.logic.parallel:train_job", f"{model.cell}, seed {cfg.seed}"
    return Job(name, run_dir, resume, entry, payload, "onlstm logic train")


def train_job(spec: dict) -> int:
    """A logic run's process: train it; 0 when its budget ended it, 130 when interrupted (resume file saved)."""
    from .train import train

    model, cfg = LogicModelConfig.from_dict(spec["model"]), LogicTrainConfig.from_dict(spec["train"])
    go_on, resume = spec.get("go_on"), spec["resume"]
    result = train(model, cfg, spec["data"], spec["run_dir"], resume=resume, replace=not resume, resume_command=go_on)
    return EXIT_INTERRUPTED if result.interrupted else 0
