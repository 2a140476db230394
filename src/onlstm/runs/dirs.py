"""Run directories (:class:`RunDir`: their files, header, export), opening one (:func:`load_run`), shared models
(:func:`pretrained_path`, :func:`model_card`), the registry of run kinds, output paths checked before any work,
and one training at a time per directory (:class:`RunLock`); docs/design.md §4.6."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoint import MAX_JSON_BYTES, CheckpointError, load_weights, read_json, save_weights
from ..errors import InputError, OnlstmError, WriteError, quote
from ..files import (
    LEFTOVER,
    check_output_folder,
    check_output_owner,
    check_writable,
    publish_folder,
    remove_leftovers,
    write_json,
    write_text,
)

try:
    import fcntl
except ImportError:  # Windows: a lock is checked by its pid alone (RunLock)
    fcntl = None  # type: ignore[assignment]


class RunDirError(OnlstmError, ValueError):
    """The run directory cannot be used as asked: it holds another run (or an interrupted one) without
    ``--resume``, it is locked by a training in progress, or its settings do not fit."""


def check_output_file(path: str | Path, flag: str = "--out") -> Path:
    """An output file (or file prefix) ``path``: not a directory, and its folder writable. Nothing is created."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag} {path} is a directory; give a file name (e.g. {path / 'out.txt'})")
    check_writable(path.parent if str(path.parent) else Path("."), flag)
    return path


