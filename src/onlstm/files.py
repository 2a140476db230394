"""The one writer, :func:`atomic_write` (a temporary file renamed into place, so the file the path held before
stays whole), and JSON, text and figures through it; a refused write is one :class:`~onlstm.errors.WriteError`
(docs/cli.md, "Errors and exit codes"). No torch here: the data generators use it too."""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import InputError, OnlstmError, UserNote, WriteError


def _current_umask() -> int:
    # os.umask can only be read by setting it; set it straight back (the window is two system calls).
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write) -> None:
    """Call ``write(tmp_path)`` and move the result to ``path`` in one rename. An :class:`OSError` on the way is a
    :class:`~onlstm.errors.WriteError` naming ``path`` (unchanged); one about another file (``write`` reading its
    source) passes as it is. The mode is a new file's (0666 less the umask), not ``mkstemp``'s private 0600."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise WriteError(path, exc) from None
    os.close(fd)
    try:
        write(tmp)
        # after the write: a writer may replace the file (safetensors does) and bring back mkstemp's 0600
        os.chmod(tmp, 0o666 & ~_current_umask())
        os.replace(tmp, path)
    except WriteError:
        raise
    except OSError as exc:
        if exc.filename not in (None, tmp, str(path)):
            raise
        raise WriteError(path, exc) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


#: The names of the temporary files a writer killed mid-write (SIGKILL, a power cut) leaves behind: atomic_write's
#: own (``.NAME.`` and mkstemp's eight characters, ``.tmp``) and that of the safetensors writer inside it, which
#: writes ``.tmp`` and six letters or digits beside its target before its own rename.
LEFTOVER = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp|\.tmp[A-Za-z0-9]{6}")


def remove_leftovers(folder: str | Path) -> list[str]:
    """Remove from ``folder`` the regular files named as a killed writer's temporary files (:data:`LEFTOVER`);
    returns their names. Only while no other process can be writing there (a run directory whose lock is held)."""
    removed = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if LEFTOVER.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                try:
                    os.unlink(entry.path)
                except OSError:  # removed at the same moment, or not this user's to remove
                    continue
                removed.append(entry.name)
    return sorted(removed)


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket or other special file"


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (hex), read a MiB at a time: a second or so for a 500 MB corpus."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def sha256_files(paths: Iterable[Path], root: Path) -> str:
    """One SHA-256 (hex) of several files' bytes: each file by its path relative to ``root`` (``root`` itself, one
    file, by its name) and its :func:`sha256_file`, in path order. The same bytes under the same names give the same
    digest wherever ``root`` is (another spelling of the path, a copy); another byte or name gives another."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        name = path.name if path == root else path.relative_to(root)
        digest.update(f"{name}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def same_fingerprint(
    found: str,
    saved: object,
    key: str,
    *,
    source: object,
    run: object,
    what: str,
    fix: str,
    warn: Callable[[str], None],
    flag: str = "--resume",
) -> str:
    """``found``, the fingerprint (SHA-256) of the data a run reads from ``source`` (``what``: its training text, its
    training data); on resume (``saved``: the run's ``data`` header, None for a new run) it must be the one the run
    recorded under ``key``: other data, read without a word, would go on with other batches (and, for a logic run,
    another validation hold-out). Another fingerprint is an :class:`InputError` ending in ``fix``; a run written
    before fingerprints were recorded goes on with a warning (there is nothing to compare). ``flag``: what the user
    gave that led here, first in the message (a study checking its runs: ``--data-dir``)."""
    if saved is None:
        return found
    recorded = saved.get(key) if isinstance(saved, dict) else None
    if recorded is None:
        warn(
            f"warning: {run} records no fingerprint of its {what} (an older run); cannot check that {source} is the "
            f"{what.removeprefix('training ')} it was trained on"
        )
    elif recorded != found:
        raise InputError(
            f"{flag}: {source} is not the {what} of the run in {run} (sha256 {found[:12]}…, the run recorded "
            f"{str(recorded)[:12]}…); {fix}"
        )
    return found


