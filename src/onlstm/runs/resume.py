"""Resume state: one safetensors file per run (tensors) with JSON metadata, one format for every trainer
(:data:`RESUME_FORMAT`: :func:`save_training` writes it, :func:`read_training` reads it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoint import (
    CheckpointError,
    assign_weights,
    read_json,
    read_safetensors,
    save_safetensors,
    state_dict_for_saving,
)
from ..config import ConfigError, checked_fields, count_option, option, read_record
from ..errors import first_line
from ..files import atomic_write
from ..optim_state import load_optimizer, optimizer_problem, optimizer_record
from .dirs import RunDir


@dataclass
class Progress:
    """Where a run stands; everything here is saved in the resume file (JSON) and checked when read back."""

    step: int = count_option(0, "updates done")
    epoch: int = count_option(0, "whole passes over the training data done")
    pos: int = count_option(0, "batches done in the pass in progress")
    best: float | None = None  # best validation score so far (higher is better)
    best_step: int = count_option()
    bad_checks: int = count_option(0, "validation checks in a row without a new best")
    seconds: float = 0.0  # training time of the sessions before this one
    n_checks: int = count_option(0, "validation checks recorded in the history")
    check_due: bool = False  # a validation was interrupted: it is done first on resume
    pass_len: int = count_option(0, "batches of the pass in progress (0: not known yet)")
    sums: dict[str, float] = option({}, "the running training figures since the last check (sums: loss, n, ...)")
    task: Any = field(default_factory=dict)  # the experiment's state: its dataclass (Task.state), JSON in the file


#: The one resume format (its version after the slash): the weights ``model.*``, the optimizer ``optim.*``, the
#: random state ``rng.*`` and the task's own tensors; as JSON metadata the run's ``kind``, the engine's
#: :class:`Progress`, the optimizer's hyperparameters (and which parameters it keeps state for) and the task's own
#: values.
RESUME_FORMAT = "onlstm-resume/1"
#: What to do when a resume file cannot be used.
RESUME_FIX = "train again without --resume (into a new --out, or after removing this one)"


def save_training(
    path: Path,
    kind: str,
    prog: Progress,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    device: torch.device,
    tensors: dict[str, torch.Tensor] | None = None,
    **meta: Any,
) -> None:
    """Write the resume file of a ``kind`` run at ``prog`` atomically: the weights, the optimizer's tensors, the
    random state (of ``device`` too on a GPU) and the task's ``tensors``; the task's ``meta`` values as JSON."""
    optim, optimizer = optimizer_record(opt)
    state = {**(tensors or {}), **{f"model.{k}": v for k, v in state_dict_for_saving(model).items()}, **optim}
    state["rng.torch"] = torch.get_rng_state()
    if device.type == "cuda":
        state["rng.cuda"] = torch.cuda.get_rng_state(device)
    values = {"kind": kind, "progress": asdict(prog), "optimizer": optimizer, **meta}
    header = {"format": RESUME_FORMAT, **{k: json.dumps(v) for k, v in values.items()}}
    atomic_write(Path(path), lambda tmp: save_safetensors(state, tmp, header))


def read_training(
    path: Path,
    kind: str,
    fix: str = RESUME_FIX,
    tensors: bool = True,
    task: type | None = None,
) -> tuple[Progress, dict[str, torch.Tensor], dict[str, Any]]:
    """``(progress, tensors, metadata)`` of :func:`save_training`'s file for a ``kind`` run (``tensors=False``: none
    read), checked: its format, its kind, the progress record and, when ``task`` (a dataclass) is given,
    ``progress.task`` as one (:func:`checked`); ``fix`` says how to go on when it cannot be used. Give the
    tensors back with :func:`restore_training`."""
    found, raw = read_safetensors(path, tensors)
    if raw.get("format") != RESUME_FORMAT:
        raise CheckpointError(
            f"{path} is not an onlstm resume file (format {raw.get('format')!r}, expected {RESUME_FORMAT!r}); it "
            f"cannot be resumed: {fix}"
        )
    try:
        meta = {k: json.loads(v) for k, v in raw.items() if k != "format"}
        if missing := [k for k in ("kind", "progress", "optimizer") if k not in meta]:
            raise KeyError(missing[0])
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: metadata is incomplete or corrupt ({exc}); {fix}") from None
    if meta["kind"] != kind:
        raise CheckpointError(f"{path} is the resume file of a {meta['kind']!r} run, not of a {kind!r} one; {fix}")
    groups = meta["optimizer"].get("param_groups") if isinstance(meta["optimizer"], dict) else None
    if not isinstance(groups, list) or not all(isinstance(group, dict) for group in groups):
        raise CheckpointError(f"{path} is damaged or was edited: the optimizer state has no param_groups; {fix}")
    prog = checked(Progress, meta["progress"], path, "progress", fix, strict=False)
    if task is not None:
        prog.task = checked(task, prog.task, path, "progress.task", fix)
    return prog, found, meta


def checked(cls: type, data: Any, path: Path, what: str, fix: str = RESUME_FIX, strict: bool = True) -> Any:
    """``data``, read back from the run file ``path``, as the dataclass ``cls`` (:func:`~onlstm.config.read_record`,
    ``what`` names it); a bad value is a :class:`CheckpointError` naming the file and ``fix``."""
    try:
        return read_record(cls, data, what, strict)
    except ConfigError as exc:
        raise CheckpointError(f"{path} is damaged or was edited: {exc}; {fix}") from None


def check_history(rows: Any, row: type, path: Path, fix: str = RESUME_FIX, at_least: int = 0) -> list[dict]:
    """``rows``, a run's validation history read back from ``path``: a list of at least ``at_least`` records, each
    one of the dataclass ``row`` (older runs recorded fewer of its fields; those present are kept, checked)."""
    if not isinstance(rows, list):
        raise CheckpointError(f"{path} is damaged or was edited: the history is not a list; {fix}")
    if len(rows) < at_least:
        raise CheckpointError(
            f"{path} is damaged or was edited: it holds {len(rows)} validation checks, the resume file counts "
            f"{at_least}; {fix}"
        )
    try:
        return [checked_fields(row, r, f"history record {k + 1}", strict=False) for k, r in enumerate(rows)]
    except ConfigError as exc:
        raise CheckpointError(f"{path} is damaged or was edited: {exc}; {fix}") from None


def read_history(path: Path, row: type, fix: str, at_least: int = 0) -> list[dict]:
    """The history file at ``path`` (``history.json``), checked by :func:`check_history`."""
    return check_history(read_json(path), row, path, fix, at_least)


def restore_training(
    path: Path,
    tensors: dict[str, torch.Tensor],
    opt_meta: dict,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    device: torch.device,
) -> None:
    """Put the weights, the optimizer's state (``opt_meta``: the file's ``optimizer`` value) and the random state
    of :func:`save_training`'s ``tensors`` back in place, once all of them are checked: a damaged or edited file
    (the optimizer's: :func:`onlstm.optim_state.optimizer_problem`) is a :class:`CheckpointError`, nothing loaded."""
    if "rng.torch" not in tensors:
        raise CheckpointError(f"{path}: the random state (rng.torch) is missing; the file is incomplete")
    if why := optimizer_problem(tensors, opt_meta, opt) or _rng_problem(tensors["rng.torch"]):
        raise CheckpointError(f"{path} is damaged or was edited: {why}; {RESUME_FIX}")
    assign_weights(model, {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, f"{path} (model)")
    load_optimizer(opt, tensors, opt_meta)
    try:
        torch.set_rng_state(tensors["rng.torch"])
    except RuntimeError as exc:  # of the right size but not a generator's state
        raise CheckpointError(f"{path} is damaged or was edited: rng.torch ({first_line(exc)}); {RESUME_FIX}") from None
    if device.type == "cuda" and "rng.cuda" in tensors:
        torch.cuda.set_rng_state(tensors["rng.cuda"], device)


def _rng_problem(state: torch.Tensor) -> str:
    own = torch.get_rng_state()
    if state.dtype != own.dtype or state.shape != own.shape:
        return f"the random state rng.torch is {state.dtype} {tuple(state.shape)}, not {own.dtype} {tuple(own.shape)}"
    return ""


def resume_settings(
    header: Mapping, parse: Callable[[Mapping], dict[str, dict]], given: Mapping[str, Mapping], runtime, run: Path
) -> tuple[dict[str, dict], str]:
    """Every trainer's settings on resume: ``(settings, clash)``. The run's saved ones (its ``header``'s sections
    read by ``parse``, which gives a field added later its default) with the ``given`` ones (``{section: {field:
    value}}``, what the user set) over them, read by ``parse`` again; ``clash`` says why the run in ``run`` cannot be
    resumed with them, naming every changed field but the ``runtime`` ones, which say how it runs, not what is
    learned; "" when it can. A header ``parse`` cannot read is a damaged run (:class:`CheckpointError`)."""
    try:
        saved = parse(header)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{run / RunDir.CONFIG}: bad config ({exc}); the run directory is damaged") from None
    settings = parse({section: {**values, **given.get(section, {})} for section, values in saved.items()})
    changed = [
        f"{section}.{k} (run: {saved[section].get(k)!r}, given: {v!r})"
        for section, values in settings.items()
        for k, v in values.items()
        if k not in runtime and saved[section].get(k) != v
    ]
    if not changed:
        return settings, ""
    return settings, (
        f"cannot change {', '.join(changed)} when resuming the run in {run}; resume with the run's own settings "
        f"(only {', '.join(runtime)} may change) or train into a new --out"
    )


def not_a_run(run: RunDir) -> str:
    """``--resume``'s refusal of a folder that holds no run (no ``config.json``), in every trainer; "" when it
    holds one."""
    if run.config_path.exists():
        return ""
    return f"--resume: {run.path} holds no {run.CONFIG}; it is not a run directory (drop --resume to start a new run)"


def restart_refusal(run: RunDir) -> str:
    """Why ``--resume`` of ``run`` may not start it again from step 0 when it has no resume file; "" when it has
    one, or stopped (a signal, a kill, a full disk) before its first save: a restart loses nothing. One that saved
    (its history, ``log.csv`` or ``history.json``, is written after the resume file) or finished would lose what
    it holds."""
    if run.resume_path.exists():
        return ""
    record = run.results()
    done = [path.name for path in (run.log_path, run.history_path) if path.exists()]
    done += [run.results_path.name] if (record or {}).get("status") in ("finished", "stopped") else []
    if not done:
        return ""
    return (
        f"--resume: {run.path} has no {RunDir.RESUME} (it finished, or the file was deleted) but holds results "
        f"({', '.join(done)}); resuming would start again from step 0 and overwrite them: train into a new --out"
    )
