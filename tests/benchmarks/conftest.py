"""Tests of the scripts in benchmarks/: that folder on the import path, as it is for a script run from there
(``python benchmarks/gpu_report.py`` imports its sections as ``gpu_bench``)."""

from __future__ import annotations

import sys

from support import REPO

if str(REPO / "benchmarks") not in sys.path:
    sys.path.insert(0, str(REPO / "benchmarks"))
