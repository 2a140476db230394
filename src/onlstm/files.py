"""Every file a command writes goes through :func:`atomic_write`: written to a temporary name beside it and
renamed into place, so an interrupted or refused write never leaves a half-written file, and the file the
path held before (the last checkpoint, the last log) stays whole.

A write the OS refuses (the disk or a quota full, the file-size limit of ``ulimit -f``, a read-only file
system) is raised as one :class:`~onlstm.errors.WriteError` naming the file and the OS error, which the
``onlstm`` command prints on one line with exit status 4 (docs/cli.md, "Errors and exit codes"). No torch
here: the data generators use these writers too.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import WriteError


def _current_umask() -> int:
    # os.umask can only be read by setting it; set it straight back (the window is two system calls).
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write) -> None:
    """Call ``write(tmp_path)`` and move the result to ``path`` in one rename.

    An :class:`OSError` on the way (creating the folder or the temporary file, writing, renaming) is
    raised as a :class:`~onlstm.errors.WriteError` naming ``path``; the temporary file is removed and
    ``path`` keeps what it held. An error about another file (``write`` reading its source) passes as it is.

    The file gets the mode any new file gets (0666 less the umask: 0644 under the usual 022), not
    ``mkstemp``'s private 0600, so teammates on a shared server can read a run as they could before."""
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


def write_json(path: Path, obj: Any, indent: int = 2) -> None:
    def w(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=indent)
            f.write("\n")

    atomic_write(path, w)


def write_text(path: Path, text: str) -> None:
    """``path`` holds ``text`` (UTF-8), written atomically (:func:`atomic_write`)."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def save_figure(fig, path: Path, **savefig_options) -> Path:
    """Save a matplotlib figure atomically (:func:`atomic_write`), in the format ``path``'s suffix names
    (the temporary file's own suffix is ``.tmp``)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".") or "png"
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, **savefig_options))
    return path
