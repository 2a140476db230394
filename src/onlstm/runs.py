"""The runtime every experiment shares: opening a saved run, resume state, Ctrl-C, device and threads.

* :func:`load_run` opens a run directory (``config.json`` + vocabulary + ``model.<tag>.safetensors``)
  for any kind of model; the experiment says how to build its model from the saved config, so this
  module imports no experiment.
* :func:`write_resume` / :func:`read_resume` -- the resume file of both trainers: tensors (weights,
  optimizer state, random state, anything else a trainer carries) in one safetensors file, the rest as
  JSON in its metadata, written atomically, never pickled. :func:`training_tensors` and
  :func:`restore_training` do the part both trainers share (model, optimizer, random state).
* :class:`StopRequest` -- Ctrl-C / SIGTERM ask a trainer to stop after the current step and save.
* :func:`resolve_device` and :func:`setup_torch` -- device names, thread count, denormals.
* :func:`save_pretrained` / :func:`pretrained_path` -- a model to share, in Hugging Face's layout
  (``config.json``, ``model.safetensors``, ``vocab.json``, a ``README.md`` model card); :func:`load_run`
  reads that layout as well as a run directory (docs/sharing.md).

Resume files keep the format names they had before this module existed (``onlstm-lm-resume/1``,
``onlstm-logic-resume-1``) and the same layout, so a file written by an older version loads.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .checkpoint import (
    PRETRAINED_WEIGHTS,
    CheckpointError,
    assign_weights,
    atomic_write,
    load_weights,
    read_json,
    read_safetensors,
    resolve_weights,
    save_weights,
    state_dict_for_saving,
    write_json,
)
from .errors import InputError

# --------------------------------------------------------------------------- device, threads, denormals


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` (= ``cuda:local_rank``) or ``cuda:N``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device {name!r} was asked for but CUDA is not available; use --device cpu")
    if name == "cuda":
        return torch.device("cuda", local_rank)
    return torch.device(name)


def setup_torch(threads: int | None = None) -> None:
    """Process-wide settings every command that runs a model uses: ``threads`` CPU threads (0/None: leave
    PyTorch's choice) and denormal numbers flushed to zero (tiny gate values otherwise slow the CPU down
    many times over late in training)."""
    if threads:
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)


# --------------------------------------------------------------------------- Ctrl-C / SIGTERM


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM asks the run to stop after the current step and save a resumable
    checkpoint; a second Ctrl-C aborts at once without saving."""

    def __init__(self, log: Callable[[str], None] | None = None):
        self.requested = False
        self._old: dict = {}
        self._log = log

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        if not self.requested:
            print(
                "\nstopping after this step and saving a resumable checkpoint "
                "(press Ctrl-C again to abort without saving)",
                file=sys.stderr,
                flush=True,
            )
        self.requested = True

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}
        return False


# --------------------------------------------------------------------------- opening a saved run


