"""What a training run or a shared model leaves on disk, and opening it again (docs/design.md §4.6): the names of
its files (:class:`RunFiles`, the one place that spells them), finding its weights, reading its header, and the
model it holds (:func:`load_run`). Below ``runs/``: a model is opened without the training runtime."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from . import files
from .checkpoint import CheckpointError, assign_weights, read_json, read_safetensors
from .errors import InputError, UserNote
from .files import json_dict, write_json


@dataclass(frozen=True)
class RunKind:
    """A kind of run (one registry: every experiment registers its own). ``name``: the header's ``kind``; ``title``: for people; ``model``: the class whose ``from_pretrained`` opens
    such a run; ``command(header)``: the training command that reproduces it, or None."""

    name: str
    title: str
    model: Any
    command: Callable[[dict], str | None]


_KINDS: dict[str, RunKind] = {}


def register_kind(kind: RunKind) -> RunKind:
    _KINDS[kind.name] = kind
    return kind


def kind_names() -> list[str]:
    return sorted(_KINDS)


def find_kind(name: object, action: str = "open", where: object = "") -> RunKind:
    """The registered kind ``name``, else a :class:`CheckpointError` naming those there are."""
    if isinstance(name, str) and name in _KINDS:
        return _KINDS[name]
    prefix = f"{where}: " if where else ""
    raise CheckpointError(
        f"{prefix}cannot {action} a run of kind {name!r} (runs of kind {', '.join(kind_names()) or 'none'} can)"
    )


def _file(name: str) -> property:
    return property(lambda self: self.path / name, doc=f"``{name}`` in this directory")


_Files = TypeVar("_Files", bound="RunFiles")


class RunFiles:
    """The files of a run directory, or of a model shared with :func:`onlstm.sharing.save_pretrained` (Hugging
    Face's layout: header, vocabulary, shared weights, card). :class:`onlstm.runs.RunDir` adds what a training does
    with them."""

    CONFIG, VOCAB, HISTORY, LOG, RESULTS = "config.json", "vocab.json", "history.json", "log.csv", "results.json"
    RESUME, LOCK, TENSORBOARD = "resume.safetensors", "onlstm.lock", "tensorboard"
    STEPS = "steps.csv"  # training figures every few updates (onlstm.runs.report.Report)
    WEIGHTS = "model.{tag}.safetensors"  # tags: best, last
    SHARED_WEIGHTS, CARD = "model.safetensors", "README.md"  # a shared model's (save_pretrained)

    config_path, vocab_path, history_path = _file(CONFIG), _file(VOCAB), _file(HISTORY)
    log_path, results_path, resume_path = _file(LOG), _file(RESULTS), _file(RESUME)
    lock_path, tensorboard_path, steps_path = _file(LOCK), _file(TENSORBOARD), _file(STEPS)
    shared_weights_path, card_path = _file(SHARED_WEIGHTS), _file(CARD)

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def weights(self, tag: str) -> Path:
        return self.path / self.WEIGHTS.format(tag=tag)

    @classmethod
    def find(cls: type[_Files], path: str | Path, tag: str = "best") -> tuple[_Files, Path]:
        """``(run, weights file)`` of ``path``: a run directory (``model.<tag>``, falling back to ``model.last`` with
        a :class:`WeightsNote`), a shared model (``model.safetensors``) or a ``.safetensors`` file in either (used
        whatever ``tag`` says: :func:`check_weights_choice` refuses a command's explicit choice for one)."""
        path = Path(path)
        if path.suffix == ".safetensors" and not path.is_dir():
            if not path.exists():
                raise CheckpointError(f"{path} does not exist")
            return cls(path.parent), path
        if not path.is_dir():
            raise CheckpointError(f"{path} is neither a run directory nor a .safetensors file")
        run = cls(path)
        names = [run.weights(tag), run.weights("last"), run.shared_weights_path]
        if tag not in ("best", "last") and not names[0].exists():  # a name the user chose: never another's weights
            held = sorted(p.name for p in path.glob("model*.safetensors"))
            raise CheckpointError(
                f"{path} holds no {names[0].name} (weights {tag!r}); it holds {', '.join(held) or 'no weights'}"
            )
        for weights in names:
            if weights.exists():
                if weights == names[1] and tag != "last":
                    _note_fallback(path, weights)
                return run, weights
        raise CheckpointError(
            f"{path} holds no {names[0].name}, {names[1].name} or {names[2].name}; "
            "is it a run directory or a model saved with save_pretrained?"
        )

    def read_config(self, kind: str | None = None, what: str | None = None, hint: str = "") -> Any:
        """``config.json``, else a :class:`CheckpointError`: missing, corrupt or not of ``kind`` (``what``: the kind
        for people, ``hint``: what to do)."""
        config = read_json(self.config_path)
        if not isinstance(config, dict):  # every reader asks it for its sections
            raise CheckpointError(f"{self.config_path} holds a JSON {type(config).__name__}, not a run's header (an "
                                  "object): the file is damaged or was edited")  # fmt: skip
        found = config.get("kind")
        if kind is not None and found != kind:
            raise CheckpointError(
                f"{self.path} holds a run of kind {found!r}, not {what or kind} ({kind!r})"
                + (f"; {hint}" if hint else "")
            )
        return config

    def write_config(self, header: dict) -> None:
        write_json(self.config_path, header)

    def header(self) -> dict:
        """``config.json``, {} when it cannot be read."""
        return json_dict(self.config_path) or {}


def _training_run_below(folder: Path) -> str | None:
    """The first training run at any depth of ``folder`` (its weights or resume file), as a guard of
    :func:`onlstm.files.check_output_owner`'s ``--overwrite``."""
    names = {RunFiles.RESUME, RunFiles.WEIGHTS.format(tag="best"), RunFiles.WEIGHTS.format(tag="last")}
    for root, _, held in os.walk(folder):  # links are not followed: what they point to is not deleted
        if found := names.intersection(held):
            return f"the training run in {root} ({min(found)})"
    return None


files.REPLACE_GUARDS.append(_training_run_below)


class WeightsNote(UserNote):
    """A run opened with other weights than asked: the best ones (the default) where the run has none yet."""


def _note_fallback(path: Path, used: Path) -> None:
    # the scores a command prints are then the last weights', not the best ones it was asked for (by default); only
    # best falls back (another name the run does not hold is refused in find)
    warnings.warn(WeightsNote(f"no best weights in {path} (no validation check yet): using {used.name}"), stacklevel=3)


def check_weights_choice(checkpoint: str | Path, tag: str | None, flag: str = "--weights") -> None:
    """A command's ``flag tag`` (None: not given) with a ``--checkpoint`` that names one weights file of other
    weights is refused: the flag chooses among a run directory's files, and the file given would be used without a
    word. Called before any work; a file the choice names itself (``model.last.safetensors`` with ``last``) passes."""
    path = Path(checkpoint)
    if tag is None or path.suffix != ".safetensors" or path.is_dir() or path.name == RunFiles.WEIGHTS.format(tag=tag):
        return
    raise InputError(
        f"{flag} {tag} chooses among a run directory's weights, but --checkpoint {path} is one weights file; give "
        f"the run directory ({path.parent}) with {flag} {tag}, or the file without {flag}"
    )


@dataclass
class LoadedRun:
    model: nn.Module  # on the asked device, in eval mode
    config: dict  # the header (RunFiles.read_config)
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
    dtype: torch.dtype | None = None,
    vocab: Callable[[Path], Any] | None = None,
    check: Callable[[LoadedRun], None] | None = None,
    what: str | None = None,
    hint: str = "",
) -> LoadedRun:
    """Open the run of ``kind`` at ``path`` (:meth:`RunFiles.find`). ``build(config["model"])`` makes the model (its
    ``TypeError``/``ValueError``/``KeyError``: a bad model config); ``vocab(run.vocab_path)`` reads the vocabulary;
    ``check(run)`` may refuse the run before the weights are read; ``what``/``hint`` as in
    :meth:`RunFiles.read_config`. The model comes back in ``dtype``, or (None) in the one its weights were saved in.
    Every failure is a :class:`CheckpointError` naming the file."""
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise InputError(f"dtype must be a floating-point torch.dtype such as torch.float64, got {dtype!r}")
    saved, weights = RunFiles.find(path, tag)
    config = saved.read_config(kind, what, hint)
    try:
        with torch.random.fork_rng(devices=[]):  # the initial weights, replaced below, must not use the caller's RNG
            model = build(config["model"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{saved.config_path}: bad model config ({exc})") from None
    run = LoadedRun(model, config, vocab(saved.vocab_path) if vocab else None, saved.path, weights)
    if check is not None:
        check(run)
    tensors, _ = read_safetensors(weights)
    floats = {t.dtype for t in tensors.values() if t.is_floating_point()}
    if dtype is None and len(floats) == 1:
        dtype = floats.pop()  # a model saved in float64 comes back in float64, not rounded to the built float32
    model = model.to(dtype) if dtype is not None else model
    assign_weights(model, tensors, str(weights))
    run.model = model.to(device).eval()
    return run