@dataclass(frozen=True)
class RunKind:
    """``name``: the header's ``kind``; ``title``: for people; ``model``: the class whose ``from_pretrained`` opens
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


class RunDir:
    """A run directory, the one place that knows its files (docs/design.md §4.6); a model shared with
    :meth:`save_pretrained` has Hugging Face's layout instead (header, vocabulary, shared weights, card)."""

    CONFIG, VOCAB, HISTORY, LOG, RESULTS = "config.json", "vocab.json", "history.json", "log.csv", "results.json"
    RESUME, LOCK, TENSORBOARD = "resume.safetensors", "onlstm.lock", "tensorboard"
    STEPS = "steps.csv"  # training figures every few updates (onlstm.runs.engine.StepLog)
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
    def find(cls, path: str | Path, tag: str = "best") -> tuple[RunDir, Path]:
        """``(run, weights file)`` of ``path``: a run directory (``model.<tag>``, falling back to ``model.last``), a
        shared model (``model.safetensors``) or a ``.safetensors`` file in either."""
        path = Path(path)
        if path.suffix == ".safetensors" and not path.is_dir():
            if not path.exists():
                raise CheckpointError(f"{path} does not exist")
            return cls(path.parent), path
        if not path.is_dir():
            raise CheckpointError(f"{path} is neither a run directory nor a .safetensors file")
        run = cls(path)
        names = [run.weights(tag), run.weights("last"), run.shared_weights_path]
        for weights in names:
            if weights.exists():
                return run, weights
        raise CheckpointError(
            f"{path} holds no {names[0].name}, {names[1].name} or {names[2].name}; "
            "is it a run directory or a model saved with save_pretrained?"
        )

    # -- the header ---------------------------------------------------------------------------------
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

    def write_header(self, header: dict, vocab: Callable[[Path], None]) -> None:
        """A new run's vocabulary (``vocab(path)`` writes it), then ``config.json``, which makes the folder a run: a
        failed write (a full disk) takes both away again, so that the same command runs again into the folder."""
        try:
            vocab(self.vocab_path)
            self.write_config(header)
        except OSError:
            for path in (self.vocab_path, self.config_path):
                path.unlink(missing_ok=True)
            raise

    def header(self) -> dict:
        """``config.json``, {} when it cannot be read."""
        return _json_dict(self.config_path) or {}

    @property
    def kind(self) -> str | None:
        kind = self.header().get("kind")
        return None if kind is None else str(kind)

    def results(self) -> dict | None:
        """The run's result record (``results.json``: :class:`~onlstm.runs.engine.TrainResult`'s, written when a
        training stops), None while there is none; a logic run of an earlier version kept it in its header. A
        record that is not a JSON object is refused (:class:`CheckpointError`): the file is damaged or was edited."""
        if self.results_path.exists():
            record, where = read_json(self.results_path), str(self.results_path)
        else:
            header = self.header()
            old, where = header.get("result"), f"{self.config_path} (result)"
            record = None if old is None else {"status": header.get("status"), **old} if isinstance(old, dict) else old
        if (record is not None or self.results_path.exists()) and not isinstance(record, dict):
            raise CheckpointError(f"{where} is not a JSON object of results: the file is damaged or was edited")
        return record

    def describe(self) -> str | None:
        """What the directory holds, in words (``"a finished logic run"``), or None when it holds no run."""
        resume = self.resume_path.exists()
        if not resume and not self.config_path.exists():
            return None
        header = self.header()
        kind = str(header.get("kind", "unknown"))
        status = (_json_dict(self.results_path) or {}).get("status", header.get("status"))
        # a finished or stopped run may keep its resume file (a larger budget trains it further)
        state = (
            f"a {status}" if status in ("finished", "stopped", "diverged") else ("an interrupted" if resume else "a")
        )
        title = _KINDS[kind].title if kind in _KINDS else kind  # a kind not imported yet: by its name
        return f"{state} {title} run" + (f" ({self.RESUME})" if resume else "")

    # -- as the output of a command -------------------------------------------------------------
    def check_output(
        self,
        *,
        resume: bool = False,
        command: str = "",
        flag: str = "--out",
        replace_kind: str | None = None,
        keep: tuple[str, ...] = (),
    ) -> RunDir:
        """Checked before any work as a training's output: not a file, writable, and holding no run unless
        ``resume`` or a run of ``replace_kind`` (``logic compare`` retrains its own); a new run needs a new or empty
        directory (but for its lock, and the names in ``keep``: the demo's corpus). Nothing is created."""
        check_output_folder(self.path, flag)
        held = self.describe()
        if held and replace_kind is not None and self.kind == replace_kind:
            return self
        if held and not resume:
            raise RunDirError(
                f"{self.path} already holds a run; pass --resume to continue it"
                + (f" ({command} ... --resume)" if command else "")
                + f", or choose another {flag}, or delete the directory to start over (found: {held})"
            )
        if not held and not resume and self.path.is_dir():
            # a writer killed mid-write leaves its temporary files: the lock removes them, they are not the user's
            others = [n for n in os.listdir(self.path) if n not in (self.LOCK, *keep) and not LEFTOVER.fullmatch(n)]
            if others:
                shown = ", ".join(repr(n[:60]) for n in sorted(others)[:3]) + (" ..." if len(others) > 3 else "")
                raise RunDirError(
                    f"{flag} {self.path} is not empty and holds no run (it holds {shown}); a training writes its "
                    f"files only into a new or empty directory: choose another {flag}"
                )
        return self

    def lock(self, command: str, log: Callable[[str], None] | None = None, enabled: bool = True) -> RunLock:
        return RunLock(self.path, command, log, enabled)

    #: The marker kind of a shared model's folder (:func:`onlstm.files.check_output_owner`).
    EXPORT = "export"

    def is_export(self) -> bool:
        """An earlier export, marked or (written before markers) of a shared model's files alone."""
        names = {self.CONFIG, self.SHARED_WEIGHTS, self.VOCAB, self.CARD}
        try:
            held = set(os.listdir(self.path))
        except OSError:
            return False
        return self.SHARED_WEIGHTS in held and held <= names and "kind" in self.header()

    def check_share_target(
        self, overwrite: bool = False, flag: str = "--to", overwrite_flag: str = "--overwrite"
    ) -> Path:
        """Whether a shared model may be written here (:meth:`save_pretrained`'s rule, for a writer to check before
        its work): a new or empty directory or an earlier export, anything else only with ``overwrite``, and never
        a training run, the root, the home folder or one that holds the working folder."""
        directory = self.path
        if directory.exists() and not directory.is_dir():
            raise InputError(f"{directory} is a file; save_pretrained needs a directory (new or an earlier export)")
        held = [
            p.name for p in (self.resume_path, self.weights("best"), self.weights("last")) if p.exists()
        ]  # only a training writes them
        if held:
            raise InputError(f"{directory} holds a training run ({held[0]}); save the shared model elsewhere")
        legacy = lambda path: RunDir(path).is_export()
        return check_output_owner(directory, self.EXPORT, overwrite=overwrite, flag=flag, legacy=legacy,
                                  overwrite_flag=overwrite_flag)  # fmt: skip

    def save_pretrained(
        self, model, config: dict, card: str, vocab: list[str] | None = None, overwrite: bool = False
    ) -> Path:
        """Write a model to share here, all files at once (:func:`onlstm.files.publish_folder`): into a new or empty
        directory or over an earlier export, anything else only with ``overwrite``; never over a training run (its
        best weights would be lost)."""
        # called from Python: the message names the argument, not the command's flags
        directory = self.check_share_target(overwrite, "save_pretrained: the directory", "overwrite=True")

        def write(tmp: Path) -> None:
            into = RunDir(tmp)
            save_weights(into.shared_weights_path, model)
            if vocab is not None:
                write_json(into.vocab_path, list(vocab))
            into.write_config(config)
            write_text(into.card_path, card)

        return publish_folder(directory, self.EXPORT, write)


