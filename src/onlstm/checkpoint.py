"""Checkpoints as data, never pickled code: one file of weights (safetensors) or JSON read, or written atomically
through :mod:`onlstm.files` (the one front door for writing). The files of a run directory are
named by :class:`onlstm.saved.RunFiles`."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from . import __version__
from .errors import OnlstmError, first_line
from .files import MAX_JSON_BYTES, atomic_write, read_regular


class CheckpointError(OnlstmError, ValueError):
    """A checkpoint that is missing, corrupt or does not fit the model; the message says which."""


#: How safetensors (Rust) ends the message of an I/O failure: "... File too large (os error 27)".
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def save_safetensors(
    tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None
) -> None:
    """safetensors' ``save_file``, a failed write raised as the :class:`OSError` it is (not a ``SafetensorError``,
    which :func:`atomic_write` could not tell from a bug)."""
    try:
        save_file(tensors, str(path), metadata=metadata or {})
    except SafetensorError as exc:
        found = _RUST_OS_ERROR.search(str(exc))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from exc


def read_json(path: Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path} is missing; is this a run directory written by onlstm?")
    try:  # read_regular refuses a FIFO (it would block for ever), a device and a file over the limit
        return json.loads(read_regular(path, MAX_JSON_BYTES, CheckpointError).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({first_line(e)}); the checkpoint is corrupt") from None


def state_dict_for_saving(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's tensors with tied (shared) parameters stored once, contiguous, on the CPU."""
    out, seen = {}, set()
    for name, t in module.state_dict(keep_vars=False).items():
        key = (t.data_ptr(), t.shape, t.dtype) if t.numel() else name  # empty tensors: no storage to share
        if key not in seen:
            seen.add(key)
            out[name] = t.detach().cpu().contiguous()
    return out


def save_weights(path: Path, module: torch.nn.Module, metadata: dict[str, str] | None = None) -> None:
    tensors = state_dict_for_saving(module)
    atomic_write(Path(path), lambda tmp: save_safetensors(tensors, tmp, metadata))


def load_weights(path: Path, module: torch.nn.Module) -> None:
    """Load weights saved by :func:`save_weights` into ``module``; tied parameters are restored by the tie."""
    tensors, _ = read_safetensors(path)
    assign_weights(module, tensors, str(path))


def read_safetensors(path: Path, tensors: bool = True) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """All tensors (none with ``tensors=False``: the metadata alone is read) and the metadata of a safetensors
    file; :class:`CheckpointError` when missing or corrupt."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"weights file {path} is missing")
    if not path.is_file():
        raise CheckpointError(f"weights file {path} is not a regular file")
    try:
        with safe_open(str(path), framework="pt") as f:  # tensors and metadata in one reading
            found = {k: f.get_tensor(k) for k in f.keys()} if tensors else {}
            metadata = f.metadata() or {}
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path} cannot be read as safetensors ({e}); the file is corrupt or truncated") from e
    return found, metadata


def assign_weights(module: torch.nn.Module, tensors: dict[str, torch.Tensor], source: str = "checkpoint") -> None:
    """Copy ``tensors`` (as :func:`state_dict_for_saving` names them) into ``module`` once names and shapes fit."""
    expected = module.state_dict()
    missing = sorted(set(state_dict_for_saving(module)) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{source} does not fit this model: missing {missing[:5]}, unexpected {unexpected[:5]}; "
            "was it written with another configuration?"
        )
    wrong = [
        f"{k}: saved {tuple(v.shape)}, model {tuple(expected[k].shape)}"
        for k, v in tensors.items()
        if tuple(v.shape) != tuple(expected[k].shape)
    ]
    # a float weight saved as integers (a changed file) would be copied in silently, rounded to whole numbers
    wrong += [
        f"{k}: saved as {v.dtype}, the model's is {expected[k].dtype}"
        for k, v in tensors.items()
        if v.dtype.is_floating_point != expected[k].dtype.is_floating_point or v.dtype == torch.bool
    ]
    if wrong:
        raise CheckpointError(f"{source} does not fit this model: {'; '.join(wrong[:5])}")
    module.load_state_dict(tensors, strict=False)


def config_header(kind: str, model_config: dict, **extra) -> dict:
    """A run's header (``RunDir.write_config``): its kind, the model's config, this version, and ``extra``."""
    return {"kind": kind, "onlstm_version": __version__, "model": model_config, **extra}
