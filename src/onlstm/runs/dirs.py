"""Run directories (:class:`RunDir`: what a training does with its files: its header, what it holds, its output
check), the registry of run kinds, and one training at a time per directory (:class:`RunLock`); docs/design.md
§4.6. The files' names and opening a run are :mod:`onlstm.saved`'s, sharing a model :mod:`onlstm.sharing`'s."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checkpoint import CheckpointError, read_json
from ..errors import OnlstmError, WriteError, quote
from ..files import check_work_folder, remove_leftovers
from ..saved import RunFiles, json_dict

try:
    import fcntl
except ImportError:  # Windows: no flock; the lock file's presence is the lock (RunLock)
    fcntl = None  # type: ignore[assignment]


class RunDirError(OnlstmError, ValueError):
    """The run directory cannot be used as asked: it holds another run (or an interrupted one) without
    ``--resume``, it is locked by a training in progress, or its settings do not fit."""


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


class RunDir(RunFiles):
    """A run directory, the one place that knows what a training does with its files (docs/design.md §4.6); their
    names are :class:`~onlstm.saved.RunFiles`'."""

    # -- the header ---------------------------------------------------------------------------------
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
        status = (json_dict(self.results_path) or {}).get("status", header.get("status"))
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
        """Checked before any work as a training's output (:func:`onlstm.files.check_work_folder`): holding no run
        unless ``resume`` or a run of ``replace_kind`` (``logic compare`` retrains its own); a new run needs a new or
        empty directory (but for its lock, and the names in ``keep``: the demo's corpus). Nothing is created."""
        held = self.describe()
        replacing = held is not None and replace_kind is not None and self.kind == replace_kind
        options = {"command": command, "flag": flag, "ignore": (self.LOCK, *keep), "error": RunDirError}
        check_work_folder(self.path, held, resume=resume or replacing, **options)
        return self

    def lock(self, command: str, log: Callable[[str], None] | None = None, enabled: bool = True) -> RunLock:
        return RunLock(self.path, command, log, enabled)


def check_output_dir(path: str | Path, **options) -> Path:
    return RunDir(path).check_output(**options).path


def _flock(fd: int) -> bool | None:
    """Take the kernel's lock on ``fd`` without waiting: True when taken, False when a live process holds it, None
    where there is none (Windows, a file system without flock)."""
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


def _shown(value: object) -> str:
    """A value of a lock file in a message: a text as it is, anything else (a tampered file) quoted, both short."""
    return value[:80] if isinstance(value, str) else quote(value, 40)


def _who(owner: dict) -> str:
    try:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("started")))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, OSError):
        since = "?"
    who = f"pid {_shown(owner.get('pid'))} on host {_shown(owner.get('host'))}"
    return f"{who} ({_shown(owner.get('command', '?'))}, since {since})"


class RunLock:
    """The lock file held while a training writes into ``run_dir`` (docs/cli.md, "Locks"): the kernel's lock on it
    (``flock``), which the kernel releases however its holder ends (SIGKILL, a crash, a reboot), so a lock file no
    process holds is stale and taken over, whatever its JSON (the holder, named in messages) says. Where there is
    no ``flock`` the file's presence is the lock: one left behind is refused with the fix (delete it). ``log``
    reports a stale lock taken over and the temporary files of a killed writer removed. ``enabled=False``
    (non-main processes) does nothing. Release removes the file, and the directory when this lock created it and
    it is still empty."""

    def __init__(self, run_dir: str | Path, command: str, log: Callable[[str], None] | None = None, enabled=True):
        self.run_dir, self.command, self.enabled = Path(run_dir), command, enabled
        self.log: Callable[[str], None] = log or (lambda msg: None)
        self.path = RunDir(run_dir).lock_path
        self._created_dir = self.held = False
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        if not self.enabled:
            return self
        self._created_dir = not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            if not any(self._try_take() for _ in range(3)):  # a lock file removed by its holder meanwhile: again
                raise RunDirError(f"could not take the lock {self.path}; try again")
            self.held = True
            if removed := remove_leftovers(self.run_dir):
                shown = ", ".join(removed[:3]) + (f" and {len(removed) - 3} more" if len(removed) > 3 else "")
                self.log(
                    f"{self.run_dir}: removed {len(removed)} temporary file(s) of a writer that was killed ({shown})"
                )
        except BaseException:
            self._release_dir()
            raise
        return self

    def _try_take(self) -> bool:
        """One try: True when the lock is now this process's, False to look again; raises when it is in use."""
        fd, created = self._open()
        if fd is None:
            return False
        try:
            taken, owner, host = _flock(fd), _read_owner(fd), socket.gethostname()
            if not taken and (taken is False or not created):  # held, or without flock a file already there
                raise RunDirError(self._busy_message(owner, live=taken is False))
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if not same:  # released (removed) by its holder while this process looked
                os.close(fd)
                return False
            if owner.get("host", host) != host:
                raise RunDirError(self._busy_message(owner))  # its flock may not reach this host: not stale
            if not created:
                self.log(
                    f"{self.path}: stale lock of pid {_shown(owner.get('pid', '?'))} on this host "
                    f"({_shown(owner.get('command', '?'))}): the process that wrote it is no longer running (it "
                    "crashed or was killed); taking it over"
                )
            record = {"pid": os.getpid(), "host": host, "command": self.command, "started": time.time()}
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(record).encode("utf-8"), 0)
            except OSError as exc:  # a full disk: an empty lock file, unlocked, would be taken for a stale one
                self.path.unlink(missing_ok=True)
                raise WriteError(self.path, exc) from None
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

    def _busy_message(self, owner: dict, live: bool = False) -> str:
        if live:  # no record yet: its holder has only just taken it
            who = f": {_who(owner)}" if owner else f" (a running process holds {self.path})"
            return (
                f"{self.run_dir} is in use by another training{who}; wait for it to finish or stop it (Ctrl-C saves "
                "a resumable checkpoint), or choose another --out"
            )
        if not owner:
            return (
                f"{self.run_dir} is locked ({self.path} exists but cannot be read); if no training uses this "
                f"directory, delete {self.path} and run again"
            )
        if owner.get("host") == socket.gethostname():  # only where the file system has no flock
            why = "and without flock on this file system nothing tells whether it still runs"
        else:
            why = "which cannot be checked from this host"
        return (
            f"{self.run_dir} is locked by {_who(owner)}, {why}; if no training runs there any more, delete "
            f"{self.path} and run again, else choose another --out"
        )

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)  # before the kernel's lock goes: a waiting process then looks again
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
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
