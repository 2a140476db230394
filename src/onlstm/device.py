"""Device, threads and denormals for every command that runs a model; Ctrl-C, SIGTERM and SIGHUP as a request to stop
after the current step (docs/design.md §4.6)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any

import torch

from .errors import InputError, first_line, leave_closed_terminal
from .stops import stop_signals


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` (= ``cuda:local_rank``) or ``cuda:N``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device {name!r} was asked for but CUDA is not available; use --device cpu")
    if name == "cuda":
        return torch.device("cuda", local_rank)
    return torch.device(name)


def as_device(device: str | torch.device) -> torch.device:
    """``device`` of the Python API (``from_pretrained``) as a ``torch.device``, with one :class:`InputError`
    where torch cannot read it or this machine cannot use it (not torch's assertion from deep inside a load)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise InputError(f"device {device!r} is not a device name torch reads (cpu, cuda, cuda:N, ...)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {device!r} was asked for but CUDA is not available; use device='cpu'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise InputError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "meta":  # a model there has no weights: loading would drop them, the first call fail deep inside
        raise InputError(f"device {device!r} holds no data, so the weights cannot be loaded onto it; use device='cpu'")
    if dev.type not in ("cpu", "cuda"):  # mps, xpu, ...: torch's own error would come from deep inside the load
        try:
            torch.empty(0, device=dev)
        except (RuntimeError, AssertionError) as exc:
            raise InputError(f"device {device!r} cannot be used here ({first_line(exc)}); use device='cpu'") from None
    return dev


def setup_torch(threads: int | None = None) -> None:
    """Process-wide settings every command that runs a model uses: ``threads`` CPU threads (0/None: leave
    PyTorch's choice) and denormal numbers flushed to zero (tiny gate values otherwise slow the CPU down
    many times over late in training)."""
    if threads:
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)


def cpu_line(limits: bool = True) -> str:
    """The CPU's model and what torch's own kernels use of it (ATen's capability), with any instruction-set limit
    set in the environment (an imitation of another CPU, docs/layer.md) unless ``limits`` is false."""
    from .nn.cpp_gemm import cpu_name, isa_limits

    held = isa_limits() if limits else ""
    return f"{cpu_name()} (ATen capability {torch.backends.cpu.get_cpu_capability()}{', ' + held if held else ''})"


#: Settings in the environment that change a speed figure beyond the instruction-set limits: torch's huge pages
#: for large blocks (with them ``nn.LSTM``, which allocates its workspace at every call, ran 1.4x slower on a Zen 4
#: EPYC where the ON-LSTM layer, which keeps its buffers, did not change) and the C++ kernel's forced routes
#: (``cpp_gemm.ENV``, ``cpp_gemm.BF16_ENV``).
SPEED_SETTINGS = ("THP_MEM_ALLOC_ENABLE", "ONLSTM_CPU_GEMM", "ONLSTM_CPU_BF16")


def machine_line() -> str:
    """The machine a figure is measured on, for the benchmarks' first line: the CPU (:func:`cpu_line`), torch and
    its threads, and any of :data:`SPEED_SETTINGS` set. A speed figure means nothing without them."""
    from .nn.cpp_gemm import set_in_environment

    settings = set_in_environment(SPEED_SETTINGS)
    line = f"CPU: {cpu_line()}; torch {torch.__version__}, {torch.get_num_threads()} threads"
    return line + (f"; set: {settings}" if settings else "")


#: The cells on one of torch's recurrent layers, whose bfloat16 autocast on the CPU is asked of torch.
TORCH_RNNS = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}


def precision_refusal(precision: str, device: torch.device, cell: str) -> str | None:
    """Why ``train.precision`` cannot train ``cell`` on ``device`` here (None: it can; CUDA is taken as it is).
    bf16 on the CPU needs bfloat16 products (AMX or AVX-512 BF16, as torch's oneDNN answers; elsewhere they are
    emulated, slower than float32) and, for a cell on one of torch's recurrent layers (``TORCH_RNNS``), that layer
    under bfloat16 autocast, asked by running it once."""
    from .nn import capabilities

    if precision == "fp32" or device.type == "cuda":
        return None
    why = None if device.type == "cpu" else f"it runs on CUDA and on CPUs with bfloat16 products, not {device.type}"
    why = why or capabilities.bf16_products_error()
    if why is None and cell in TORCH_RNNS:
        why = capabilities.lstm_autocast_error("cpu", torch.bfloat16, TORCH_RNNS[cell])
    return f"train.precision={precision}: {why}; train in fp32" if why else None


def runtime_device(runtime: Any) -> torch.device:
    """A command's :class:`~onlstm.config.Runtime` settings applied: its threads set for the process (and
    :func:`setup_torch`'s other settings), then the device it names."""
    setup_torch(runtime.threads)
    return resolve_device(runtime.device)


class StopRequest:
    """Ctrl-C (SIGINT), SIGTERM or SIGHUP asks the run to stop after the current step and save a resumable
    checkpoint; a second Ctrl-C aborts at once without saving."""

    NOTE = "stopping after this step and saving a resumable checkpoint (press Ctrl-C again to abort without saving)"
    # a final test's: training is over and its weights are on disk, so nothing is left to save for a resume
    SCORING = "stopping the final test; the trained weights are saved (press Ctrl-C again to abort)"
    # while a finished training's result is written: it is written first, else the run would be left without one
    FINISHING = "the run's training is done: writing its final results first (press Ctrl-C again to abort)"

    def __init__(self, note: str = NOTE) -> None:
        self.requested, self.note = False, note
        self._old: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in stop_signals():
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        leave_closed_terminal(signum)
        if self.requested and signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        if not self.requested:
            with contextlib.suppress(OSError, ValueError):  # stderr closed: the stop goes on all the same
                print(f"\n{self.note}", file=sys.stderr, flush=True)
        self.requested = True

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}
        return False


@contextlib.contextmanager
def evaluating(model: torch.nn.Module):
    """``model`` in eval mode inside the block and in its caller's mode after it: a scorer or parser called inside
    a training loop must not leave dropout off. Each submodule gets its own mode back (a frozen part left in eval
    mode in a training model stays so)."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training


def prepare_kernel(model: torch.nn.Module, device: torch.device) -> None:
    """Load now the kernel that ``model``'s ON-LSTM layers (``impl='auto'``) will run on ``device``: a first use
    builds the C++ kernel (tens of seconds), which must happen before a training's clock starts (``time_limit``,
    the demo's seconds), not inside it. Without ON-LSTM layers, nothing."""
    from .nn import ONLSTM, kernels

    if any(isinstance(m, ONLSTM) for m in model.modules()):
        kernels.resolve_impl("auto", device, torch.float32)  # builds, or fails with its one warning, now