def read_regular(
    path: str | Path, limit: int | None = None, error: type[OnlstmError] = InputError, give: str = "a file",
    os_errors: bool = False,
) -> bytes:  # fmt: skip
    """The bytes of ``path``, which must be a regular file (a link to one is followed) of at most ``limit`` bytes:
    the one way to read a file a user names. A FIFO, a device (``/dev/zero``) or a folder is refused at once: it is
    opened without blocking and checked on the open file, so nothing swapped in after a check is read. ``error``
    (one line naming the path and asking for ``give``) for all of these and for a file that cannot be read (with
    ``os_errors``, that one is the caller's ``OSError``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if os_errors:
            raise
        raise error(f"cannot read {path}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or (limit is not None and info.st_size > limit):
        os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path} is {_kind_of(info.st_mode)}, not a regular file; give {give}")
        raise error(f"{path} is {info.st_size:,} bytes, more than the {limit:,} that can be read")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(info.st_size + 1)  # read(n) reserves n bytes: the size, not the limit
        except OSError as exc:
            if os_errors:
                raise
            raise error(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > info.st_size:
        raise error(f"{path} grew while it was read; read it again once it is written")
    return data


def without_nonfinite(obj: Any) -> Any:
    """``obj`` with every NaN and infinity (in dicts, lists and tuples) as None: JSON has no such numbers, and
    ``json.dumps`` would write ``NaN``, which JSON readers refuse. null says "no value" (an empty region's mean)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: without_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [without_nonfinite(v) for v in obj]
    return obj


def json_text(obj: Any, indent: int | None = 2, **options: Any) -> str:
    """The one JSON writer of the commands (files and standard output): strict JSON, NaN and infinity as null."""
    return json.dumps(without_nonfinite(obj), indent=indent, allow_nan=False, **options)


def write_json(path: Path, obj: Any, indent: int = 2) -> None:
    write_text(path, json_text(obj, indent=indent) + "\n")


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


# -- a user's text, line by line -----------------------------------------------------------------------------------
# A line ends at "\n" (or "\r\n") only: str.splitlines and universal newlines also end one at a form feed, \v,
# \x1c-\x1e, NEL, U+2028/U+2029 or a lone \r, characters that sit inside lines of real text and must not add
# sentences or shift the line numbers that results are keyed by.


#: How the files users give are decoded: UTF-8, a leading byte-order mark (Windows editors write one) dropped, so
#: that it does not become part of the first word, label or header.
UTF8 = "utf-8-sig"


#: UTF-16's byte-order marks (little- and big-endian): what Windows editors save as "Unicode" starts with one.
UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")


def _convert_hint(head: bytes) -> str:
    """How to make UTF-8 of a file that is not: from UTF-16 where it starts with its mark, else from Latin-1."""
    if head.startswith(UTF16_MARKS):
        return "it is UTF-16 (it starts with UTF-16's byte-order mark); convert it, e.g. with iconv -f utf-16 -t utf-8"
    return "convert it to UTF-8, e.g. with iconv -f latin1 -t utf-8"


def _no_nul(where: object, text: str, first_line: int = 1) -> str:
    """``text``, unless it holds a NUL character: no text a user gives has one, while UTF-16 without its mark and a
    binary file decode as UTF-8 with them (every other byte of English in UTF-16), words no model knows."""
    nul = text.find("\x00")
    if nul >= 0:
        line = first_line + text.count("\n", 0, nul)
        raise InputError(
            f"{where}: line {line} holds a NUL byte, which text never has: a UTF-16 or binary file? give UTF-8 text "
            "(from UTF-16: iconv -f utf-16 -t utf-8)"
        )
    return text


def split_lines(text: str) -> list[str]:
    """``text``'s lines without their ends; a last line without ``"\\n"`` counts, a final ``"\\n"`` adds none. Text
    with carriage returns between its words and no line feed at all is one line, said in a note: the lines of an old
    Mac OS file end with a lone ``"\\r"``, and read as one they would silently become one long sentence."""
    if "\n" not in text and "\r" in text.rstrip("\r"):
        warnings.warn(
            "the text has carriage returns (\\r) but no line feed, so it is read as one line; if its lines end with "
            "\\r alone (an old Mac OS file), convert them: tr '\\r' '\\n' < IN > OUT",
            UserNote,
            stacklevel=2,
        )
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_text(path: str | Path) -> str:
    """A UTF-8 text file a user names, as it is: no newline translated (``Path.read_text`` turns a lone ``\\r`` into
    ``\\n``). What is not a regular file (a FIFO would never end, ``/dev/zero`` would fill the memory, a folder) and
    bytes that are not UTF-8 are an :class:`InputError` naming the file; a missing or unreadable one is the caller's
    ``OSError``. A byte-order mark that some editors write first is not text: it is dropped (:data:`UTF8`)."""
    data = read_regular(path, give="a text file", os_errors=True)
    try:
        return _no_nul(path, data.decode(UTF8))
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); {_convert_hint(data[:2])}"
        ) from None


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file (as :func:`split_lines`); the OS and decoding errors are the caller's."""
    return split_lines(read_text(path))


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 text file as :func:`read_lines` gives them, streamed (``\\n`` ends them, ``\\r\\n``
    too), each decoded on its own: bytes that are not UTF-8 are an :class:`InputError` naming their line and their
    offset in the file (a file decoded a block at a time knows neither). The OS errors are the caller's."""
    with open(path, "rb") as f:
        offset = 0
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode(UTF8)  # a byte-order mark dropped on any line: files joined with cat keep theirs
            except UnicodeDecodeError as e:
                raise InputError(
                    f"{path}: not UTF-8 text at line {lineno} ({e.reason} at byte {offset + e.start} of the file); "
                    + _convert_hint(raw[:2] if lineno == 1 else b"")
                ) from None
            offset += len(raw)
            yield _no_nul(path, line.removesuffix("\n").removesuffix("\r"), lineno)


