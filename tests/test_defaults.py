"""One rule for the ON-LSTM ``chunk_size`` default (docs/design.md §4.5, "Defaults"): the paper's 10 wherever the
sizes are the paper's; a declaration that differs must be listed below with its reason, and the reason must hold.
The declarations are found, not listed: every layer class of ``onlstm.nn``, every registered encoder's options and
every config dataclass of the package that declares ``chunk_size``."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

import torch

import onlstm
from onlstm import encoders
from onlstm import nn as onlstm_nn
from onlstm.demo_config import DemoConfig

PAPER = 10  # the authors' language model and logic runs (--chunk_size 10; configs/*/paper.yaml pin it too)

#: The declarations whose default is not the paper's, and why.
EXCEPTIONS = {
    "onlstm.nn.modules.ONLSTM": (1, "a layer takes any hidden size, as nn.LSTM does: only 1 divides every size"),
    "encoder onlstm": (1, "the registry builds the layer: its defaults are the layer's"),
    "onlstm.demo_config.DemoConfig": (8, "the demo's layers (128, 128, 64 units) are not multiples of 10"),
}


def _package_classes():
    for info in pkgutil.walk_packages(onlstm.__path__, "onlstm."):
        if info.name.endswith(".__main__"):  # runs the command
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency (triton, matplotlib, ...) missing: nothing declared there here
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                yield cls


def declared_defaults() -> dict[str, int]:
    found = {}
    for cls in _package_classes():
        name = f"{cls.__module__}.{cls.__qualname__}"
        if dataclasses.is_dataclass(cls):
            for f in dataclasses.fields(cls):
                if f.name == "chunk_size" and f.default is not dataclasses.MISSING:
                    found[name] = f.default
        elif cls.__module__.startswith("onlstm.nn.") and issubclass(cls, torch.nn.Module):
            param = inspect.signature(cls.__init__).parameters.get("chunk_size")
            if param is not None and param.default is not inspect.Parameter.empty:
                found[name] = param.default
    for spec in map(encoders.get, encoders.names()):
        for option in spec.options:
            if option.name == "chunk_size":
                found[f"encoder {spec.name}"] = option.default
    return found


def test_every_chunk_size_default_is_the_papers_or_a_listed_exception():
    found = declared_defaults()
    # the search sees the declarations it must (else the test would pass on nothing)
    assert {"onlstm.models.language_model.LMConfig", "onlstm.logic.config.LogicModelConfig"} <= set(found)
    assert set(EXCEPTIONS) <= set(found), "an exception listed here is no longer declared: remove it"
    differ = {name: value for name, value in found.items() if value != PAPER}
    assert differ == {name: value for name, (value, _) in EXCEPTIONS.items()}


def test_the_listed_reasons_hold():
    assert EXCEPTIONS["onlstm.nn.modules.ONLSTM"][0] == 1  # divides every hidden size
    registry = {o.name: o.default for o in encoders.get("onlstm").options}["chunk_size"]
    assert registry == inspect.signature(onlstm_nn.ONLSTM).parameters["chunk_size"].default  # the layer's
    demo = DemoConfig()
    assert any(h % PAPER for h in demo.hidden_sizes) and not any(h % demo.chunk_size for h in demo.hidden_sizes)
