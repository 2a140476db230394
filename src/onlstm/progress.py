"""The progress bar every command shows (a download, an evaluation, a training): below ``runs/``, so that the data
readers and the models show it without the training runtime."""

from __future__ import annotations

from typing import Any


def progress_bar(enabled: bool = True, **kwargs: Any):
    """A ``tqdm`` bar (keywords go to ``tqdm``), shown only when ``enabled`` and its stream is a terminal: in a
    log file its carriage-return updates would pile up as one endless line. A hidden bar's methods still work."""
    from tqdm import tqdm

    return tqdm(disable=None if enabled else True, **kwargs)
