"""The C++ kernel under ``torch.autocast("cpu", torch.bfloat16)``: its products in bfloat16 (float32 accumulation and
element-wise step), forced on and off on every machine, against the reference loop in float32 and under the same
autocast; and how the route is decided (the module's probe, torch's oneDNN, the timing), with injected answers."""

import pytest
import torch
from torch.nn.utils.rnn import pack_sequence

import onlstm
from onlstm.nn import capabilities, cpp_gemm
from onlstm.nn.cpp_kernel import load_extension
from onlstm.nn.kernels import load_kernel

pytestmark = pytest.mark.skipif(load_extension() is None, reason="the C++ kernel does not build here")

AUTOCAST = dict(device_type="cpu", dtype=torch.bfloat16)


@pytest.fixture
def kernel():
    """The registry's C++ kernel with its bfloat16 decision forgotten before and after (it is kept per process)."""
    k = load_kernel("cpp")
    k.forget_bf16()
    yield k
    k.forget_bf16()


def _run(model, x, impl, autocast, packed=False):
    """Output and every gradient (input and parameters) of one forward+backward, in float32."""
    model.impl = impl
    model.zero_grad()
    xs = [t.detach().clone().requires_grad_() for t in x] if packed else [x.detach().clone().requires_grad_()]
    inp = pack_sequence(xs, enforce_sorted=False) if packed else xs[0]
    with torch.autocast(**AUTOCAST, enabled=autocast):
        out, (h, c) = model(inp)
    out = out.data if packed else out
    (out.float().pow(2).sum() + h.float().sum() + c.float().sum()).backward()
    return [out.detach().float()] + [t.grad for t in xs] + [p.grad.clone() for p in model.parameters()]


def _error(got, want):
    """The largest error over every tensor, each relative to the reference's largest value."""
    return max(float((g - w).abs().max() / w.abs().max().clamp_min(1e-30)) for g, w in zip(got, want))


@pytest.fixture(params=["packed-weights", "plain"])
def route(request):
    """Both bfloat16 routes: on packed weights (where oneDNN's linear takes bfloat16) and ATen's plain product."""
    module = load_extension()
    was = module.bf16_packed()
    if request.param == "packed-weights" and not module.set_bf16_packed(True):
        pytest.skip("bfloat16 products on packed weights: not available on this CPU")
    if request.param == "plain":
        module.set_bf16_packed(False)
    yield request.param
    module.set_bf16_packed(was)


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed-unsorted"])
def test_bf16_products_match_the_reference_loop_as_closely_as_its_own_autocast(monkeypatch, kernel, route, packed):
    monkeypatch.setenv(cpp_gemm.BF16_ENV, "on")
    torch.manual_seed(0)
    model = onlstm.ONLSTM(24, 36, chunk_size=4, num_layers=2, bidirectional=True)
    x = [torch.randn(n, 24) for n in (9, 4, 7)] if packed else torch.randn(9, 5, 24)
    want = _run(model, x, "reference", False, packed)
    loop16 = _run(model, x, "reference", True, packed)
    got = _run(model, x, "cpp", True, packed)
    assert kernel.bf16 is not None and kernel.bf16[0], kernel.bf16
    # bfloat16 keeps 8 bits: the reference loop under the same autocast is the yardstick, 3e-2 its floor
    assert _error(got, want) <= max(3e-2, 2 * _error(loop16, want))
    # and the products did run in bfloat16 (float32 products would be within 1e-5)
    assert _error(got, _run(model, x, "cpp", False, packed)) > 1e-4
    assert got[0].dtype == torch.float32


def test_forced_off_autocast_leaves_the_kernel_in_float32(monkeypatch, kernel):
    monkeypatch.setenv(cpp_gemm.BF16_ENV, "off")
    torch.manual_seed(1)
    model, x = onlstm.ONLSTM(10, 12, chunk_size=3), torch.randn(6, 4, 10)
    under, plain = _run(model, x, "cpp", True), _run(model, x, "cpp", False)
    assert all(torch.equal(a, b) for a, b in zip(under, plain))
    assert kernel.bf16 == (False, f"float32 ({cpp_gemm.BF16_ENV}=off)")


def test_float64_under_autocast_is_never_rounded(monkeypatch, kernel):
    monkeypatch.setenv(cpp_gemm.BF16_ENV, "on")
    model = onlstm.ONLSTM(5, 6, chunk_size=2).double()
    x = torch.randn(4, 3, 5, dtype=torch.float64)
    model.impl = "cpp"
    with torch.autocast(**AUTOCAST):
        under = model(x)[0]
    model.impl = "reference"
    assert torch.allclose(under, model(x)[0], atol=1e-12) and kernel.bf16 is None  # never asked


class _Module:
    def __init__(self, why=""):
        self.why = why

    def bf16_why_not(self):
        return self.why


def _inputs():
    from onlstm.nn.kernels import KernelInputs

    x, w = torch.zeros(12, 8), torch.zeros(4 * 8 + 4, 8)
    return KernelInputs(x, w, w, None, x[:3], x[:3], torch.tensor([3, 3, 3, 3]), 4, False)


def test_the_capability_is_torchs_answer():
    native = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert (capabilities.bf16_products_error() is None) == bool(native)


