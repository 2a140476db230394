"""Resume state: one safetensors file per run (tensors) with JSON metadata, one format for every trainer
(:data:`RESUME_FORMAT`: :func:`save_training` writes it, :func:`read_training` reads it)."""

from __future__ import annotations

import json
import re
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
from ..errors import first_line, quote
from ..files import atomic_write
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
    state, scalars, sd = dict(tensors or {}), {}, opt.state_dict()
    state.update({f"model.{k}": v for k, v in state_dict_for_saving(model).items()})
    for idx, values in sd["state"].items():
        for k, v in values.items():
            if torch.is_tensor(v):
                state[f"optim.{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[k] = v
    state["rng.torch"] = torch.get_rng_state()
    if device.type == "cuda":
        state["rng.cuda"] = torch.cuda.get_rng_state(device)
    # stateful: the parameters the optimizer keeps state for (one without a gradient yet has none), so that a
    # parameter's state removed from the file whole is noticed when it is read back (restore_training)
    optimizer = {"param_groups": sd["param_groups"], "scalars": scalars, "stateful": sorted(sd["state"])}
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
    (the optimizer's tensors: :func:`_optimizer_state_problem`) is a :class:`CheckpointError`, nothing loaded."""
    if "rng.torch" not in tensors:
        raise CheckpointError(f"{path}: the random state (rng.torch) is missing; the file is incomplete")
    why = _optimizer_problem(opt_meta, opt) or _optimizer_state_problem(tensors, opt_meta, opt)
    if why := why or _rng_problem(tensors["rng.torch"]):
        raise CheckpointError(f"{path} is damaged or was edited: {why}; {RESUME_FIX}")
    assign_weights(model, {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, f"{path} (model)")
    state: dict = {}
    for idx, name, t in _optimizer_tensors(tensors):
        state.setdefault(idx, {})[name] = t
    for idx, values in opt_meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(values)
    opt.load_state_dict({"state": state, "param_groups": opt_meta["param_groups"]})
    try:
        torch.set_rng_state(tensors["rng.torch"])
    except RuntimeError as exc:  # of the right size but not a generator's state
        raise CheckpointError(f"{path} is damaged or was edited: rng.torch ({first_line(exc)}); {RESUME_FIX}") from None
    if device.type == "cuda" and "rng.cuda" in tensors:
        torch.cuda.set_rng_state(tensors["rng.cuda"], device)


def _kind(value: Any) -> str:
    # JSON gives a tuple back as a list, an integer-valued float maybe as an int: compared by kind, not type
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return {int: "number", float: "number", tuple: "list"}.get(type(value), type(value).__name__)


def _optimizer_problem(opt_meta: Any, opt: torch.optim.Optimizer) -> str:
    """Why the file's ``optimizer`` value cannot be loaded into ``opt`` ("" when it can): as many groups of as many
    parameters, each setting both have of the same kind (another torch may add or drop settings, or leave one None,
    which the optimizer fills in); ``scalars`` an object of objects by parameter."""
    groups = opt_meta.get("param_groups") if isinstance(opt_meta, dict) else None
    if not isinstance(groups, list) or len(groups) != len(opt.param_groups):
        return "the optimizer state has no param_groups of this optimizer's"
    for saved, own in zip(groups, opt.param_groups):
        if not isinstance(saved, dict) or not isinstance(saved.get("params"), list):
            return "an optimizer parameter group is not an object with its params"
        if len(saved["params"]) != len(own["params"]):
            return "the optimizer state does not fit this model"
        shared = [k for k in own if k in saved and None not in (saved[k], own[k])]
        if wrong := [k for k in shared if _kind(saved[k]) != _kind(own[k])]:
            return f"the optimizer setting {wrong[0]} is {quote(saved[wrong[0]], 60)}, not of the kind of {own[wrong[0]]!r}"
    order = [i for group in groups for i in group["params"]]
    if any(type(i) is not int for i in order) or sorted(order) != list(range(len(order))):
        return "the optimizer's parameter groups do not number the parameters 0, 1, 2, ... once each"
    scalars = opt_meta.get("scalars", {})
    by_parameter = isinstance(scalars, dict) and all(_index(k) is not None for k in scalars)
    if not by_parameter or not all(isinstance(v, dict) for v in scalars.values()):
        return "the optimizer's scalars are not an object of objects by parameter"
    stateful = opt_meta.get("stateful", [])
    if not isinstance(stateful, list) or any(type(i) is not int or not 0 <= i < len(order) for i in stateful):
        return f"the optimizer's parameters with state (stateful) are {quote(stateful, 60)}, not parameter numbers"
    return ""


def _index(text: str) -> int | None:
    """The parameter number ``text`` writes (as ``state_dict`` numbers them: 0, 1, ..., no sign, no leading zero)."""
    return int(text) if re.fullmatch(r"0|[1-9][0-9]{0,8}", text) else None


def _optimizer_tensors(tensors: Mapping[str, torch.Tensor]) -> list[tuple[int, str, torch.Tensor]]:
    """The optimizer's tensors of a resume file (``optim.<parameter>.<name>``) as ``(parameter, name, tensor)``;
    a name that does not read so gets the parameter -1."""
    found = []
    for key, t in tensors.items():
        if key.startswith("optim."):
            idx, _, name = key[6:].partition(".")
            number = _index(idx)
            found.append((-1, key, t) if number is None or not name else (number, name, t))
    return found


def _optimizer_state_problem(tensors: Mapping[str, torch.Tensor], opt_meta: dict, opt: torch.optim.Optimizer) -> str:
    """Why the optimizer state of a resume file (its ``optim.*`` tensors, ``opt_meta``'s scalars) is not what
    ``opt`` needs ("" when it is), checked before anything is loaded: each parameter with state has the values a
    step of this optimizer creates (:func:`_fresh_state`), no more, no fewer, each tensor of the shape (and kind:
    floating point or not) the step gives it, and the parameters with state are those ``save_training`` recorded
    (``stateful``; a file written before it recorded them: all or none, as every parameter of the trainers gets a
    gradient at every step). A file saved before the first step, without state, passes."""
    groups, n = opt_meta["param_groups"], sum(len(group["params"]) for group in opt_meta["param_groups"])
    held: dict[int, dict[str, Any]] = {}
    for idx, name, t in _optimizer_tensors(tensors):
        if not 0 <= idx < n:
            return f"the optimizer tensor {quote(name if idx < 0 else f'optim.{idx}.{name}', 80)} names no parameter"
        held.setdefault(idx, {})[name] = t
    for key, values in opt_meta.get("scalars", {}).items():
        idx = _index(key)
        if idx is None or idx >= n:
            return f"the optimizer's scalars name a parameter {quote(key, 20)} it does not have"
        if both := [name for name in values if name in held.get(idx, {})]:
            return f"the optimizer value {quote(both[0], 40)} of parameter {idx} is both a tensor and a scalar"
        held.setdefault(idx, {}).update(values)
    if "stateful" in opt_meta:
        stateful = set(opt_meta["stateful"])
    else:  # written before the record: every parameter has state, or none has
        stateful = set(range(n)) if held else set()
    if extra := sorted(idx for idx in set(held) - stateful if held[idx]):
        name = next(iter(held[extra[0]]))
        return f"it holds optimizer state (optim.{extra[0]}.{name}) for a parameter that had none when it was saved"
    fresh = _fresh_state(opt, groups, stateful)
    if isinstance(fresh, str):
        return fresh
    kind = type(opt).__name__
    for idx in sorted(stateful):
        have, want = held.get(idx, {}), fresh[idx]
        keeps = f"{kind} keeps {', '.join(want) or 'nothing'} for each parameter"
        if missing := [name for name in want if name not in have]:
            what = "tensor" if torch.is_tensor(want[missing[0]]) else "value (scalars)"
            return f"the optimizer {what} optim.{idx}.{missing[0]} is missing ({keeps})"
        if extra_names := [name for name in have if name not in want]:
            return f"the optimizer value {quote(f'optim.{idx}.{extra_names[0]}', 80)} is not {kind}'s state ({keeps})"
        for name, expected in want.items():
            got = have[name]
            if torch.is_tensor(expected) != torch.is_tensor(got):
                return f"the optimizer value optim.{idx}.{name} is {'not ' * torch.is_tensor(expected)}a tensor"
            if not torch.is_tensor(expected):
                continue
            if (shape := tuple(got.shape)) != tuple(expected.shape):
                return f"the optimizer tensor optim.{idx}.{name} has shape {shape}, not {tuple(expected.shape)}"
            if got.dtype.is_floating_point != expected.dtype.is_floating_point or got.dtype == torch.bool:
                return f"the optimizer tensor optim.{idx}.{name} is {got.dtype}, not {expected.dtype}"
    return ""


def _fresh_state(opt: torch.optim.Optimizer, groups: list[dict], wanted: set[int]) -> dict[int, dict] | str:
    """The state a step of ``opt``'s optimizer gives each parameter of ``wanted`` (the file's numbers) with the
    file's settings (``groups``, as ``load_state_dict`` will take them over): the state of a throwaway optimizer of
    the same class after one step on zero tensors of the parameter's shape, dtype and device with zero gradients.
    Asked of the optimizer, not listed here: which values it keeps and their shapes depend on its class (Adam:
    moments and a step; SGD: a momentum buffer, or nothing without momentum; ASGD: average, eta, mu, step), its
    settings (Adam's amsgrad adds one) and the torch version, and a step creates all of a parameter's state at
    once. Comparing a parameter with the others would miss a damage done to all of them alike. The live optimizer
    and the model are left alone; the step runs on one tensor per distinct shape, dtype and device of a group
    (the state of these optimizers depends on nothing else), not on a copy of the whole model. A message when the
    file's settings make the step fail (it would fail in training too)."""
    fresh: dict[int, dict] = {}
    for saved, own in zip(groups, opt.param_groups):
        settings = {k: v for k, v in {**own, **saved}.items() if k not in ("params", "param_names")}
        like: dict[tuple, list[int]] = {}
        for idx, param in zip(saved["params"], own["params"]):
            if idx in wanted:
                like.setdefault((tuple(param.shape), param.dtype, param.device), []).append(idx)
        if not like:
            continue
        stand_ins = [torch.zeros(shape, dtype=dtype, device=device) for shape, dtype, device in like]
        for t in stand_ins:
            t.grad = torch.zeros_like(t)
        try:
            throwaway = type(opt)([{**settings, "params": stand_ins}])
            throwaway.step()
        except (RuntimeError, ValueError, TypeError, KeyError, AssertionError) as exc:
            return f"the optimizer settings of the file do not work with {type(opt).__name__} ({first_line(exc)})"
        for t, numbers in zip(stand_ins, like.values()):
            fresh.update({idx: dict(throwaway.state.get(t, {})) for idx in numbers})
    return fresh


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
