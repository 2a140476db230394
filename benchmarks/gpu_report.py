"""The proof of the CUDA path in one command (issues #22, #49): the Triton kernel against the reference loop (its
split and fused steps), the step timed every way it can run (split, fused, each eager and as a CUDA graph, TF32 off
and on) against cuDNN, ``pytest -m cuda``, forward+backward speed against the reference loop and cuDNN, and the
experiments' training timed, written to DIR/report.md and DIR/report.json (docs/layer.md, "The GPU report"):

    python benchmarks/gpu_report.py --out DIR            # on a CUDA GPU: planned to take under 8 minutes, no network
    python benchmarks/gpu_report.py --out DIR --smoke    # the same code on CPU tensors in Triton's interpreter

Exit status 0, or 1 when a check failed, or 2 (one line) when it cannot run here, 4 (one line) when the disk
refuses a write of the report (the one there before is kept whole), 130 on Ctrl-C (the sections finished kept). :func:`run` measures the
sections (``gpu_bench``: layer, environment, training) and writes the report (``gpu_bench.report``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from bench_cli import command, parser
from gpu_bench import environment, isolate, layer, report, step, training
from gpu_bench.layer import Shape
from onlstm import graphs as shared_graphs
from onlstm.errors import EXIT_FINDING, InputError
from onlstm.nn import kernels, selfcheck
from onlstm.nn import triton_kernel as tk

PAPER_LAYER: Shape = (70, 20, 400, 1150, 10)  # the paper's language-model layer (docs/lm.md)
PYTEST_TIMEOUT = 900.0  # seconds for pytest -m cuda unless --pytest-timeout
CPU_TABLE: tuple[Shape, ...] = ((70, 20, 400, 650, 10), (70, 80, 400, 1150, 10), (35, 20, 200, 200, 10))


@dataclass(frozen=True)
class Profile:
    """The sizes of one run: a GPU's, or the smoke run's tiny ones (same code either way)."""

    smoke: bool
    device: torch.device
    kernel: str  # the impl name of the Triton kernel here
    small: Shape  # the correctness cases
    large: Shape  # the paper's layer (a stand-in under --smoke)
    speed_shapes: tuple[Shape, ...]
    step_shapes: tuple[Shape, ...]  # the step section's (the last one: its goals)
    repeats: int
    lm_vocab: int
    lm_step_tokens: int  # tokens of one training step (batch x bptt), to size a synthetic corpus
    logic_per_length: int
    logic_max_ops: int  # of the generated formulas (validation scores every length up to it)
    syneval_items: int
    steps: tuple[int, int]  # lm train steps, logic train updates (unless --lm-steps/--logic-steps)
    lm_flags: tuple[str, ...] = ()
    logic_flags: tuple[str, ...] = ()


GPU = Profile(
    smoke=False,
    device=torch.device("cuda"),
    kernel="triton",
    small=(7, 5, 16, 40, 4),  # 10 chunks: not a power of two, so the kernels' masks are exercised
    large=PAPER_LAYER,
    speed_shapes=(*CPU_TABLE, PAPER_LAYER),
    step_shapes=((70, 80, 400, 1150, 10), PAPER_LAYER),
    repeats=10,
    lm_vocab=training.PTB_VOCAB,
    lm_step_tokens=20 * 70,
    logic_per_length=12,
    logic_max_ops=6,
    syneval_items=2000,
    steps=(200, 500),  # issue #22's budget
)
SMOKE = Profile(
    smoke=True,
    device=torch.device("cpu"),
    kernel="triton_interpret",
    small=(4, 3, 3, 6, 2),
    large=(5, 2, 4, 8, 2),
    speed_shapes=((3, 2, 3, 4, 2), (5, 2, 4, 8, 2)),
    step_shapes=((5, 2, 4, 8, 2),),
    repeats=1,
    lm_vocab=30,
    lm_step_tokens=2 * 5,
    logic_per_length=12,
    logic_max_ops=2,  # the interpreter runs every row of every step (one program a row): long formulas cost most
    syneval_items=4,
    steps=(3, 2),  # logic: a recorded update and a replayed one
    lm_flags=tuple(
        "--emb-size 8 --hidden-sizes 8 --chunk-size 2 --batch-size 2 --eval-batch-size 2 "
        "--bptt 5 --bptt-std 0 --min-seq-len 2".split()
    ),
    logic_flags=tuple(
        "--emb-size 8 --hidden-size 8 --chunk-size 2 --mlp-hidden 8 --batch-size 2 --eval-batch-size 8 "
        "--max-train-ops 1".split()  # formulas of <= 7 tokens: the graphs' padded block is 8 x 4 rows
    ),
)


def build_parser() -> argparse.ArgumentParser:
    ap = parser(__doc__)
    ap.add_argument("--out", type=Path, required=True, help="folder for report.md and report.json")
    ap.add_argument("--smoke", action="store_true", help="CPU tensors, Triton's interpreter, tiny sizes (~1 minute)")
    ap.add_argument("--lm-data", type=Path, help="PTB-layout folder for lm train (default: a generated corpus)")
    ap.add_argument("--logic-data", type=Path, help="train{k} files for logic train (default: generated)")
    ap.add_argument("--syneval-data", type=Path, help="syneval pairs (needs --lm-data; default: generated)")
    ap.add_argument(
        "--work",
        type=Path,
        help="keep the runs and data in a new folder in here (default: a temporary folder, removed at the end)",
    )
    ap.add_argument("--skip", nargs="+", default=[], metavar="SECTION", help="leave out: " + ", ".join(report.SECTIONS))
    ap.add_argument("--lm-steps", type=int, help="lm train steps per implementation (default 200; --smoke 3)")
    ap.add_argument("--logic-steps", type=int, help="logic train updates (default 500; --smoke 2)")
    ap.add_argument(
        "--pytest-timeout", type=float, default=PYTEST_TIMEOUT, help="seconds for pytest -m cuda (default 900)"
    )
    return ap


@command(interrupted="interrupted (the report holds the sections finished before)")
def main(argv: list[str] | None = None) -> int:
    """Run the report; a problem with the input or this machine is one line on stderr (exit status 2; 4 when
    the disk refuses a write of the report)."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Measure, write DIR/report.md and DIR/report.json, print where; 0 if no check failed, else 1."""
    start = time.perf_counter()
    prof = _preflight(args)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create it ({exc.strerror or exc})") from None
    result: dict[str, Any] = {
        "title": "benchmarks/gpu_report.py" + (" --smoke" if prof.smoke else ""),
        "smoke": prof.smoke,
        "command": _command(args),
        "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "environment": environment.describe(prof.device),
    }
    with _kernel_setup(prof), _work_dir(args.work) as folder:
        work = Path(folder)
        ok = kernels.load_kernel(prof.kernel) is not None
        where = "CPU tensors, Triton's interpreter" if prof.smoke else "CUDA"
        result["kernel"] = {"name": f"the Triton kernel loads ({where})", "passed": ok}
        result["kernel"]["worst"] = kernels.kernel_error(prof.kernel)
        for name in report.SECTIONS:  # the report is written after every one: a run cut short leaves what it measured
            result[name] = _section(name, prof, args, work, ok)
            report.write(out, result, time.perf_counter() - start)
    s = report.write(out, result, time.perf_counter() - start)
    smoke = " (smoke: no GPU figure)" if prof.smoke else ""
    print(
        f"wrote {out / 'report.md'} and report.json: {s['passed']} checks passed, {s['failed']} failed, "
        f"{s['not_run']} not run, in {time.perf_counter() - start:.0f} s{smoke}"
    )
    return EXIT_FINDING if s["failed"] else 0