def check_output_dir(path: str | Path, **options) -> Path:
    return RunDir(path).check_output(**options).path


def _json_dict(path: Path) -> dict | None:
    """``path``'s JSON object: None when the file is missing, {} when it cannot be read or holds no object."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_JSON_BYTES:  # a FIFO, a device, a huge file: not ours
            return None if not path.exists() and not path.is_symlink() else {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _pid_alive(pid: int) -> bool:
    if not 0 < pid < 2**31:  # no such process can exist (a tampered lock): os.kill would overflow
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


def _flock(fd: int) -> bool | None:
    """Take the kernel's lock on ``fd`` without waiting: True when taken, False when a live process holds it, None
    where there is none (Windows, a file system without flock): the pid check decides then."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise
    return True


def _read_owner(fd: int) -> dict:
    """The record in the lock file open as ``fd`` ({} when empty or not a record of ours)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _same_file(fd: int, path: Path) -> bool:
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _shown(value: object) -> str:
    """A value of a lock file in a message: a text as it is, anything else (a tampered file) quoted, both short."""
    return value[:80] if isinstance(value, str) else quote(value, 40)


def _since(started: object) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


#: The lock files this process holds (the check by pid cannot tell this process's own from a stale one).
_HELD: set[Path] = set()


class RunLock:
    """The lock file held while a training writes into ``run_dir`` (docs/cli.md, "Locks"): the kernel's lock on it
    (``flock``) is the proof that its holder lives, so a holder killed in any way (SIGKILL, a crash, a reboot)
    leaves a lock the next training takes over, whatever pid the file names (a pid used again, pid 1 in a
    restarted container); its JSON names the holder for the message. Where there is no ``flock`` the pid is
    checked instead. ``log`` reports a stale lock taken over and the temporary files of a killed writer removed.
    ``enabled=False`` (non-main processes) does nothing. Release removes the file, and the directory when this
    lock created it and it is still empty."""

    def __init__(self, run_dir: str | Path, command: str, log: Callable[[str], None] | None = None, enabled=True):
        self.run_dir, self.command, self.log, self.enabled = Path(run_dir), command, log, enabled
        self.path = RunDir(run_dir).lock_path
        self._created_dir = self.held = False
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        if not self.enabled:
            return self
        self._created_dir = not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            for _ in range(3):  # a lock file removed or replaced at the same moment: look again
                if self._try_take():
                    self.held = True
                    _HELD.add(self.path.absolute())
                    self._remove_leftovers()
                    return self
        except BaseException:
            self._release_dir()
            raise
        self._release_dir()
        raise RunDirError(f"could not take the lock {self.path}; try again")

    def _try_take(self) -> bool:
        """One try: True when the lock is now this process's, False to look again; raises when it is in use."""
        fd, created = self._open()
        if fd is None:
            return False
        try:
            taken = _flock(fd)
            if taken is None:
                return self._by_pid(fd, created)
            owner = _read_owner(fd)
            if not taken:
                raise RunDirError(self._busy_message(owner, live=True))
            if not _same_file(fd, self.path):  # released (removed) by its holder while this process looked
                os.close(fd)
                return False
            if owner.get("host", socket.gethostname()) != socket.gethostname():
                raise RunDirError(self._busy_message(owner))  # its flock may not reach this host: not stale
            if not created:
                self._note_stale(owner)
            self._write_record(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        self._fd = fd
        return True

    def _open(self) -> tuple[int | None, bool]:
        """The lock file open for writing (None: removed at this moment) and whether this call created it."""
        try:
            try:
                return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                return os.open(self.path, os.O_RDWR), False
        except FileNotFoundError:
            return None, False
        except IsADirectoryError:
            raise RunDirError(self._busy_message({})) from None
        except OSError as exc:
            raise WriteError(self.path, exc) from None

    def _record(self) -> bytes:
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command, "started": time.time()}
        return json.dumps(record).encode("utf-8")

    def _write_record(self, fd: int) -> None:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, self._record(), 0)
        except OSError as exc:  # a full disk: an empty lock file, unlocked, would be taken for a stale one
            self.path.unlink(missing_ok=True)
            raise WriteError(self.path, exc) from None

    def _by_pid(self, fd: int, created: bool) -> bool:
        """Without flock: the lock is this process's when it created the file, and a lock whose pid no longer runs
        on this host (or is this process's, which does not hold it: pid 1 in a restarted container) is stale."""
        if created:
            self._write_record(fd)
            os.close(fd)
            return True
        owner = _read_owner(fd)
        os.close(fd)
        pid = owner.get("pid")  # {} when unreadable: not stale
        mine = pid == os.getpid() and self.path.absolute() not in _HELD
        if owner.get("host") == socket.gethostname() and isinstance(pid, int) and (mine or not _pid_alive(pid)):
            self._take_over(owner)
            return False
        raise RunDirError(self._busy_message(owner))

    def _take_over(self, owner: dict) -> None:
        # rename first: of two processes taking over the same stale lock, only one rename succeeds
        aside = self.path.with_name(f"{RunDir.LOCK}.stale.{os.getpid()}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        aside.unlink(missing_ok=True)
        self._note_stale(owner)

    def _note_stale(self, owner: dict) -> None:
        if self.log:
            self.log(
                f"{self.path}: stale lock of pid {_shown(owner.get('pid', '?'))} on this host "
                f"({_shown(owner.get('command', '?'))}): the process that wrote it is no longer running (it crashed or "
                "was killed); taking it over"
            )

    def _remove_leftovers(self) -> None:
        removed = remove_leftovers(self.run_dir)
        if removed and self.log:
            shown = ", ".join(removed[:3]) + (f" and {len(removed) - 3} more" if len(removed) > 3 else "")
            self.log(f"{self.run_dir}: removed {len(removed)} temporary file(s) of a writer that was killed ({shown})")

    def _busy_message(self, owner: dict, live: bool = False) -> str:
        if not owner:
            if live:  # its holder has not written its record yet
                return (
                    f"{self.run_dir} is in use by another training (a running process holds {self.path}); wait for "
                    "it to finish or stop it (Ctrl-C saves a resumable checkpoint), or choose another --out"
                )
            return (
                f"{self.run_dir} is locked ({self.path} exists but cannot be read); if no training uses this "
                f"directory, delete {self.path} and run again"
            )
        who = f"pid {_shown(owner.get('pid'))} on host {_shown(owner.get('host'))} "
        who += f"({_shown(owner.get('command', '?'))}, since {_since(owner.get('started'))})"
        if live or owner.get("host") == socket.gethostname():
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
            self.path.unlink(missing_ok=True)  # before the kernel's lock goes: a waiting process then looks again
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            _HELD.discard(self.path.absolute())
            self.held = False
        self._release_dir()

    def _release_dir(self) -> None:
        if self._created_dir:
            with contextlib.suppress(OSError):
                self.run_dir.rmdir()  # only when still empty
            self._created_dir = False

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> bool:
        self.release()
        return False


@dataclass
class LoadedRun:
    model: nn.Module  # on the asked device, in eval mode
    config: dict  # the header (RunDir.read_config)
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
    """Open the run of ``kind`` at ``path`` (:meth:`RunDir.find`). ``build(config["model"])`` makes the model (its
    ``TypeError``/``ValueError``/``KeyError``: a bad model config); ``vocab(run.vocab_path)`` reads the vocabulary;
    ``check(run)`` may refuse the run before the weights are read; ``what``/``hint`` as in
    :meth:`RunDir.read_config`. Every failure is a :class:`CheckpointError` naming the file."""
    saved, weights = RunDir.find(path, tag)
    config = saved.read_config(kind, what, hint)
    try:
        model = build(config["model"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{saved.config_path}: bad model config ({exc})") from None
    run = LoadedRun(model, config, vocab(saved.vocab_path) if vocab else None, saved.path, weights)
    if check is not None:
        check(run)
    load_weights(weights, model)
    run.model = model.to(device).eval()
    return run


def pretrained_path(name_or_path: str | Path) -> Path:
    """A local directory as it is; ``owner/name`` is downloaded from the Hugging Face Hub (``huggingface_hub``)."""
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
    """A shared model's card: Hub metadata, what it is, how to load it, the command that reproduces its
    settings and its results, when known."""
    kind = config.get("kind", "?")
    yaml_block = lambda data: f"```yaml\n{simple_yaml(data)}\n```\n"
    if command:
        training = f"The command that reproduces its settings:\n\n```\n{command}\n```\n"
    else:
        training = f"The training command is not known; `{RunDir.CONFIG}` holds every setting.\n"
    return (
        f"---\nlibrary_name: onlstm\ntags: [onlstm, ordered-neurons, {kind}]\n---\n\n# {title}\n\n"
        f"An onlstm (Ordered Neurons LSTM) model of kind `{kind}`, saved by onlstm {config.get('onlstm_version', '?')} "
        f"(`save_pretrained`): `{RunDir.CONFIG}`, `{RunDir.SHARED_WEIGHTS}` (weights, no pickled code) and "
        f"`{RunDir.VOCAB}`.\n\n## Use\n\n{usage.strip()}\n\n## Training\n\n{training}\n"
        + (f"## Results\n\n{yaml_block(results)}\n" if results else "")
        + f"## Configuration\n\n{yaml_block({'model': config.get('model')})}"
    )


def simple_yaml(data: Any, indent: int = 0) -> str:
    """JSON-like data (dicts, lists, strings, numbers, booleans, None) as block YAML, with JSON's notation for
    scalars and lists of scalars (valid YAML): the card is written without pyyaml, which is not a core package."""
    pad = " " * indent
    if isinstance(data, dict) and data:
        lines = []
        for key, value in data.items():
            nested = bool(value) if isinstance(value, dict) else isinstance(value, list) and not _flat(value)
            head = f"{pad}{json.dumps(str(key)) if _needs_quotes(str(key)) else key}:"
            lines.append(f"{head}\n{simple_yaml(value, indent + 2)}" if nested else f"{head} {simple_yaml(value)}")
        return "\n".join(lines)
    if isinstance(data, list) and not _flat(data):
        return "\n".join(f"{pad}- " + simple_yaml(item, indent + 2).lstrip() for item in data)
    if isinstance(data, float) and not math.isfinite(data):  # JSON's NaN and Infinity are not YAML's
        return pad + {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}[str(data)]
    return pad + json.dumps(data)


def _flat(items: list) -> bool:
    return not any(isinstance(item, (dict, list)) for item in items)


def _needs_quotes(key: str) -> bool:
    return not key or not all(c.isalnum() or c in "_-." for c in key)
