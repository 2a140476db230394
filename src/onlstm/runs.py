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
* :func:`check_output_dir` / :func:`check_output_file` -- an output path is checked (not a file where a
  directory goes, writable, not holding another run unless resuming) before any work is done.
* :class:`RunLock` -- one training at a time in a run directory (``onlstm.lock`` with the owner's pid and
  host; a lock left by a process that died on this host is detected, explained and taken over).
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
import socket
import sys
import tempfile
import threading
import time
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
from .errors import InputError, OnlstmError

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


# --------------------------------------------------------------------------- output paths


class RunDirError(OnlstmError, ValueError):
    """The run directory cannot be used as asked: it holds another run (or an interrupted one) without
    ``--resume``, it is locked by a training in progress, or its settings do not fit."""


def _nearest_existing(path: Path) -> Path:
    for p in (path, *path.parents):
        if p.exists():
            return p
    return Path(".")


def _check_writable(path: Path, flag: str) -> None:
    """``path`` (which may not exist yet) can be created and written: its nearest existing ancestor is a
    directory we can create a file in (tried for real: ``os.access`` says yes to root on read-only mounts)."""
    base = _nearest_existing(path)
    if not base.is_dir():
        raise InputError(f"{flag} {path}: {base} is a file, not a directory; choose another {flag}")
    try:
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as exc:
        raise InputError(
            f"{flag} {path}: cannot write in {base} ({exc.strerror or exc}); choose a writable {flag}"
        ) from None


def check_output_file(path: str | Path, flag: str = "--out") -> Path:
    """An output file (or file prefix) ``path``: not a directory, and its folder writable. Nothing is created."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag} {path} is a directory; give a file name (e.g. {path / 'out.txt'})")
    _check_writable(path.parent if str(path.parent) else Path("."), flag)
    return path


def check_output_folder(path: str | Path, flag: str = "--out") -> Path:
    """An output directory ``path`` (created later if missing): not a file, and writable. Nothing is created."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path} is a file, not a directory; choose another {flag}")
    _check_writable(path, flag)
    return path


def describe_run(path: str | Path) -> str | None:
    """What ``path`` holds, in words (``"a finished logic run"``), or None when it holds no run."""
    path = Path(path)
    config, resume = path / "config.json", path / "resume.safetensors"
    if not config.exists() and not resume.exists():
        return None
    kind, status = "unknown", None
    try:
        header = json.loads(config.read_text(encoding="utf-8"))
        kind, status = str(header.get("kind", "unknown")), header.get("status")
    except (OSError, ValueError, AttributeError):
        pass
    names = {"lm": "language-model", "logic-classifier": "logic"}
    state = "an interrupted" if resume.exists() else ("a finished" if status == "finished" else "a")
    return f"{state} {names.get(kind, kind)} run" + (" (resume.safetensors)" if resume.exists() else "")


def run_kind(path: str | Path) -> str | None:
    """The ``kind`` in ``path/config.json`` (None without a readable one)."""
    try:
        header = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
        return str(header["kind"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_output_dir(
    path: str | Path, *, resume: bool = False, command: str = "", flag: str = "--out", replace_kind: str | None = None
) -> Path:
    """The run directory ``path`` of a training command, checked before any work is done: not a file,
    writable, and -- unless ``resume`` -- holding no run (finished, interrupted, or of another kind), so a
    training never silently replaces one. ``replace_kind``: a run of this kind may be replaced (``logic
    compare`` retrains its own runs when the settings change). Nothing is created. Raises
    :class:`RunDirError` / :class:`~onlstm.errors.InputError` with what is there and what to do."""
    path = check_output_folder(path, flag)
    held = describe_run(path)
    if held and replace_kind is not None and run_kind(path) == replace_kind:
        return path
    if held and not resume:
        raise RunDirError(
            f"{path} already holds a run; pass --resume to continue it"
            + (f" ({command} ... --resume)" if command else "")
            + f", or choose another {flag}, or delete the directory to start over (found: {held})"
        )
    return path


# --------------------------------------------------------------------------- one training per directory

LOCK_FILE = "onlstm.lock"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


class RunLock:
    """Hold ``run_dir/onlstm.lock`` while a training writes into ``run_dir``; a second training there is
    refused with the owner's pid, host and command.

    The lock file is created atomically (``O_EXCL``) and holds ``{"pid", "host", "command", "started"}``.
    A lock whose pid no longer runs on this host is stale (the owner crashed or was killed): it is
    taken over, and ``log`` says so. A lock from another host cannot be checked from here: the message
    says to delete the file once no training there uses the directory. ``enabled=False`` (the
    non-main processes of a distributed run) does nothing. On release the file is removed, and the
    directory too when this lock created it and it is still empty (a run refused by a later check
    leaves nothing behind).
    """

    def __init__(self, run_dir: str | Path, command: str, log: Callable[[str], None] | None = None, enabled=True):
        self.run_dir, self.command, self.log, self.enabled = Path(run_dir), command, log, enabled
        self.path = self.run_dir / LOCK_FILE
        self._created_dir = False
        self.held = False

    def owner(self) -> dict | None:
        """The lock file's content (None when there is no lock; ``{}`` when it is unreadable)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def is_stale(self, owner: dict) -> bool:
        """A lock from this host whose process is gone."""
        pid = owner.get("pid")
        return owner.get("host") == socket.gethostname() and isinstance(pid, int) and not _pid_alive(pid)

    def acquire(self) -> RunLock:
        if not self.enabled:
            return self
        self._created_dir = not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # a stale lock taken over by another process at the same moment: look again
            if self._try_create():
                self.held = True
                return self
            owner = self.owner()
            if owner is None:
                continue
            if owner and self.is_stale(owner):
                self._take_over(owner)
                continue
            self._release_dir()
            raise RunDirError(self._busy_message(owner))
        raise RunDirError(f"could not take the lock {self.path}; try again")

    def _try_create(self) -> bool:
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command, "started": time.time()}
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        return True

    def _take_over(self, owner: dict) -> None:
        # rename first: of two processes taking over the same stale lock, only one rename succeeds
        aside = self.path.with_name(f"{LOCK_FILE}.stale.{os.getpid()}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        aside.unlink(missing_ok=True)
        if self.log:
            self.log(
                f"{self.path}: stale lock of pid {owner.get('pid')} on this host ({owner.get('command', '?')}), "
                "which is no longer running (it crashed or was killed); taking it over"
            )

    def _busy_message(self, owner: dict) -> str:
        if not owner:
            return (
                f"{self.run_dir} is locked ({self.path} exists but cannot be read); if no training uses this "
                f"directory, delete {self.path} and run again"
            )
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("started", 0)))
        who = f"pid {owner.get('pid')} on host {owner.get('host')} ({owner.get('command', '?')}, since {started})"
        if owner.get("host") == socket.gethostname():
            return (
                f"{self.run_dir} is in use by another training: {who}; wait for it to finish or stop it "
                "(Ctrl-C saves a resumable checkpoint), or choose another --out"
            )
        return (
            f"{self.run_dir} is locked by {who}, which cannot be checked from this host; if no training runs "
            f"there any more, delete {self.path} and run again, else choose another --out"
        )

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False
        self._release_dir()

    def _release_dir(self) -> None:
        if self._created_dir:
            try:
                self.run_dir.rmdir()  # only when still empty
            except OSError:
                pass
            self._created_dir = False

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> bool:
        self.release()
        return False


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