def _command(args: argparse.Namespace) -> str:
    """The command line that gives these options (for the report)."""
    words = ["python", "benchmarks/gpu_report.py", "--out", str(args.out)] + ["--smoke"] * args.smoke
    for name in ("lm_data", "logic_data", "syneval_data", "work", "lm_steps", "logic_steps"):
        if getattr(args, name) is not None:
            words += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.pytest_timeout != PYTEST_TIMEOUT:  # the default is left out, as the other options' are
        words += ["--pytest-timeout", f"{args.pytest_timeout:g}"]
    return shlex.join(words + (["--skip", *args.skip] if args.skip else []))


def _section(name: str, prof: Profile, args: argparse.Namespace, work: Path, kernel_ok: bool) -> dict[str, Any]:
    if name in args.skip:
        return {"not_run": "--skip " + name}
    if not kernel_ok and name != "pytest":
        return {"not_run": "the Triton kernel is unavailable (see above)"}
    start = time.perf_counter()
    half = torch.bfloat16 if prof.device.type != "cuda" or torch.cuda.is_bf16_supported() else None
    step_rows = isolate.measure if prof.device.type == "cuda" else step.measure  # a crash on CUDA fails one row
    measure = {
        "correctness": lambda: {"checks": layer.correctness(prof.kernel, prof.device, prof.small, prof.large, half)},
        "step": lambda: step.step_section(prof.step_shapes, prof.kernel, prof.device, 2 * prof.repeats, step_rows),
        "pytest": lambda: environment.pytest_cuda(prof.smoke, work / "pytest-cuda.xml", args.pytest_timeout),
        "speed": lambda: layer.speed(prof.speed_shapes, prof.kernel, prof.device, prof.repeats, half),
        "training": lambda: training.training_runs(prof, args, work),
    }[name]
    # correctness and speed measure the kernel itself; its self-check is reported on its own
    with mock.patch.dict(os.environ, {selfcheck.ENV: "0"} if name in ("correctness", "step", "speed") else {}):
        return measure() | {"seconds": round(time.perf_counter() - start, 1)}


