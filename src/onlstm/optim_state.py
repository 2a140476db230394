"""An optimizer's state as a file holds it (:func:`optimizer_record`: its tensors by name and the rest as JSON), the
checks of such a state read back before anything is loaded (:func:`optimizer_problem`: a damaged or edited resume
file is refused in one line, never half loaded), and loading it (:func:`load_optimizer`). The resume file
(:mod:`onlstm.runs.resume`) is its user."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from .errors import first_line, quote


def optimizer_record(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``opt``'s state as ``(tensors, record)``: the tensors named ``optim.<parameter>.<name>`` (on the CPU), the
    record (JSON) its parameter groups, its scalar values by parameter and which parameters have state."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict] = {}
    sd = opt.state_dict()
    for idx, values in sd["state"].items():
        for k, v in values.items():
            if torch.is_tensor(v):
                tensors[f"optim.{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[k] = v
    # stateful: the parameters the optimizer keeps state for (one without a gradient yet has none), so that a
    # parameter's state removed from the file whole is noticed when it is read back (optimizer_problem)
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars, "stateful": sorted(sd["state"])}


def optimizer_problem(tensors: Mapping[str, torch.Tensor], record: Any, opt: torch.optim.Optimizer) -> str:
    """Why the state of :func:`optimizer_record` read back (``tensors``, ``record``) cannot be loaded into ``opt``;
    "" when it can."""
    return _optimizer_problem(record, opt) or _optimizer_state_problem(tensors, record, opt)


def load_optimizer(opt: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor], record: dict) -> None:
    """Load the state of :func:`optimizer_record` (checked first by :func:`optimizer_problem`) into ``opt``."""
    state: dict = {}
    for idx, name, t in _optimizer_tensors(tensors):
        state.setdefault(idx, {})[name] = t
    for idx, values in record.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(values)
    opt.load_state_dict({"state": state, "param_groups": record["param_groups"]})


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