def read_stdin_text() -> str:
    """Standard input as UTF-8 text, its newlines untranslated (read as bytes where it can be); a closed standard
    input is an :class:`InputError` (Python sets ``sys.stdin`` to None when the shell closed it, ``<&-``)."""
    stream = sys.stdin
    if stream is None or getattr(stream, "closed", False):
        raise InputError("standard input is closed; give the input as a file, or pipe it in")
    buffer = getattr(stream, "buffer", None)
    return buffer.read().decode(UTF8) if buffer is not None else stream.read().removeprefix("\ufeff")


def read_input(path: str | Path | None) -> str:
    """The text a command reads: the file ``path`` names (:func:`read_text`), or standard input for ``-`` or None;
    every problem one :class:`InputError` naming where it read."""
    where = "standard input" if path is None or str(path) == "-" else str(path)
    try:
        return _no_nul(where, read_stdin_text()) if where == "standard input" else read_text(path)  # type: ignore[arg-type]
    except UnicodeDecodeError as exc:  # read_text says it for files: standard input's bytes
        raise InputError(f"standard input is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise InputError(f"cannot read {where}: {exc.strerror or exc}") from None


def save_figure(fig, path: Path, **savefig_options) -> Path:
    """Save a matplotlib figure atomically, in the format of ``path``'s suffix (not the temporary file's)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".") or "png"
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, **savefig_options))
    return path


# -- who owns an output folder (docs/cli.md, "Output folders: what a command may replace") ----------------------
#: The file a command leaves in a folder it wrote as a whole: JSON with the kind of output and the names it wrote.
MARKER = ".onlstm-output.json"
#: Quoted names of a folder's entries in a refusal: a few, not the listing of a large folder.
_SHOWN = 3


#: The largest JSON file a run holds is its history (kilobytes); a larger one is not a run's.
MAX_JSON_BYTES = 256 << 20


def json_dict(path: Path, limit: int = MAX_JSON_BYTES) -> dict | None:
    """``path``'s JSON object: None when the file is missing, {} when it cannot be read, holds no object or is
    larger than ``limit`` bytes (a FIFO, a device or a huge file is none of ours)."""
    try:
        if not path.is_file() or path.stat().st_size > limit:
            return None if not path.exists() and not path.is_symlink() else {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def read_marker(folder: Path) -> dict | None:
    """The marker in ``folder`` (``{"kind": ..., "files": [...]}``), None when there is none or it is not one."""
    data = json_dict(Path(folder) / MARKER, 1 << 20) or {}
    return data if isinstance(data.get("kind"), str) and isinstance(data.get("files"), list) else None


def owned_by(folder: Path, kind: str) -> bool:
    """``folder`` holds a ``kind`` output written by a command, and nothing else: no file added since, and none
    changed (its size and time as the marker wrote them: a card the user edited is theirs)."""
    marker = read_marker(folder)
    if marker is None or marker["kind"] != kind:
        return False
    stamps = marker.get("stamps")
    changed = isinstance(stamps, dict) and any(
        _stamp(Path(folder) / str(n)) not in (None, s) for n, s in stamps.items()
    )
    return not changed and set(os.listdir(folder)) <= {MARKER, *map(str, marker["files"])}


def _stamp(path: Path) -> list[int] | None:
    """A regular file's size and modification time in nanoseconds (what a marker records); None for anything
    else, or nothing."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns] if stat.S_ISREG(st.st_mode) else None


def check_not_dangling(path: Path, flag: str) -> None:
    """``path`` is not a symbolic link to nothing (a folder made there would fail as an existing file)."""
    if path.is_symlink() and not path.exists():
        raise InputError(f"{flag} {path} is a symbolic link to nothing ({os.readlink(path)}); choose another {flag}")


def check_output_folder(path: str | Path, flag: str = "--out") -> Path:
    """An output directory ``path`` (created later if missing): not a file, not a link to nothing, and writable.
    Nothing is created."""
    path = Path(path)
    check_not_dangling(path, flag)
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path} is a file, not a directory; choose another {flag}")
    check_writable(path, flag)
    return path


