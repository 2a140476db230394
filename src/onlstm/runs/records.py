"""Checks of the JSON values a run reads back from its own files (the resume file's metadata, ``history.json``): a
damaged or tampered file is refused on one line naming the file, the value and the fix, before training goes on,
instead of a traceback later or a silent continuation from nonsense. A field's kind is one of the names below."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..checkpoint import CheckpointError, read_json
from ..errors import cap

#: The kinds of value: a count (an int from 0 to :data:`MAX_COUNT`), a finite number, a number that may be NaN or
#: infinite (a validation loss that was not finite is recorded as such), a flag, ``{name: finite number}``, a
#: finite number or None, a JSON object (or None), a list of numbers, of counts, the state of ``random.Random``.
COUNT, NUMBER, REAL, FLAG, SCORES, MAYBE_NUMBER, OBJECT, MAYBE_OBJECT, REALS, COUNTS, RNG_STATE = (
    "count number real flag scores maybe-number object maybe-object reals counts rng-state".split()
)
#: No count of a run (steps, epochs, tokens) comes near this; a larger one is a tampered file, not a long run.
MAX_COUNT = 2**53

#: The fields of :class:`onlstm.runs.engine.Progress` (kept here, not imported: the engine is the reader's user).
PROGRESS_FIELDS = dict(step=COUNT, epoch=COUNT, pos=COUNT, best=MAYBE_NUMBER, best_step=COUNT, bad_checks=COUNT)
PROGRESS_FIELDS.update(seconds=NUMBER, n_checks=COUNT, check_due=FLAG, task=OBJECT)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _rng_state(value: Any) -> bool:
    try:
        version, internal, gauss = value
        random.Random().setstate((version, tuple(internal), gauss))
    except (TypeError, ValueError, OverflowError):
        return False
    return True


#: Each kind's test of a value and what it must be, in words.
_VALID = {
    COUNT: (
        lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT,
        "a whole number from 0 to 2**53",
    ),
    NUMBER: (_finite, "a finite number"),
    REAL: (lambda v: v is None or _is_number(v), "a number or null"),  # null: NaN as JSON writes it (files.json_text)
    FLAG: (lambda v: isinstance(v, bool), "true or false"),
    SCORES: (
        lambda v: isinstance(v, dict) and all(k.isdigit() and _finite(x) for k, x in v.items()),
        "an object of finite numbers by count",
    ),
    MAYBE_NUMBER: (lambda v: v is None or _finite(v), "a finite number or null"),
    OBJECT: (lambda v: isinstance(v, dict), "an object"),
    MAYBE_OBJECT: (lambda v: v is None or isinstance(v, dict), "an object or null"),
    REALS: (lambda v: isinstance(v, list) and all(_is_number(x) for x in v), "a list of numbers"),
    COUNTS: (lambda v: isinstance(v, list) and all(_VALID[COUNT][0](x) for x in v), "a list of counts"),
    RNG_STATE: (_rng_state, "a random generator's state"),
}


def problem(
    obj: Any, fields: Mapping[str, str], what: str, exact: bool = False, required: tuple[str, ...] | None = None
) -> str:
    """Why ``obj`` is not a JSON object with ``fields`` (``{name: kind}``; ``exact``: those and no others;
    ``required``: only these must be there, the others are checked when they are), "" if it is. ``what`` names the
    object in the answer ("progress", "history record 3")."""
    if not isinstance(obj, dict):
        return f"{what} is {type(obj).__name__}, not an object"
    missing = [k for k in (fields if required is None else required) if k not in obj]
    if missing:
        return f"{what} lacks {', '.join(missing[:3])}"
    if exact and (extra := sorted(set(obj) - set(fields))):
        return f"{what} has unknown fields ({', '.join(map(str, extra[:3]))})"
    for name, kind in fields.items():
        if name in obj and not _VALID[kind][0](obj[name]):
            return f"{what}.{name} is {cap(repr(obj[name]), 60)}, not {_VALID[kind][1]}"
    return ""


def check_fields(
    obj: Any,
    fields: Mapping[str, str],
    path: Path,
    what: str,
    fix: str,
    exact: bool = False,
    required: tuple[str, ...] | None = None,
) -> None:
    """:func:`problem` as a :class:`~onlstm.checkpoint.CheckpointError` naming the file ``path`` and ``fix``."""
    if why := problem(obj, fields, what, exact, required):
        raise CheckpointError(f"{path} is damaged or was edited: {why}; {fix}")


def check_history(
    records: Any, fields: Mapping[str, str], required: tuple[str, ...], path: Path, fix: str, at_least: int = 0
) -> list[dict]:
    """``records``, a run's validation history, checked: a list of at least ``at_least`` objects with the
    ``required`` fields, each of ``fields`` there of its kind (older runs recorded fewer)."""
    if not isinstance(records, list):
        raise CheckpointError(f"{path} is damaged or was edited: the history is not a list; {fix}")
    if len(records) < at_least:
        raise CheckpointError(
            f"{path} is damaged or was edited: it holds {len(records)} validation checks, the resume file "
            f"counts {at_least}; {fix}"
        )
    for k, record in enumerate(records):
        if why := problem(record, fields, f"history record {k + 1}", required=required):
            raise CheckpointError(f"{path} is damaged or was edited: {why}; {fix}")
    return records


def read_history(
    path: Path, fields: Mapping[str, str], required: tuple[str, ...], fix: str, at_least: int = 0
) -> list[dict]:
    """``history.json`` at ``path``, checked with :func:`check_history`."""
    return check_history(read_json(path), fields, required, path, fix, at_least)
