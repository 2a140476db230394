"""Shared fixtures and markers. Tests are laid out like src/onlstm (tests/nn, tests/lm, ...); helpers that
several test modules need live in support.py next to this file."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _restore_threads():
    """Commands set torch's thread count for the process; give every test the count it started with."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.cuda`` tests run only where a CUDA device is visible."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