def check_output_file(path: str | Path, flag: str = "--out") -> Path:
    """An output file (or file prefix) ``path``: not a directory, and its folder writable. Nothing is created."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag} {path} is a directory; give a file name (e.g. {path / 'out.txt'})")
    check_writable(path.parent if str(path.parent) else Path("."), flag)
    return path


def check_new_files(paths: Iterable[Path], flag: str, overwrite: bool) -> None:
    """The files a command is about to write, checked before any work: unless ``overwrite`` (``--overwrite``), none
    may be there already: it is the user's, or an earlier output, and either is replaced only when asked."""
    there = [str(p) for p in paths if p.exists() or p.is_symlink()]
    if there and not overwrite:
        verb = "exists" if len(there) == 1 else "exist"
        raise InputError(f"{' and '.join(there[:2])} {verb}; choose another {flag} or pass --overwrite")


def check_work_folder(
    path: str | Path,
    held: str | None,
    *,
    resume: bool = False,
    command: str = "",
    flag: str = "--out",
    ignore: tuple[str, ...] = (),
    error: type[OnlstmError] = InputError,
) -> Path:
    """A folder that a piece of work (a training) fills and may continue, checked before any work: a folder (new or
    not), writable; holding earlier work (``held``: it in words, else None) only to ``resume`` it (``command``: how);
    else new or empty but for the names in ``ignore`` and a killed writer's temporary files. Nothing is created;
    a refusal is an ``error``."""
    path = check_output_folder(path, flag)
    if held and not resume:
        raise error(
            f"{path} already holds a run; pass --resume to continue it"
            + (f" ({command} ... --resume)" if command else "")
            + f", or choose another {flag}, or delete the directory to start over (found: {held})"
        )
    if not held and not resume and path.is_dir():
        # a writer killed mid-write leaves its temporary files: the next one removes them, they are not the user's
        others = [n for n in os.listdir(path) if n not in ignore and not LEFTOVER.fullmatch(n)]
        if others:
            raise error(
                f"{flag} {path} is not empty and holds no run (it holds {_listing(others)}); a training writes its "
                f"files only into a new or empty directory: choose another {flag}"
            )
    return path


