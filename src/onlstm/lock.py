"""One command at a time per folder (:class:`RunLock`): a training's run directory, a study's folder (``lm
compare``), the demo's; on the kernel's ``flock`` (docs/design.md §4.6, "The lock"; docs/cli.md, "Locks")."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from .errors import RunDirError, WriteError, quote
from .files import remove_leftovers
from .saved import RunFiles

try:
    import fcntl
except ImportError:  # Windows: no flock; the lock file's presence is the lock (RunLock)
    fcntl = None  # type: ignore[assignment]


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


def live_holder(run_dir: str | Path) -> str | None:
    """Who holds ``run_dir``'s lock now, in words, when a live process does (the kernel's lock is held); None when
    none does, or where nothing can tell (no lock file, no ``flock``)."""
    try:
        fd = os.open(RunFiles(run_dir).lock_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if _flock(fd) is not False:
            return None
        owner = _read_owner(fd)
        return _who(owner) if owner else "a running process"
    finally:
        os.close(fd)  # closing releases a lock this call took


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
        self.path = RunFiles(run_dir).lock_path
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