@dataclass
class LoadedRun:
    model: nn.Module  # on the asked device, in eval mode
    config: dict  # config.json
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
    vocab: Callable[[Path], Any] | None = None,
    check: Callable[[LoadedRun], None] | None = None,
    what: str | None = None,
    hint: str = "",
) -> LoadedRun:
    """Open the run directory ``path`` (or a ``.safetensors`` file in one) holding a model of ``kind``.

    ``build(config["model"])`` makes the (untrained) model; a ``TypeError``/``ValueError``/``KeyError`` it
    raises is reported as a bad model config. ``vocab(run_dir / "vocab.json")`` reads the vocabulary;
    ``check(run)`` can refuse a run that does not fit (say, a vocabulary of the wrong size) before the
    weights are read. ``what`` names the kind for people and ``hint`` says what to do instead. Every
    failure is a :class:`~onlstm.checkpoint.CheckpointError` naming the file and the problem.
    """
    run_dir, weights = resolve_weights(Path(path), tag)
    config = read_json(run_dir / "config.json")
    found = config.get("kind") if isinstance(config, dict) else None
    if found != kind:
        raise CheckpointError(
            f"{run_dir} holds a checkpoint of kind {found!r}, not {what or kind} ({kind!r})"
            + (f"; {hint}" if hint else "")
        )
    try:
        model = build(config["model"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{run_dir / 'config.json'}: bad model config ({exc})") from None
    run = LoadedRun(model, config, vocab(run_dir / "vocab.json") if vocab else None, run_dir, weights)
    if check is not None:
        check(run)
    load_weights(weights, model)
    run.model = model.to(device).eval()
    return run


# --------------------------------------------------------------------------- resume state


def optimizer_to_data(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """The optimizer's state as tensors (for safetensors) and JSON (hyperparameters, scalars)."""
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"optim.{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[k] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_from_data(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    state: dict = {}
    for key, t in tensors.items():
        if key.startswith("optim."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = t
    for idx, kv in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(kv)
    groups = meta["param_groups"]
    if [len(g["params"]) for g in groups] != [len(g["params"]) for g in opt.param_groups]:
        raise CheckpointError("the optimizer state in the resume file does not fit this model")
    opt.load_state_dict({"state": state, "param_groups": groups})


def training_tensors(
    model: nn.Module, opt: torch.optim.Optimizer, device: torch.device
) -> tuple[dict[str, torch.Tensor], dict]:
    """What every trainer saves: ``model.*`` weights, ``optim.*`` optimizer tensors, ``rng.torch`` (and
    ``rng.cuda`` on a GPU); returns ``(tensors, optimizer metadata)``."""
    tensors = {f"model.{k}": v for k, v in state_dict_for_saving(model).items()}
    opt_tensors, opt_meta = optimizer_to_data(opt)
    tensors.update(opt_tensors)
    tensors["rng.torch"] = torch.get_rng_state()
    if device.type == "cuda":
        tensors["rng.cuda"] = torch.cuda.get_rng_state(device)
    return tensors, opt_meta


def restore_training(
    path: Path,
    tensors: dict[str, torch.Tensor],
    opt_meta: dict,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    device: torch.device,
) -> None:
    """Undo :func:`training_tensors`: weights, optimizer state and random state back in place."""
    if "rng.torch" not in tensors:
        raise CheckpointError(f"{path}: the random state (rng.torch) is missing; the file is incomplete")
    assign_weights(model, {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, f"{path} (model)")
    optimizer_from_data(opt, {k: v for k, v in tensors.items() if k.startswith("optim.")}, opt_meta)
    torch.set_rng_state(tensors["rng.torch"])
    if device.type == "cuda" and "rng.cuda" in tensors:
        torch.cuda.set_rng_state(tensors["rng.cuda"], device)


def write_resume(path: Path, fmt: str, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Write a resume file atomically: ``tensors`` as safetensors, every ``meta`` value as JSON text in the
    file's metadata next to ``format = fmt``."""
    from safetensors.torch import save_file

    header = {"format": fmt, **{k: json.dumps(v) for k, v in meta.items()}}
    atomic_write(Path(path), lambda tmp: save_file(tensors, tmp, metadata=header))


def read_resume(
    path: Path, fmt: str, what: str, keys: tuple[str, ...], fix: str = "start a new run with another --out"
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(tensors, metadata)`` of a resume file written by :func:`write_resume` with format ``fmt``; the
    metadata values in ``keys`` must be present and are decoded from JSON. ``what`` names the file for
    people ("a logic resume file"); ``fix`` says how to go on when the file cannot be used."""
    tensors, raw = read_safetensors(path)
    if raw.get("format") != fmt:
        raise CheckpointError(
            f"{path} is not {what} (format {raw.get('format')!r}, expected {fmt!r}); it cannot be resumed: {fix}"
        )
    try:
        meta = {k: json.loads(raw[k]) for k in keys}
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: metadata is incomplete or corrupt ({exc}); {fix}") from None
    return tensors, meta


# --------------------------------------------------------------------------- sharing a model


def save_pretrained(
    directory: str | Path, model: nn.Module, config: dict, card: str, vocab: list[str] | None = None
) -> Path:
    """Write a model to share in Hugging Face's layout: ``config.json`` (``config``, the same content as a
    run's, so :func:`load_run` reads it), ``model.safetensors``, ``vocab.json`` and ``README.md`` (``card``).

    A directory that holds a training run is refused (its ``model.best`` would sit beside the shared
    weights); an earlier export is overwritten file by file, each written atomically."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{directory} is a file; save_pretrained needs a directory (new or an earlier export)")
    run_files = [
        n
        for n in ("resume.safetensors", "model.best.safetensors", "model.last.safetensors")
        if (directory / n).exists()
    ]
    if run_files:
        raise InputError(f"{directory} holds a training run ({run_files[0]}); save the shared model elsewhere")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {directory}: {exc.strerror}; choose another directory") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"{directory} is not writable; choose another directory")
    save_weights(directory / PRETRAINED_WEIGHTS, model)
    if vocab is not None:
        write_json(directory / "vocab.json", list(vocab))
    write_json(directory / "config.json", config)
    atomic_write(directory / "README.md", lambda tmp: Path(tmp).write_text(card, encoding="utf-8"))
    return directory


def pretrained_path(name_or_path: str | Path) -> Path:
    """A local directory as it is; otherwise ``owner/name`` is taken for a Hugging Face Hub id and
    downloaded with ``huggingface_hub`` (not a dependency of onlstm: install it to use the Hub)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    text = str(name_or_path)
    if text.count("/") != 1 or text.startswith((".", "/", "~")):
        raise CheckpointError(f"{text} does not exist (a local directory or an owner/name Hub id was expected)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(
            f"{text} is not a local directory; to download it from the Hugging Face Hub install huggingface_hub "
            "(pip install huggingface_hub), or download the model yourself and pass its local directory"
        ) from None
    try:
        return Path(snapshot_download(repo_id=text, allow_patterns=["*.json", "*.safetensors", "*.md"]))
    except Exception as exc:  # the Hub client's errors (not found, offline, ...) become one line
        raise CheckpointError(
            f"{text}: cannot download from the Hugging Face Hub ({type(exc).__name__}: {exc})"
        ) from None


def model_card(title: str, config: dict, usage: str, command: str | None, results: dict | None) -> str:
    """The ``README.md`` of a shared model: Hub metadata, what it is, how to load it, how it was trained
    (the command that reproduces its settings) and its results, when known."""
    import yaml

    kind = config.get("kind", "?")
    lines = [
        "---",
        "library_name: onlstm",
        f"tags: [onlstm, ordered-neurons, {kind}]",
        "---",
        "",
        f"# {title}",
        "",
        f"An onlstm (Ordered Neurons LSTM) model of kind `{kind}`, saved by onlstm "
        f"{config.get('onlstm_version', '?')} (`save_pretrained`): `config.json`, `model.safetensors` "
        "(weights, no pickled code) and `vocab.json`.",
        "",
        "## Use",
        "",
        usage.strip(),
        "",
        "## Training",
        "",
    ]
    if command:
        lines += ["The command that reproduces its settings:", "", "```", command, "```", ""]
    else:
        lines += ["The training command is not known; `config.json` holds every setting.", ""]
    if results:
        lines += ["## Results", "", "```yaml", yaml.safe_dump(results, sort_keys=False).strip(), "```", ""]
    lines += [
        "## Configuration",
        "",
        "```yaml",
        yaml.safe_dump({"model": config.get("model")}, sort_keys=False).strip(),
        "```",
        "",
    ]
    return "\n".join(lines)