def check_writable(path: Path, flag: str) -> None:
    """``path`` (which may not exist yet) can be created: a file is created for real in its nearest existing
    ancestor (``os.access`` says yes to root on read-only mounts)."""
    base = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not base.is_dir():
        raise InputError(f"{flag} {path}: {base} is a file, not a directory; choose another {flag}")
    try:
        tempfile.TemporaryFile(dir=base).close()
    except OSError as exc:
        raise InputError(
            f"{flag} {path}: cannot write in {base} ({exc.strerror or exc}); choose a writable {flag}"
        ) from None


def _listing(names: list[str]) -> str:
    shown = ", ".join(repr(n[:60]) for n in sorted(names)[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def check_output_owner(
    path: str | Path,
    kind: str,
    *,
    overwrite: bool = False,
    flag: str = "--out",
    legacy: Any = None,
    overwrite_flag: str = "--overwrite",
    reads: Iterable[str | Path] = (),
) -> Path:
    """The ownership rule, checked before any work: ``path`` may receive a ``kind`` output when it does not exist,
    is an empty folder, holds an earlier ``kind`` output and nothing else (its marker, or ``legacy(path)`` for one
    written before markers), or ``overwrite`` says to replace it, and holds none of the paths the command ``reads``.
    Else an :class:`InputError` naming what is there."""
    path = Path(path)
    check_not_dangling(path, flag)
    check_outside(path, reads, flag)
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path} is a file, not a directory; choose another {flag}")
    check_writable(path.parent if path.exists() else path, flag)  # the new folder is made beside it
    if not path.exists() or overwrite:
        if overwrite and path.exists():
            _check_replaceable(path, flag, overwrite_flag)
        return path
    try:
        names = os.listdir(path)
    except OSError as exc:
        raise InputError(f"{flag} {path}: cannot read the folder ({exc.strerror}); choose another {flag}") from None
    if not names or owned_by(path, kind) or (legacy is not None and legacy(path)):
        return path
    raise InputError(
        f"{flag} {path} is not empty and was not written by this command (it holds {_listing(names)}); "
        f"choose a new or empty {flag}, or pass {overwrite_flag} to replace the whole folder"
    )


#: What an ``--overwrite`` (it replaces a folder as a whole) checks first: each guard gets the folder and answers
#: why it must not be deleted (a line), or None. :mod:`onlstm.saved` adds the one that keeps a training run at any
#: depth (hours of work; this module is below it, and cannot know a run's files).
REPLACE_GUARDS: list[Callable[[Path], str | None]] = []


def _check_replaceable(path: Path, flag: str, overwrite_flag: str = "--overwrite") -> None:
    # overwriting replaces the folder as a whole: never the root, the home folder or one holding the working folder
    real, cwd = path.resolve(), Path.cwd().resolve()
    if real == Path(real.anchor) or real == Path.home().resolve() or real == cwd or real in cwd.parents:
        raise InputError(f"{flag} {path}: {overwrite_flag} would replace {real}, which holds more than an output")
    for guard in REPLACE_GUARDS:
        if (why := guard(real)) is not None:
            raise InputError(
                f"{flag} {path}: {overwrite_flag} would delete {why}; move it out, or choose another {flag}"
            )


def check_outside(folder: str | Path, inputs, flag: str) -> None:
    """None of ``inputs`` (paths the command reads) lies inside ``folder``, which an ``--overwrite`` replaces as a
    whole: the command would delete what it read."""
    folder = Path(folder)
    if not folder.exists():
        return
    real = folder.resolve()
    for path in map(Path, inputs):
        if path.resolve().is_relative_to(real):
            raise InputError(f"{flag} {folder} holds {path}, which the command reads; choose a {flag} outside it")


def publish_folder(path: str | Path, kind: str, write) -> Path:
    """Write a multi-file output all at once: ``write(tmp)`` fills a new folder beside ``path``, which gets the
    marker and then takes ``path``'s place in one rename (the folder there before is kept until then, and removed
    after). An interruption or an error removes the new folder and leaves ``path`` as it was; a refused write is a
    :class:`~onlstm.errors.WriteError`. Check ``path`` first with :func:`check_output_owner`."""
    path = Path(path)
    target = path.resolve() if path.is_symlink() else path  # a link to a folder: the folder is replaced, not it
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_killed_writes(target)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.{_writer()}.", suffix=".tmp"))
    except OSError as exc:
        raise WriteError(path, exc) from None
    try:
        write(tmp)
        names = sorted(os.listdir(tmp))
        stamps = {n: s for n in names if (s := _stamp(tmp / n)) is not None}  # a rename keeps them
        write_json(tmp / MARKER, {"kind": kind, "files": names, "stamps": stamps})
        os.chmod(tmp, 0o777 & ~_current_umask())  # mkdtemp's folder is private
        _swap_into_place(tmp, target)
    except OSError as exc:  # a WriteError too: named by the file it would have been, not the temporary one
        name = None if exc.filename is None else Path(exc.filename)
        if name is None or name in (path, target):  # the swap itself
            raise WriteError(path, exc) from None
        if not name.is_relative_to(tmp):
            raise  # about another file (a source read): not a refused write
        raise WriteError(path / name.relative_to(tmp), exc) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def add_files(folder: str | Path, write) -> list[Path]:
    """Add several files to ``folder`` (which may hold others: they stay) as one result: ``write(tmp)`` makes them in
    a hidden folder inside it, and they are renamed into place only once all are written. A refused write (a
    :class:`~onlstm.errors.WriteError`) or an interruption leaves ``folder`` as it was (made now: removed)."""
    folder = Path(folder)
    made = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder, prefix=".onlstm-", suffix=".tmp"))
    except OSError as exc:
        raise WriteError(folder, exc) from None
    try:
        write(tmp)
        names = sorted(os.listdir(tmp))
        for name in names:
            os.replace(tmp / name, folder / name)
        return [folder / name for name in names]
    except OSError as exc:
        name = None if exc.filename is None else Path(exc.filename)
        if name is not None and not name.is_relative_to(tmp) and not name.is_relative_to(folder):
            raise  # about another file (a source read): not a refused write
        raise WriteError(folder / name.name if name is not None else folder, exc) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if made and folder.exists() and not os.listdir(folder):
            folder.rmdir()


