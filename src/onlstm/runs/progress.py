"""The progress bar of every long command (training, evaluation, scoring, downloads, demos)."""

from __future__ import annotations

from typing import Any


def progress_bar(enabled: bool = True, **kwargs: Any):
    """A ``tqdm`` bar, shown only when ``enabled`` and its stream (stderr by default) is a terminal: in a
    log file or a CI log its carriage-return updates would pile up as one endless line. Every other
    keyword goes to ``tqdm``; the bar's methods work the same when it is hidden."""
    from tqdm import tqdm

    return tqdm(disable=None if enabled else True, **kwargs)
