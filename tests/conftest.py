"""Shared fixtures and markers. Tests are laid out like src/onlstm (tests/nn, tests/lm, ...); helpers that
several test modules need live in support.py next to this file."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from support import REPO, needs_cpp

# benchmarks/ on the import path, as it is for a script run from there (``python benchmarks/gpu_report.py``
# imports its sections as ``gpu_bench``): tests of the scripts live in tests/benchmarks, and tests elsewhere (the
# layer's, the docs' commands) load them too, so the folder is added here, whichever tests are run
if str(REPO / "benchmarks") not in sys.path:
    sys.path.insert(0, str(REPO / "benchmarks"))

# Triton decides at its first import whether its kernels (its own library functions included) run in
# the CPU interpreter. Without a GPU, choose the interpreter for the whole test process before anything
# imports triton, so tests/nn/test_triton.py can run the Triton kernel on CPU tensors; with a GPU leave
# it off: the same tests then run the compiled kernel on CUDA.
if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The C++ kernel keeps its backend timings beside its build, in the user's cache folder (onlstm.nn.cpp_gemm): the
# tests' tiny layers would fill that file with sizes no model has. Tests of the file set their own folder.
os.environ.setdefault("ONLSTM_CPU_GEMM_CACHE", "off")


def worker_threads() -> int | None:
    """Under pytest-xdist, torch's threads for each worker: the CPUs this process may use, shared among the workers
    (None outside xdist). Left at torch's default, two workers of two threads each on two idle cores took 130-141 s
    for tests/nn against 68-77 s with one thread each (OpenMP threads waiting on each other; on busy cores one
    second-derivative test took 16.6 s on two threads, 2.4 s on one). Tests of the threaded code paths set their
    own count (tests/nn/test_cpp_gemm.py, tests/nn/test_extension.py)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers <= 1:
        return None
    from onlstm.nn.capabilities import usable_cpus  # here: the module above must choose Triton's mode first

    return max(1, usable_cpus() // workers)


if (_threads := worker_threads()) is not None:
    torch.set_num_threads(_threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(_threads))  # the commands a test runs as processes, too


@pytest.fixture(autouse=True)
def _restore_threads():
    """Commands set torch's thread count for the process; give every test the count it started with."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture
def one_thread():
    """One torch thread for the test (small shapes run faster and results do not depend on the split);
    a module opts in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.cuda`` tests run only where a CUDA device is visible. Tests of the C++ kernel run wherever a
    build is tried: they are skipped only where none can start (no C++ compiler, or ``ONLSTM_NO_EXTENSION=1``), so
    a kernel that fails to compile on a machine with a compiler still fails them."""
    from onlstm.nn import cpp_kernel

    no_cuda = None if torch.cuda.is_available() else pytest.mark.skip(reason="needs a CUDA device")
    why = cpp_kernel.unbuildable()
    no_cpp = None if why is None else pytest.mark.skip(reason=f"the C++ kernel cannot be built here: {why}")
    for item in items:
        if no_cuda is not None and "cuda" in item.keywords:
            item.add_marker(no_cuda)
        if no_cpp is not None and needs_cpp(item):
            item.add_marker(no_cpp)