def _writer() -> str:
    """This process as the writer of a new folder's name: host and pid (no dots: the name's fields)."""
    return f"{socket.gethostname().replace('.', '_')}-{os.getpid()}"


def _remove_killed_writes(target: Path) -> None:
    """Remove the half-written folders ``.NAME.HOST-PID.*.tmp`` beside ``target`` whose writer, on this host, no
    longer runs: only a kill -9 or a power cut leaves one (every other end removes its own), and nothing else would
    ever remove it. Another host's, or a live writer's, is left alone."""
    if os.name != "posix":
        return  # os.kill(pid, 0) would end the process elsewhere
    for leftover in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        host, _, pid = leftover.name[len(target.name) + 2 :].split(".", 1)[0].rpartition("-")
        if host != _writer().rpartition("-")[0] or not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            pass  # alive, another user's


def _swap_into_place(new: Path, target: Path) -> None:
    """``new`` renamed to ``target``; a folder already there is renamed aside first and removed once ``new`` is in
    place (a crash between the two renames leaves it as ``.NAME.*.old``, whole)."""
    if not target.exists():
        os.rename(new, target)
        return
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old"))
    os.rmdir(old)  # only the name is wanted: rename needs an empty or absent destination
    os.rename(target, old)
    try:
        os.rename(new, target)
    except OSError:
        os.rename(old, target)  # put the old one back
        raise
    shutil.rmtree(old, ignore_errors=True)
