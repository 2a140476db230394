"""Run directories: output paths checked before any work, and one training at a time per directory."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import InputError, OnlstmError, WriteError

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
            try:
                created = self._try_create()
            except WriteError:
                self._release_dir()
                raise
            if created:
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
        except OSError as exc:
            raise WriteError(self.path, exc) from None
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
        except OSError as exc:  # a full disk: an empty lock would block the next run, so take it away again
            self.path.unlink(missing_ok=True)
            raise WriteError(self.path, exc) from None
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