def _preflight(args: argparse.Namespace) -> Profile:
    """The profile of this run, or a one-line error when it cannot run here."""
    bad = [s for s in args.skip if s not in report.SECTIONS]
    if bad:
        raise InputError(f"--skip: unknown section {bad[0]!r}; choose from {', '.join(report.SECTIONS)}")
    if args.syneval_data is not None and args.lm_data is None:
        raise InputError("--syneval-data needs --lm-data: the language model's vocabulary must cover its sentences")
    for flag, value in (("--lm-steps", args.lm_steps), ("--logic-steps", args.logic_steps)):
        if value is not None and value < 2:
            raise InputError(f"{flag} must be at least 2 (the first step is a warm-up), got {value}")
    if not args.pytest_timeout > 0:  # also NaN: subprocess would wait forever or fail at once
        raise InputError(f"--pytest-timeout must be a positive number of seconds, got {args.pytest_timeout:g}")
    if args.smoke:
        if not tk.triton_installed():
            raise InputError(
                "--smoke runs the Triton kernel in Triton's CPU interpreter: install triton (pip install triton)"
            )
        if "triton" not in sys.modules:
            os.environ["TRITON_INTERPRET"] = "1"  # read by Triton once, at its first import
        try:
            tk.load_interpreter_kernel()
        except kernels.KernelUnavailable as exc:
            raise InputError(f"--smoke: the Triton kernel cannot run in the interpreter here: {exc}") from None
        return SMOKE
    if not torch.cuda.is_available():
        raise InputError(
            f"no CUDA device is visible (torch {torch.__version__}, CUDA build {torch.version.cuda}); "
            "`python benchmarks/gpu_report.py --smoke --out DIR` runs the same code on the CPU in Triton's interpreter"
        )
    if tk.interpreter_requested():
        raise InputError("TRITON_INTERPRET=1 is set: Triton would interpret its kernels on the CPU; unset it")
    return GPU


@contextlib.contextmanager
def _kernel_setup(prof: Profile) -> Iterator[None]:
    """Under --smoke: the interpreted kernel registered, and first for ``impl='auto'`` on the CPU, and lm train's
    graphs on the CPU too, their recorder the eager stand-in (restored after)."""
    registered, graph_devices = prof.kernel in kernels.kernel_names(), shared_graphs.GRAPH_DEVICES
    if prof.smoke:
        tk.register_interpreter_kernel(priority=1000)
        shared_graphs.GRAPH_DEVICES = (*graph_devices, "cpu")
    try:
        yield
    finally:
        shared_graphs.GRAPH_DEVICES = graph_devices
        if prof.smoke:
            kernels.unregister_kernel(prof.kernel)
            if registered:
                tk.register_interpreter_kernel()  # as it was: its own priority, below every CPU kernel


def _work_dir(work: Path | None) -> contextlib.AbstractContextManager[str]:
    """``--work DIR`` (kept), else a temporary folder removed at the end (the paper's checkpoints are large)."""
    if work is None:
        return tempfile.TemporaryDirectory(prefix="onlstm-gpu-report-", ignore_cleanup_errors=True)
    Path(work).mkdir(parents=True, exist_ok=True)  # a new folder in it each time: the commands refuse to overwrite
    return contextlib.nullcontext(tempfile.mkdtemp(prefix="gpu-report-", dir=work))


if __name__ == "__main__":
    sys.exit(main())
