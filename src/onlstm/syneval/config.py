"""Settings of ``onlstm syneval`` (flags and the ``syneval:`` section of a YAML file)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Runtime, option


@dataclass
class SynevalConfig(Runtime):
    section = "syneval"
    config_kind = "syntactic-evaluation config"

    word_only: bool = option(False, "compare only the log-probability of the first word where the two sentences differ")
    batch_size: int = option(
        2048, "sentences scored together (one prefix tree, or one padded batch; no effect on scores)", ge=1
    )
    share_prefixes: bool = option(
        True, "run each distinct sentence prefix once (a prefix tree); --no-share-prefixes: right-padded batches"
    )
    weights: str = option(
        "best", "which weights of a run directory (best: the last while the run has no best)", choices=("best", "last")
    )
