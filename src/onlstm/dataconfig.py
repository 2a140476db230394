"""One mixin for the typed configs (dataclasses) saved as JSON next to every checkpoint."""
from __future__ import annotations

from dataclasses import asdict, fields


class DictConfig:
    """``to_dict`` / ``from_dict`` for a dataclass; unknown fields are an error naming them.

    Subclasses set ``config_kind`` (e.g. ``"language-model"``), used in the error message.
    """

    config_kind = "config"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown {cls.config_kind} config fields {unknown}; known: {sorted(names)}")
        return cls(**d)
