"""The ``cpp`` kernel: build (once, on first use) and load the compiled C++ layer (``csrc/onlstm_cpu.cpp``), and
:class:`CppKernel`, the module behind the :class:`onlstm.nn.kernels.LayerKernel` interface; why the compiler flags,
the ``ninja`` on PATH and the stale build lock: docs/layer.md, "Implementations"."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch import Tensor

from ..errors import cap, exception_line
from ..files import atomic_write
from . import cpp_gemm
from .kernels import KernelGrads, KernelInputs, KernelOutputs, KernelUnavailable, OutputGrads
from .selfcheck import product_dtype

_SOURCE = Path(__file__).parent / "csrc" / "onlstm_cpu.cpp"
_EXACT = ["-O3", "-fno-math-errno", "-fno-trapping-math"]  # no -ffast-math: docs/layer.md, "Compiler flags"
#: (compiler flags, linker flags) of each build. ``native``: for this CPU's instruction set, its own loops on
#: OpenMP's threads. ``portable``: what any C++ compiler that builds against torch's headers accepts (Apple's clang
#: has no -fopenmp; some compilers refuse -march=native): the AVX2 products are not built and its own loops
#: (not the products, which are torch's) run on one thread. Tried when ``native`` fails to build.
BUILDS = {"native": (_EXACT + ["-march=native", "-fopenmp"], ["-fopenmp"]), "portable": (_EXACT, [])}
BUILD_ENV = "ONLSTM_CPU_BUILD"
#: build: the one loaded; why: why that one (when not by default)
_state: dict[str, Any] = {"tried": False, "module": None, "error": None, "build": None, "why": None}
#: A build takes about a minute (a few on a busy machine): a build lock older than this was left by a build
#: that was killed, not one still running.
STALE_LOCK_S = 600.0


def build_path(path: str) -> str:
    """``path`` (a PATH value) with the directories that hold this environment's ``ninja`` (PyTorch runs it
    from PATH) put first, for scripts that call ``.venv/bin/onlstm`` without activating the virtualenv."""
    first = []
    with contextlib.suppress(ImportError):  # the `ninja` package knows where its binary is
        import ninja

        if getattr(ninja, "BIN_DIR", None):
            first.append(str(ninja.BIN_DIR))
    first.append(os.path.dirname(sys.executable))
    rest = [d for d in path.split(os.pathsep) if d]
    return os.pathsep.join(dict.fromkeys(first + rest))  # in order, each directory once


def torch_cpp_extension() -> Any:
    """``torch.utils.cpp_extension``, imported without the line a CUDA build of torch logs at that import on a
    machine with the CUDA toolkit and no GPU ("No CUDA runtime is found, using CUDA_HOME=…"): the kernel is CPU
    code, whose build reads nothing of CUDA, so the line would only puzzle (and torchrun prefixes it per rank)."""
    log = logging.getLogger("torch.utils.cpp_extension")
    level, said = log.level, io.StringIO()
    log.setLevel(logging.ERROR)  # torch 2.8 on logs it; up to 2.7 it printed it to stderr
    try:
        with contextlib.redirect_stderr(said):
            from torch.utils import cpp_extension
    finally:
        log.setLevel(level)
    rest = [line for line in said.getvalue().splitlines(keepends=True) if "No CUDA runtime is found" not in line]
    if rest and sys.stderr is not None:  # anything else the import said, as it said it (None: stderr closed)
        sys.stderr.write("".join(rest))
    return cpp_extension


def torch_locks_by_existence() -> bool:
    """Whether this torch's build lock is a file whose existence blocks (``FileBaton``, torch up to 2.13: a killed
    build leaves it behind). From torch 2.14 the lock is an OS lock (``filelock``) on a file that stays after
    every build: the kernel releases it when its holder dies, so the file alone says nothing."""
    return hasattr(torch_cpp_extension(), "FileBaton")


def lock_held(lock: Path) -> bool:
    """Whether another process holds the OS lock on ``lock`` (torch 2.14's build lock) now."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): torch's own lock waits, without our line
        return False
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _say_waiting(lock: Path, stale_possible: bool = True) -> None:
    msg = f"onlstm: waiting for another process to finish building the C++ kernel ({lock})"
    tail = "; if no build is running, delete that file" if stale_possible else ""
    print(msg + tail, file=sys.stderr, flush=True)


def clear_stale_lock(build_dir: Path) -> None:
    """Wait while another process builds the kernel; remove a build lock older than :data:`STALE_LOCK_S`, left
    by a killed build (PyTorch would wait for it forever, silently, in every later process). With torch's OS lock
    (2.14 on) no lock is stale and the file is never removed: one line when another build holds it, then torch
    waits for it."""
    lock, said = build_dir / "lock", False
    if not torch_locks_by_existence():
        if lock_held(lock):
            _say_waiting(lock, stale_possible=False)
        return
    while True:
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            return
        if age > STALE_LOCK_S:
            lock.unlink(missing_ok=True)
            print(
                f"onlstm: removed {lock}, left {age / 60:.0f} min ago by a build that did not finish", file=sys.stderr
            )
            return
        if not said:
            _say_waiting(lock)
            said = True
        time.sleep(1.0)


#: What the first build costs, as the compile message says it (README.md and docs/layer.md say the same;
#: measured as docs/results.md, "Compiling the C++ kernel", says).
COMPILE_TIME = "once per torch installation: about 20-25 s on 2 cores"


def compiler_missing() -> str | None:
    """Why no build can start here, known without trying one: the C++ compiler PyTorch would call (``CXX``, else
    ``c++``) is not on the build's PATH (a slim container image, say). ``None`` when it is there."""
    cxx = os.environ.get("CXX", "").strip()
    program = cxx.split()[0] if cxx else "c++"  # CXX="ccache g++": its first word runs
    if shutil.which(program, path=build_path(os.environ.get("PATH", ""))):
        return None
    where = "CXX names" if cxx else "PyTorch calls"
    return f"no C++ compiler: {program!r} ({where} it) is not on PATH; install g++ or set CXX to a C++ compiler"


def unbuildable() -> str | None:
    """Why the kernel will not be built in this process, known before any build: ``ONLSTM_NO_EXTENSION`` or no
    compiler (:func:`compiler_missing`); ``None`` when a build would be tried (and may still fail)."""
    if os.environ.get("ONLSTM_NO_EXTENSION", "") not in ("", "0"):
        return "disabled by ONLSTM_NO_EXTENSION"
    return compiler_missing()


def load_extension() -> Any:
    """Return the compiled kernel module, or ``None`` if it cannot be built (the reason: :func:`extension_error`;
    ``impl='auto'`` then falls back to ``fused`` with one warning). ``ONLSTM_NO_EXTENSION=1`` skips the build, and
    so does a missing compiler (no build is started, so no compile message and none of PyTorch's);
    the build directory is PyTorch's (``TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``)."""
    if _state["tried"]:
        return _state["module"]
    _state["tried"] = True
    if (why := unbuildable()) is not None:
        _state["error"] = why
        return None
    try:
        _state["module"] = _build_first(builds())
    except Exception as exc:
        _state["error"] = build_error(exc)
    return _state["module"]


def builds() -> list[str]:
    """The builds to try, in order: ``native``, then ``portable``; only the one ``ONLSTM_CPU_BUILD`` names (a bad
    value is said once, ignored); only ``portable`` where the native build failed before (:func:`_failure_file`)."""
    name = os.environ.get(BUILD_ENV, "").strip().lower()
    if name in BUILDS:
        _state["why"] = f"{BUILD_ENV}={name}"
        return [name]
    if name:
        print(f"onlstm: {BUILD_ENV}={name!r} ignored; use {' or '.join(BUILDS)}", file=sys.stderr)
    with contextlib.suppress(OSError):
        _state["why"] = _native_failed(_failure_file().read_text(encoding="utf-8").strip())
        return ["portable"]
    return list(BUILDS)


def _native_failed(reason: str) -> str:
    """Why the build in use is the portable one, for ``onlstm info``."""
    return f"the native build failed: {reason}; {BUILD_ENV}=native tries it again"


def _failure_file() -> Path:
    """Where a native build that failed while the portable one built is recorded (in the native build's
    directory), so that later processes do not fail it again, each with a line and a compiler run."""
    cpp_extension = torch_cpp_extension()

    return Path(cpp_extension._get_build_directory(module_name("native"), verbose=False)) / "native-failed.txt"


def _build_first(names: list[str]) -> Any:
    """The module of the first build in ``names`` that compiles; the first one's error when none does."""
    first: Exception | None = None
    for name in names:
        try:
            module = _build_and_load(name)
        except Exception as exc:
            first = first or exc
            continue
        reason = None if first is None else build_error(first)
        if reason is not None:  # said only when the retry built: with no compiler at all, one warning says why
            _state["why"] = _native_failed(reason)
            print(f"onlstm: the C++ kernel's native build failed ({reason}); built it portable: without its AVX2 "
                  f"products, its own loops on one thread ({BUILD_ENV}=native tries again)", file=sys.stderr)  # fmt: skip
        if reason is not None or name == "native":
            _record_native_failure(reason)
        _state["build"] = name
        return module
    assert first is not None, "no build to try"
    raise first


def _record_native_failure(reason: str | None) -> None:
    """Record why the native build failed (``None``: it built, the record goes). A record that cannot be written
    costs each later process a failed compiler run and its line, nothing more."""
    with contextlib.suppress(OSError):
        if reason is None:
            _failure_file().unlink(missing_ok=True)
        else:
            atomic_write(_failure_file(), lambda tmp: Path(tmp).write_text(reason + "\n", encoding="utf-8"))


def build_error(exc: BaseException) -> str:
    """One line for a failed build: the compiler's first ``error:`` line (PyTorch's message opens with the
    build's whole command line), else the exception's first line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if "error:" in ln.lower()]
    return cap(lines[0], 200) if lines else exception_line(exc)


def cpu_features() -> str:
    """What ``-march=native`` compiles for: the CPU's model and instruction-set flags (``/proc/cpuinfo``, else the
    platform's processor name)."""
    return " | ".join(cpp_gemm.cpuinfo("model name", "flags")) or platform.processor() or platform.machine()


def module_name(build: str = "native") -> str:
    """The compiled module's name. It changes with the source, the flags, the torch version, the torch installation
    (the build's command line names the installation's headers: two environments sharing one build directory would
    rebuild it for each other) and the CPU: the kernel is built with ``-march=native``, so a build made on one CPU
    may use instructions another lacks (a home directory shared by the nodes of a cluster); each CPU kind builds
    its own."""
    where = str(Path(torch.__file__).resolve().parent)
    parts = [" ".join(BUILDS[build][0]), torch.__version__, where, cpu_features()]
    return f"onlstm_cpu_{hashlib.sha1(_SOURCE.read_bytes() + ' | '.join(parts).encode()).hexdigest()[:12]}"


def _build_and_load(build: str = "native") -> Any:
    cpp_extension = torch_cpp_extension()

    name, source, (cflags, ldflags) = module_name(build), _SOURCE.read_bytes(), BUILDS[build]
    build_dir = _state["build_dir"] = Path(cpp_extension._get_build_directory(name, verbose=False))
    clear_stale_lock(build_dir)
    # compiled from a copy inside the build directory: PyTorch rebuilds when the source's path changes, so two
    # checkouts of the same version would otherwise rebuild the same directory for each other
    copy = build_dir / _SOURCE.name
    if not copy.is_file() or copy.read_bytes() != source:
        atomic_write(copy, lambda tmp: Path(tmp).write_bytes(source))
    library = build_dir / f"{name}.so"
    verified = check_cached_library(library)
    compiling, started = not library.exists(), time.monotonic()
    if compiling:
        what = "the C++ kernel" + ("" if build == "native" else f" ({build} build)")
        print(f"onlstm: compiling {what}, {COMPILE_TIME} ...", file=sys.stderr, flush=True)
    # PATH extended while the kernel builds; patch.dict restores it (or its absence) afterwards
    with mock.patch.dict(os.environ, {"PATH": build_path(os.environ.get("PATH") or os.defpath)}), _build_streams():
        cpp_extension.load(
            name=name, sources=[str(copy)], extra_cflags=cflags, extra_ldflags=ldflags, verbose=False,
            is_python_module=False,
        )  # fmt: skip
    if compiling:
        print(f"onlstm: compiled in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    _record_loaded(library, verified)
    return getattr(torch.ops, name)  # its operators (the library registers them under its name, not a module)


@contextlib.contextmanager
def _build_streams():
    """torch's build flushes ``sys.stdout`` and ``sys.stderr`` before it runs ninja, and Python sets them to None
    when the shell closed them (``>&-``, ``2>&-``): the kernel then failed to load. A sink stands in meanwhile."""
    missing = [name for name in ("stdout", "stderr") if getattr(sys, name) is None]
    if not missing:
        yield
        return
    with open(os.devnull, "w") as sink, contextlib.ExitStack() as stack:
        for name in missing:
            stack.enter_context(mock.patch.object(sys, name, sink))
        yield


def _record_loaded(library: Path, verified: tuple[int, ...] | None = None) -> None:
    """What loaded is good: the next process checks against its checksum. Recorded again when it differs, as
    after PyTorch rebuilt the library itself (its build command changed). ``verified``: the file's identity when
    :func:`check_cached_library` matched its checksum; the same file is not read and hashed a second time."""
    stamp = _stamp(library)
    with contextlib.suppress(OSError):
        if verified is not None and verified == _identity(library):
            return
        digest = _digest(library)
        if not stamp.is_file() or stamp.read_text().strip() != digest:
            atomic_write(stamp, lambda tmp: Path(tmp).write_text(digest))


def _stamp(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _identity(path: Path) -> tuple[int, ...]:
    """Changes when the file is replaced or rewritten (as a rebuild does)."""
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


#: Loads the library in a child: a damaged one kills the child (SIGBUS, SIGSEGV), not this process.
_PROBE = "import ctypes, sys, torch; ctypes.CDLL(sys.argv[1])"


def check_cached_library(library: Path) -> tuple[int, ...] | None:
    """Remove a cached kernel that would crash this process when loaded (truncated by a full disk or a killed
    build, or changed): one whose checksum, recorded when it first loaded, differs; or, with no checksum (built
    by an older onlstm), one that fails to load in a child process. It is then rebuilt, with one warning.
    Returns the file's identity when its checksum matched (else ``None``)."""
    if not library.is_file():
        return None
    stamp = _stamp(library)
    try:
        identity = _identity(library)
        recorded = stamp.read_text().strip() if stamp.is_file() else None
        if recorded is not None and recorded == _digest(library):
            return identity
    except OSError:
        recorded = ""
    if recorded is None:
        import subprocess

        probe = subprocess.run([sys.executable, "-c", _PROBE, str(library)], capture_output=True, timeout=300)
        if probe.returncode == 0:
            return None
    print(f"onlstm: the cached C++ kernel {library} is damaged (truncated or changed); rebuilding it", file=sys.stderr)
    library.unlink(missing_ok=True)
    stamp.unlink(missing_ok=True)
    return None


def extension_error() -> str | None:
    """Why the kernel is not in use (``None`` when it is, or has not been tried yet)."""
    return _state["error"]


class CppKernel:
    """The compiled module's ``forward``/``backward``; ``saved = (out, act, cells)``. The float32 products' backend
    is forced by ``ONLSTM_CPU_GEMM`` (or :meth:`pin`), else chosen by timing at the first float32 call of each
    layer size (:mod:`~onlstm.nn.cpp_gemm`) and set again before every call of that size, forward and backward."""

    def __init__(self, module: Any, cache_dir: Path | None = None, build: str = "native", why: str | None = None):
        self._module, self._cache_dir, self.build, self._why = module, cache_dir, build, why
        self.choice: cpp_gemm.Choice | None = cpp_gemm.forced(module)  # the last call's, for onlstm info
        self._env = self._pinned = None if self.choice is None else self.choice.backend
        # per layer size (cpp_gemm.size_class): one choice for every size kept what a first call timed (a smoke test
        # on one row chose MKL, 10x faster there, for a 400 -> 1150 layer on which it ran a third slower)
        self._by_size: dict[tuple[int, ...], cpp_gemm.Choice] = {}
        # under bfloat16 autocast, per layer size (cpp_gemm.size_class, as the backend): products in bfloat16?, and
        # why; bf16 is the last decision, for onlstm info
        self._bf16: dict[tuple[int, ...], tuple[bool, str]] = {}
        self.bf16: tuple[bool, str] | None = None

    def pin(self, backend: str | None) -> bool:
        """Run every float32 call's products on ``backend`` (benchmarks and tests compare the backends in one
        process), or for None as by default: on ``ONLSTM_CPU_GEMM``'s, else on the one timed fastest for the call's
        layer size; False when ``backend`` does not run here (nothing changed)."""
        if backend is not None and backend not in self._module.gemm_backends():
            return False
        self._pinned = self._env if backend is None else backend
        return True

    def _set_backend(self, inputs: KernelInputs) -> None:
        """The float32 products' backend for this call: the pinned one, else the one timed for its layer size."""
        if inputs.x.dtype != torch.float32 or not inputs.batch_sizes.numel():
            return
        if self._pinned is not None:
            self._module.set_gemm_backend(self._pinned)
            return
        key = cpp_gemm.size_class(inputs)
        choice = self._by_size.get(key)
        if choice is None:
            with torch.no_grad():
                choice = self._by_size[key] = cpp_gemm.choose(self._module, inputs, self._cache_dir)
        else:
            self._module.set_gemm_backend(choice.backend)
        self.choice = choice

    def forget_bf16(self) -> None:
        """Forget the bfloat16 decisions (tests, or after changing ``ONLSTM_CPU_BF16``): made again at the next call."""
        self._bf16.clear()
        self.bf16 = None

    def describe(self) -> str:
        """One line for ``onlstm info``: the build (native or portable, and why), the matrix-product backend and how
        it was chosen, then what the products run in under bfloat16 autocast."""
        built = (
            "built for this CPU (-march=native, OpenMP)"
            if self.build == "native"
            else f"built portable ({self._why}; no -march=native, no OpenMP: its own loops on one thread)"
        )
        return f"{built}; {self._describe_float32()}; under bfloat16 autocast: {self.describe_bf16()}"

    def _describe_float32(self) -> str:
        if self.choice is not None:
            return "products: " + self.choice.describe()
        runs = ", ".join(self._module.gemm_backends())
        where = "" if self._cache_dir is None else f"; the timings kept in {self._cache_dir / cpp_gemm.CACHE_NAME}"
        before = cpp_gemm.cached_choices(self._cache_dir)
        before = f"; chosen here before: {before}" if before else ""
        return f"products: the fastest of {runs}, timed at the first float32 call of each layer size (float64: MKL){where}{before}"

    def describe_bf16(self) -> str:
        """One line for ``onlstm info``: what the products run in under ``torch.autocast("cpu", torch.bfloat16)``."""
        if self.bf16 is not None:
            return self.bf16[1]
        forced = cpp_gemm.forced_bf16(self._module)  # ONLSTM_CPU_BF16 decides before any timing, as at a call
        if forced is not None:
            return forced[1]
        from .capabilities import bf16_products_error

        why = bf16_products_error()
        return (
            f"float32 ({why})"
            if why
            else "bfloat16 where its products time faster, timed per layer size at its first such call"
        )

    def _products_bf16(self, inputs: KernelInputs) -> bool:
        """Whether this call's products run in bfloat16: a float32 call under bfloat16 autocast, where
        :func:`~onlstm.nn.cpp_gemm.choose_bf16` (at the first such call of the layer's size) says so."""
        if product_dtype(inputs.x.device, inputs.x.dtype) != torch.bfloat16 or inputs.x.dtype != torch.float32:
            return False
        if not inputs.batch_sizes.numel():  # nothing to time the products on
            return False
        size = cpp_gemm.size_class(inputs)
        if size not in self._bf16:  # a small layer may be faster in float32 and a large one in bfloat16
            with torch.no_grad(), torch.autocast("cpu", enabled=False):
                self._bf16[size] = cpp_gemm.choose_bf16(self._module, inputs)
        self.bf16 = self._bf16[size]
        return self.bf16[0]

    def forward(self, inputs: KernelInputs) -> KernelOutputs:
        self._set_backend(inputs)
        bf16 = self._products_bf16(inputs)
        out, h_n, c_n, dist, act, cells = self._module.forward(*inputs, bf16)
        # the products' dtype travels with the saved tensors: backward runs outside the caller's autocast
        marker = inputs.x.new_empty(0, dtype=torch.bfloat16 if bf16 else inputs.x.dtype)
        return KernelOutputs(out, h_n, c_n, dist, saved=(out, act, cells, marker))

    def backward(self, inputs: KernelInputs, saved: tuple[Tensor, ...], grads: OutputGrads) -> KernelGrads:
        i, (out, act, cells, marker) = inputs, saved
        self._set_backend(i)  # another layer's call since this one's forward may have set another backend
        rest = (i.x, i.w_ih, i.w_hh, i.h0, i.c0, i.batch_sizes, act, cells, out, i.chunk, i.inclusive)
        return KernelGrads(*self._module.backward(*grads, *rest, marker.dtype == torch.bfloat16))


def load_cpp_kernel() -> CppKernel:
    """The registry's ``load`` for ``impl='cpp'`` (builds the extension on first use): raises
    :class:`KernelUnavailable` saying why it cannot."""
    module = load_extension()
    if module is None:
        raise KernelUnavailable(extension_error() or "the C++ kernel could not be loaded")
    return CppKernel(module, cpp_gemm.cache_folder(_state.get("build_dir")), _state["build"] or "native", _state["why"])
