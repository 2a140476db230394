"""What ``benchmarks/gpu_report.py`` records about the machine, and its run of the CUDA-only tests
(``pytest -m cuda``)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import torch

import onlstm

#: What the command and the test suite import beyond torch and triton (docs/layer.md: the wheels to bring).
NEEDED = ("tqdm", "safetensors", "PyYAML", "numpy", "pytest", "ninja", "matplotlib", "nltk")


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe(device: torch.device) -> dict[str, Any]:
    """Device, driver, versions of Python, torch, Triton, onlstm and what else the run needs."""
    env: dict[str, Any] = {
        "device": "CPU (smoke run: Triton's interpreter)" if device.type == "cpu" else None,
        "onlstm": onlstm.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": version("triton"),
        "cpu_cores": os.cpu_count(),
        "distributions": {d: version(d) for d in NEEDED},
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env |= {
            "device": torch.cuda.get_device_name(device),
            "compute_capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1),
            "driver": driver(),
            "cudnn": torch.backends.cudnn.version(),
            "bf16": torch.cuda.is_bf16_supported(),
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_tf32": torch.backends.cudnn.allow_tf32,  # nn.LSTM's products on cuDNN (the speed baseline)
        }
    return env


def driver() -> str | None:
    """The NVIDIA driver's version (nvidia-smi), else the CUDA driver API version torch sees."""
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        smi = subprocess.run(query, capture_output=True, text=True, timeout=30)
        if smi.returncode == 0 and smi.stdout.strip():
            return smi.stdout.strip().splitlines()[0]
    get = getattr(torch._C, "_cuda_getDriverVersion", None)  # private but long-lived; only a fallback
    v = None if get is None else int(get())
    return None if v is None else f"CUDA driver API {v // 1000}.{v % 1000 // 10} (nvidia-smi not found)"


def pytest_cuda(smoke: bool, junit: Path, timeout: float) -> dict[str, Any]:
    """``pytest -m cuda`` on this checkout's tests, as a check; not run (and said why) where it cannot be."""
    name = "pytest -m cuda"
    tests = Path(__file__).resolve().parents[2] / "tests"
    if smoke:
        reason = "no CUDA device (a --smoke run): they skip"
    elif not (tests / "conftest.py").is_file():
        reason = f"{tests} not found: the report runs from a whole checkout of the repository"
    elif importlib.util.find_spec("pytest") is None:
        reason = "pytest is not installed (bring its wheel: docs/layer.md, The GPU report)"
    else:
        run = run_pytest(["-m", "cuda", str(tests)], junit, timeout, cwd=tests.parent)
        return run | {"checks": [{"name": name, "passed": run["status"] == "passed", "worst": run["detail"]}]}
    return {"checks": [{"name": name, "passed": None, "worst": reason}]}


def run_pytest(args: list[str], junit: Path, timeout: float, cwd: Path) -> dict[str, Any]:
    """Run pytest in a subprocess (this checkout's package first on the path); counts from its JUnit XML."""
    src = str(Path(onlstm.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *args]
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "detail": f"timed out after {timeout:g} s", "returncode": None}
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        root = ET.Element("none")
    keys = ("tests", "failures", "errors", "skipped")
    counts = {k: sum(int(suite.get(k, 0)) for suite in root.iter("testsuite")) for k in keys}
    failing = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
    return {
        "status": {0: "passed", 5: "no tests collected"}.get(done.returncode, "failed"),
        "returncode": done.returncode,
        "detail": "; ".join(failing[:10]) if failing else tail[0][:300],
        "failing": failing,
        **counts,
        "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
        "seconds": round(time.perf_counter() - start, 1),
    }
