"""The step section with each row in a process of its own, the report's default on CUDA.

A kernel that reads or writes out of bounds ends the CUDA context of its process ("an illegal memory access was
encountered"), and every later call in that process fails too. Measured in the report's own process, one faulty
row took the whole report down with it (an H200, 4 December 2026: the step section, then nothing). Here a child
process measures one variant beside cuDNN's two eager rows, so each ratio is still taken in one process, and a
child that dies makes its own row a failure with the error line; the report goes on. A dead child is run once
more with ``CUDA_LAUNCH_BLOCKING=1``, so the error is raised at the launch that caused it, and the row names
where that was.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from . import step
from .layer import Shape

BENCHMARKS = str(Path(__file__).resolve().parents[1])
CHILD_TIMEOUT = 240.0  # seconds: a compiled row compiles twice (forward, backward) before its graphs record
CHILD = (
    "import json, sys; sys.path[:0] = [{bench!r}]; from gpu_bench.isolate import child; "
    "print(json.dumps(child(json.loads(sys.argv[1]))))"
)
ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt)\b.*")
OUR_FRAME = re.compile(r'^\s*File "[^"]*/(onlstm|gpu_bench)/([^"]+)", line (\d+), in (\w+)')


def measure(
    shape: Shape, kernel: str, device: torch.device, repeats: int, compiled: bool = False
) -> tuple[list[dict], list[dict]]:
    """``step.measure``'s rows and checks, each variant measured in a child process beside cuDNN's eager rows
    (those rows from a child of their own)."""
    baselines = tuple(v for v in step.VARIANTS if v.model == step.BASELINE)
    rows, checks = [], []
    for v in (None, *(v for v in step.VARIANTS if v not in baselines and (compiled or not v.compiled))):
        spec = {"shape": list(shape), "kernel": kernel, "device": str(device), "repeats": repeats,
                "compiled": compiled, "variant": None if v is None else step.VARIANTS.index(v)}  # fmt: skip
        got = run_child(spec)
        if "rows" in got:
            rows += [r for r in got["rows"] if (r["model"] == step.BASELINE) == (v is None)]
            checks += got["checks"]
            continue
        for w in baselines if v is None else (v,):
            where = f"; raised at {got['where']}" if got.get("where") else ""
            rows.append(step.row_of(shape, w) | {"error": got["error"] + where})
            if w.graph or w.compiled:
                checks.append({"name": f"{w.name} replays the eager step", "passed": False, "worst": got["error"]})
    return rows, checks


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child: the rows and checks of cuDNN's eager rows and the variant ``spec['variant']`` (an index of
    ``step.VARIANTS``; None: cuDNN's rows alone)."""
    from onlstm.nn import kernels
    from onlstm.nn import triton_kernel as tk

    if spec["kernel"] == tk.INTERPRETER_NAME and spec["kernel"] not in kernels.kernel_names():
        tk.register_interpreter_kernel()  # the report registered it in its own process only
    index = spec["variant"]
    variants = tuple(v for i, v in enumerate(step.VARIANTS) if v.model == step.BASELINE or i == index)
    shape = tuple(spec["shape"])
    rows, checks = step.measure(shape, spec["kernel"], torch.device(spec["device"]), spec["repeats"],
                                spec["compiled"], variants)  # fmt: skip
    return {"rows": rows, "checks": checks}


def run_child(spec: dict[str, Any], command: list[str] | None = None) -> dict[str, Any]:
    """The child's answer, or ``{"error": line, "where": frames}`` when it died, timed out or said nothing."""
    command = command or [sys.executable, "-c", CHILD.format(bench=BENCHMARKS), json.dumps(spec)]
    done = _run(command, {})
    if isinstance(done, dict):
        return done
    again = _run(command, {"CUDA_LAUNCH_BLOCKING": "1"})  # the error then names the launch that caused it
    where = again[1] if isinstance(again, tuple) else None
    return {"error": done[0], "where": where}


def _run(command: list[str], extra_env: dict[str, str]) -> dict[str, Any] | tuple[str, str | None]:
    try:
        p = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT, env=os.environ | extra_env)
    except subprocess.TimeoutExpired:
        return f"its process timed out after {CHILD_TIMEOUT:g} s", None
    last = p.stdout.strip().splitlines()[-1:] if p.returncode == 0 else []
    if last and last[0].startswith("{"):
        return json.loads(last[0])
    return _failure(p.returncode, p.stderr)


def _failure(returncode: int, stderr: str) -> tuple[str, str | None]:
    """The error line of a dead child (the last ``...Error: ...`` line, else its last line) and the last two of
    our frames in its traceback."""
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if ERROR_LINE.match(line)]
    said = (errors or lines or ["(nothing on stderr)"])[-1]
    frames = [f"{m[1]}/{m[2]}:{m[3]} {m[4]}" for m in map(OUR_FRAME.match, lines) if m]
    return f"its process ended (exit status {returncode}): {said[:300]}", " < ".join(frames[-2:][::-1]) or None
