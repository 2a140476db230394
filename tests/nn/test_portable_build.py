"""The C++ kernel's portable build: where the build for this CPU fails (Apple's clang has no -fopenmp; some
compilers refuse -march=native), the kernel is built again without those flags, and that build computes what
the reference does on every product backend it has. Forced here by a compiler that refuses them, so a machine
whose compiler takes them still builds and runs the kernel that such machines get."""

import os
import stat
import subprocess
import sys

from onlstm.nn import cpp_kernel

# A compiler that refuses the native build's flags as Apple's clang refuses -fopenmp, and passes the rest on.
REFUSING_CXX = """#!/bin/sh
for a in "$@"; do
  case "$a" in -fopenmp|-march=native) echo "clang: error: unsupported option '$a'" >&2; exit 1;; esac
done
exec "${REAL_CXX:-c++}" "$@"
"""

# Every backend the portable build has, pinned in turn, against the float64 reference loop (a ragged packed batch:
# per-step batch sizes that are not bucket sizes; forward, final states, distances and every gradient).
CHECK = """
import random, torch, onlstm
from torch.nn.utils.rnn import pack_sequence
from onlstm.nn import kernels
from onlstm.nn.cpp_kernel import load_extension, extension_error
ext = load_extension()
assert ext is not None, extension_error()
kernel = kernels.load_kernel("cpp")
print("BUILD", kernel.build)
print("BACKENDS", " ".join(ext.gemm_backends()))
print("DETAIL", onlstm.nn.kernel_status()["cpp"]["detail"])

def grads(m, x):
    for p in m.parameters():
        p.grad = None
    out, (h, c), dist = m(x, return_distances=True)
    (out.data.pow(2).sum() + h.sum() + c.pow(2).sum() + dist.forget.data.sum()).backward()
    return [t.detach().double() for t in (out.data, h, c)] + [p.grad.double() for p in m.parameters()]

rng = random.Random(0)
torch.manual_seed(0)
seqs = [torch.randn(n, 7) for n in sorted((rng.randint(1, 30) for _ in range(21)), reverse=True)]
ref = onlstm.ONLSTM(7, 20, chunk_size=5, impl="reference").double()
want = grads(ref, pack_sequence([s.double() for s in seqs]))
cpp = onlstm.ONLSTM(7, 20, chunk_size=5, impl="cpp")
cpp.load_state_dict({k: v.float() for k, v in ref.state_dict().items()})
for backend in ext.gemm_backends():
    assert kernel.pin(backend), backend
    got = grads(cpp, pack_sequence(seqs))
    err = max(((a - b).abs().max() / (1 + a.abs().max())).item() for a, b in zip(want, got))
    print("ERR", backend, ext.gemm_backend(), err)
"""


def test_a_compiler_refusing_the_native_flags_gets_the_portable_build_and_it_equals_the_reference(tmp_path):
    cxx = tmp_path / "refusing-c++"
    cxx.write_text(REFUSING_CXX)
    cxx.chmod(cxx.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, CXX=str(cxx), REAL_CXX=os.environ.get("CXX", "c++"), TORCH_EXTENSIONS_DIR=str(tmp_path))
    for name in ("ONLSTM_NO_EXTENSION", "ONLSTM_CPU_GEMM", cpp_kernel.BUILD_ENV):
        env.pop(name, None)
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln.split(" ", 1) for ln in r.stdout.splitlines()]
    said = {key: rest for key, rest in lines if key != "ERR"}
    assert said["BUILD"] == "portable" and "built portable" in said["DETAIL"]
    backends = said["BACKENDS"].split()
    assert "mkl" in backends and "avx2" not in backends, backends  # the AVX2 products need -march=native
    errors = [rest.split() for key, rest in lines if key == "ERR"]
    assert [e[0] for e in errors] == backends and all(e[0] == e[1] for e in errors), errors  # each one ran
    assert all(float(e[2]) < 1e-4 for e in errors), errors  # float32 against float64, as the native build's tests
    retries = [ln for ln in r.stderr.splitlines() if "native build failed" in ln]
    assert len(retries) == 1 and "unsupported option '-" in retries[0], r.stderr  # the compiler's own words


def test_the_build_is_chosen_by_the_environment_and_a_bad_value_is_said_once(monkeypatch, capsys):
    monkeypatch.delenv(cpp_kernel.BUILD_ENV, raising=False)
    assert cpp_kernel.builds() == ["native", "portable"]
    monkeypatch.setenv(cpp_kernel.BUILD_ENV, "Portable")
    assert cpp_kernel.builds() == ["portable"]
    monkeypatch.setenv(cpp_kernel.BUILD_ENV, "fast")
    assert cpp_kernel.builds() == ["native", "portable"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ONLSTM_CPU_BUILD='fast' ignored" in err[0]
    # each build has its own module (a portable build never loads as the native one, nor the reverse)
    assert cpp_kernel.module_name("native") != cpp_kernel.module_name("portable")


def test_a_failed_build_is_named_by_the_compilers_error():
    torch_says = (  # PyTorch's message: the build's command line first, the compiler's words further down
        "Error building extension 'onlstm_cpu_x': [1/2] c++ -MMD -MF x.o.d -O3 -fopenmp -c x.cpp\n"
        "FAILED: x.o\nclang: error: unsupported option '-fopenmp'\nninja: build stopped"
    )
    assert cpp_kernel.build_error(RuntimeError(torch_says)) == "clang: error: unsupported option '-fopenmp'"
    missing = FileNotFoundError(2, "No such file or directory", "no-such-c++")
    assert cpp_kernel.build_error(missing).startswith("FileNotFoundError: [Errno 2] No such file")


def test_a_native_build_that_failed_is_not_tried_again_until_asked(tmp_path, monkeypatch, capsys):
    """The failure is recorded where the native build lives: later processes build portable at once, without a
    failed compiler run and its line each; ``ONLSTM_CPU_BUILD=native`` tries again, and a success clears it."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    for name in ("ONLSTM_NO_EXTENSION", cpp_kernel.BUILD_ENV):
        monkeypatch.delenv(name, raising=False)
    tried, native_builds = [], [False]

    def build(name):
        tried.append(name)
        if name == "native" and not native_builds[0]:
            raise RuntimeError(
                "Error building extension 'x': c++ -fopenmp\nclang: error: unsupported option '-fopenmp'"
            )
        return name

    def load():  # a fresh process: nothing tried yet
        monkeypatch.setattr(cpp_kernel, "_state", {"tried": False, "module": None, "error": None, "build": None,
                                                   "why": None})  # fmt: skip
        tried.clear()
        return cpp_kernel.load_extension(), list(tried), capsys.readouterr().err

    monkeypatch.setattr(cpp_kernel, "_build_and_load", build)
    module, order, err = load()
    assert (module, order) == ("portable", ["native", "portable"])
    assert err.count("\n") == 1 and "native build failed (clang: error: unsupported option '-fopenmp')" in err
    module, order, err = load()  # the next process: portable at once, nothing said
    assert (module, order, err) == ("portable", ["portable"], "")
    assert "unsupported option '-fopenmp'" in cpp_kernel._state["why"]  # what onlstm info says of the build
    native_builds[0] = True  # a compiler that builds it now, asked for
    monkeypatch.setenv(cpp_kernel.BUILD_ENV, "native")
    assert load()[:2] == ("native", ["native"])
    monkeypatch.delenv(cpp_kernel.BUILD_ENV)
    assert load()[:2] == ("native", ["native"])  # the record cleared: native first again by default
