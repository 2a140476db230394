"""What every study (``lm compare``, ``logic compare``) checks of its grid and its folder before any work: each cell
and seed named once (:func:`check_named_once`), and an ``--out`` that is new, empty or the study's own
(:func:`check_study_folder`; docs/cli.md, "Outputs"); and when a measurement kept in its ``evals/`` still stands
(:func:`same_inputs`)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import InputError, OnlstmError
from ..files import LEFTOVER, check_output_folder, json_dict
from ..saved import RunFiles

#: The names a study gives its runs (``<cell>-seed<seed>``, a folder) and their logs (``<cell>-seed<seed>.log``).
RUN_NAME = re.compile(r"[\w.+-]+-seed\d+(\.log)?")


def check_named_once(flag: str, values: Sequence[object], error: type[OnlstmError] = InputError) -> None:
    """``values`` (a grid's cells or seeds) each given once, else an ``error`` naming ``flag``: a seed named twice
    would count one run as two seeds, and the verdict would rest on a fake second one."""
    if twice := sorted({str(v) for v in values if values.count(v) > 1}):
        raise error(f"{flag} gives {', '.join(twice)} more than once; name each once")


def check_study_folder(out: Path, command: str, kind: str, files: Sequence[str], folders: Sequence[str] = ()) -> None:
    """``--out`` of the study ``command``: new, empty, or the study's: its runs and their logs (:data:`RUN_NAME`), the
    lock of a training study, its ``folders`` and, with a ``compare.json`` of ``kind`` there (the study wrote it),
    its result ``files``. A folder holding anything else is the user's, refused before any work: the study would
    write its results over them."""
    check_output_folder(out)
    if not out.is_dir():
        return
    ours = (json_dict(out / "compare.json") or {}).get("kind") == kind
    names = [n for n in os.listdir(out) if n != RunFiles.LOCK and not LEFTOVER.fullmatch(n)]
    others = sorted(n for n in names if not (n in folders or RUN_NAME.fullmatch(n) or (ours and n in files)))
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        holds = ", ".join([*(f"{d}/" for d in folders), *files[:-1]]) + f" and {files[-1]}"
        raise InputError(
            f"--out {out} holds files {command} did not write ({shown}); choose a new or empty --out (a study's "
            f"folder holds its runs <cell>-seed<seed>, their logs, {holds})"
        )


def same_inputs(kept: object, inputs: dict) -> bool:
    """Whether a measurement kept with ``kept`` (what it read) stands for ``inputs``. A finished run kept without its
    weights (a study folder with its ``*.safetensors`` and resume files removed, to be stored or shared small) reads
    ``none`` for them: its kept measurements stand for the weights they name, since no other weights can be read
    there."""
    if isinstance(kept, dict) and inputs.get("weights") == "none":
        kept = {**kept, "weights": "none"}
    return kept == inputs