def test_the_decision_asks_the_probe_torch_and_the_timing(monkeypatch, capsys):
    monkeypatch.delenv(cpp_gemm.BF16_ENV, raising=False)
    assert cpp_gemm.choose_bf16(_Module("no bfloat16 here"), _inputs()) == (False, "float32 (no bfloat16 here)")
    monkeypatch.setattr(capabilities, "bf16_products_error", lambda: "not available on this CPU: (injected)")
    use, why = cpp_gemm.choose_bf16(_Module(), _inputs())
    assert not use and "no bfloat16 products on this CPU" in why
    monkeypatch.setattr(capabilities, "bf16_products_error", lambda: None)
    for ratio, wanted in ((0.6, False), (2.5, True)):
        monkeypatch.setattr(cpp_gemm, "bf16_speedup", lambda *_a, r=ratio: r)
        use, why = cpp_gemm.choose_bf16(_Module(), _inputs())
        assert use is wanted and (f"{ratio:.1f}x" in why or f"{ratio:.2f}x" in why), why
    monkeypatch.setenv(cpp_gemm.BF16_ENV, "maybe")
    assert cpp_gemm.choose_bf16(_Module(), _inputs())[0]  # ignored, said once: the timing (2.5x) decides
    assert "ONLSTM_CPU_BF16='maybe' ignored" in capsys.readouterr().err
    monkeypatch.setenv(cpp_gemm.BF16_ENV, "on")
    assert cpp_gemm.choose_bf16(_Module("refused"), _inputs()) == (False, "float32 (refused)")  # on cannot force


def test_float32_is_the_faster_of_mkl_and_onednn(monkeypatch):
    """MKL's float32 at half oneDNN's rate (an AMD CPU): bfloat16 faster than MKL but slower than oneDNN keeps float32."""
    clock, real_mm = [0.0], torch.mm

    def mm(a, b):  # MKL's float32 "takes" 4, bfloat16 2
        clock[0] += 4.0 if a.dtype == torch.float32 else 2.0
        return real_mm(a, b)

    class Onednn:
        def gemm_backends(self):
            return ["onednn", "mkl"]

        def matmul(self, a, b, c, backend):
            clock[0] += 1.0  # oneDNN's float32 "takes" 1

    monkeypatch.setattr(torch, "mm", mm)
    assert cpp_gemm.bf16_speedup(_inputs(), timer=lambda: clock[0]) == pytest.approx(2.0)  # against MKL alone
    assert cpp_gemm.bf16_speedup(_inputs(), timer=lambda: clock[0], module=Onednn()) == pytest.approx(0.5)


def test_the_timing_weighs_both_dtypes_products():
    ticks = iter(range(10_000))
    ratio = cpp_gemm.bf16_speedup(_inputs(), timer=lambda: float(next(ticks)))
    assert ratio == pytest.approx(1.0)  # every product "took" one tick in either dtype
    assert cpp_gemm.bf16_speedup(_inputs()) > 0


def test_the_decision_is_made_per_layer_size(monkeypatch, kernel):
    """A small layer may time faster in float32 and a large one in bfloat16: each size decides for itself."""
    monkeypatch.delenv(cpp_gemm.BF16_ENV, raising=False)
    asked = []
    monkeypatch.setattr(
        cpp_gemm, "choose_bf16", lambda _m, i: asked.append(i.w_hh.shape[1]) or (i.w_hh.shape[1] > 8, "t")
    )
    small, large = onlstm.ONLSTM(4, 8, chunk_size=2, impl="cpp"), onlstm.ONLSTM(4, 16, chunk_size=2, impl="cpp")
    with torch.autocast(**AUTOCAST), torch.no_grad():
        for model in (small, large, small, large):
            model(torch.ones(3, 5, 4))
        small(torch.ones(3, 7, 4))  # the same batch bucket (8)
    assert asked == [8, 16] and kernel.bf16 == (False, "t")


def test_info_says_what_autocast_runs_in(kernel, monkeypatch):
    line = kernel.describe_bf16()
    assert line.startswith(("float32 (", "bfloat16 where")), line
    monkeypatch.setattr(capabilities, "bf16_products_error", lambda: "not available on this CPU: (injected)")
    assert kernel.describe_bf16() == "float32 (not available on this CPU: (injected))"
    kernel.bf16 = (True, "bfloat16 (timed)")
    assert kernel.describe_bf16() == "bfloat16 (timed)"


@pytest.mark.parametrize("setting", ["on", "off"])
def test_info_says_what_the_variable_forces(monkeypatch, kernel, setting):
    """``onlstm info`` (before any call decided) says the route ONLSTM_CPU_BF16 forces, not the timing's."""
    monkeypatch.setenv(cpp_gemm.BF16_ENV, setting)
    monkeypatch.setattr(capabilities, "bf16_products_error", lambda: None)  # as on a CPU with bfloat16 products
    said = kernel.describe_bf16()
    if setting == "off":
        assert said == f"float32 ({cpp_gemm.BF16_ENV}=off)"
    else:
        why = load_extension().bf16_why_not()  # a kernel built without bfloat16 products cannot be forced
        assert said == (f"float32 ({why})" if why else f"bfloat16 ({cpp_gemm.BF16_ENV}=on)")
