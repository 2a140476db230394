"""The one writer, :func:`atomic_write` (a temporary file renamed into place, so the file the path held before
stays whole), and JSON, text and figures through it; a refused write is one :class:`~onlstm.errors.WriteError`
(docs/cli.md, "Errors and exit codes"). No torch here: the data generators use it too."""

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


def write_json(path: Path, obj: Any, indent: int = 2) -> None:
    write_text(path, json.dumps(obj, indent=indent) + "\n")


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def save_figure(fig, path: Path, **savefig_options) -> Path:
    """Save a matplotlib figure atomically, in the format of ``path``'s suffix (not the temporary file's)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".") or "png"
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, **savefig_options))
    return path
