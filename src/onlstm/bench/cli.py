"""``onlstm bench gpu``: the command's flags (the work is in :mod:`onlstm.bench.gpu`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import add_command, add_group, arg


def register(subparsers) -> None:
    """Add ``onlstm bench gpu`` to the top-level ``subparsers``."""
    sub = add_group(
        subparsers,
        "bench",
        "prove a device path in one command: bench gpu",
        "Measurements that prove a device path in one command.",
    )
    add_command(
        sub,
        "gpu",
        _cmd_gpu,
        arg("--out", type=Path, required=True, help="folder for report.md and report.json"),
        arg("--smoke", action="store_true", help="CPU tensors, Triton's interpreter, tiny sizes (~1 minute)"),
        arg("--lm-data", type=Path, help="PTB-layout folder for lm train (default: a generated corpus)"),
        arg("--logic-data", type=Path, help="train{k} files for logic train (default: generated)"),
        arg("--syneval-data", type=Path, help="syneval pairs (needs --lm-data; default: generated)"),
        arg(
            "--work",
            type=Path,
            help="keep the runs and data in a new folder in here (default: a temporary folder, removed at the end)",
        ),
        arg("--skip", nargs="+", default=[], metavar="SECTION", help="leave out: correctness, pytest, speed, training"),
        arg("--lm-steps", type=int, help="lm train steps per implementation (default 200; --smoke 3)"),
        arg("--logic-steps", type=int, help="logic train updates (default 500; --smoke 3)"),
        arg("--pytest-timeout", type=float, default=900.0, help="seconds for pytest -m cuda (default 900)"),
    )


def _cmd_gpu(args: argparse.Namespace) -> int:
    """the CUDA path: correctness, tests, speed, training -> DIR/report.md and report.json

    Check and time the CUDA path on this machine's GPU in one run (about 10 minutes on one H100, no network):
    the Triton kernel against the reference loop, `pytest -m cuda`, forward+backward speed against the
    reference loop and cuDNN, and lm train / logic train / syneval timed. Writes DIR/report.md and
    DIR/report.json; exit status 1 when a check failed. --smoke runs the same code on the CPU under Triton's
    interpreter at tiny sizes (no GPU figure). docs/cli.md, `onlstm bench gpu`.
    """
    from .gpu import run

    return run(args)
