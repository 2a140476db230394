"""The Triton kernel equals the reference step loop: outputs, states, distances and every gradient.

Without a GPU the kernel runs on CPU tensors in Triton's interpreter (registered on request as
``impl='triton_interpret'``). The interpreter must be chosen before Triton is first imported, so
tests/conftest.py sets ``TRITON_INTERPRET=1`` at the start of the test process when no CUDA device is
visible; with a GPU it stays unset, the interpreter cases skip and the same cases run the compiled
kernel on CUDA (``impl='triton'``, marker ``cuda``). Shapes are tiny: the interpreter runs each
program in numpy.
"""

import dataclasses

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

pytest.importorskip("triton")

import onlstm
from onlstm.nn import kernels
from onlstm.nn.triton_kernel import TritonKernel, _smoke_test, fp64_dot, load_interpreter_kernel


@pytest.fixture(params=["interpreter", pytest.param("cuda", marks=pytest.mark.cuda)])
def target(request):
    """``(impl, device)`` of the Triton kernel: the interpreter on the CPU, or the compiled kernel on CUDA."""
    if request.param == "cuda":
        assert kernels.load_kernel("triton") is not None, kernels.kernel_error("triton")
        return "triton", torch.device("cuda")
    return request.getfixturevalue("interpreter"), torch.device("cpu")


def forward_backward(model, impl, x, hx, seed, use_distances=True):
    """Outputs and every gradient of one forward+backward; ``seed`` fixes DropConnect's mask and dropout."""
    model.impl = impl
    # the kernel's self-check would fall back to the reference loop if it failed: make sure it did not
    assert model.resolved_impl(x.data.device if packed_input(x) else x.device) == impl
    torch.manual_seed(seed)
    out, (h, c), d = model(x, hx, return_distances=True)
    packed = isinstance(out, torch.nn.utils.rnn.PackedSequence)
    out, df, di = (out.data, d.forget.data, d.input.data) if packed else (out, d.forget, d.input)
    gen = torch.Generator().manual_seed(7)  # a random linear loss reaches every output with its own weight
    terms = (out, h, c, df, di) if use_distances else (out, h, c)
    loss = sum((torch.randn(t.shape, generator=gen, dtype=t.dtype).to(t.device) * t).sum() for t in terms)
    xs = x.data if packed else x
    leaves = [t for t in [xs, *(hx or ())] if t.requires_grad]
    grads = torch.autograd.grad(loss, leaves + list(model.parameters()))
    return [out, h, c, df, di, *grads]


def packed_input(x):
    return isinstance(x, torch.nn.utils.rnn.PackedSequence)


def assert_equal_to_reference(model, impl, x, hx=None, seed=1, use_distances=True, atol=2e-5, rtol=1e-4):
    ref = forward_backward(model, "reference", x, hx, seed, use_distances)
    got = forward_backward(model, impl, x, hx, seed, use_distances)
    names = ["out", "h_n", "c_n", "d_forget", "d_input"] + [f"grad {i}" for i in range(len(ref) - 5)]
    for name, a, b in zip(names, ref, got):
        torch.testing.assert_close(b, a, atol=atol, rtol=rtol, msg=lambda m, name=name: f"{impl} {name}: {m}")


def layer(device, *args, seed=0, **kw):
    torch.manual_seed(seed)
    return onlstm.ONLSTM(*args, impl="reference", **kw).to(device)


CASES = [  # (input, hidden, kwargs): chunk sizes 1 and > 1, both master-input modes, layers, directions
    (3, 4, {"chunk_size": 1, "master_input": "paper"}),
    (3, 6, {"chunk_size": 2, "master_input": "reverse"}),
    (4, 6, {"chunk_size": 3, "num_layers": 2, "bidirectional": True, "master_input": "paper"}),
]


@pytest.mark.parametrize("case", CASES, ids=["C1-paper", "C2-reverse", "C3-2layers-bi"])
def test_padded_batch_with_hx_equals_reference(target, case):
    impl, device = target
    I, D, kw = case
    m = layer(device, I, D, **kw)
    L = m.num_layers * m.num_directions
    x = torch.randn(4, 3, I, device=device, requires_grad=True)
    hx = tuple(torch.randn(L, 3, D, device=device, requires_grad=True) for _ in range(2))
    assert_equal_to_reference(m, impl, x, hx)


@pytest.mark.parametrize("mode", ["paper", "reverse"])
def test_packed_bidirectional_two_layers_with_dropconnect_equals_reference(target, mode):
    """Unequal lengths (rows leave the packed batch), both directions, DropConnect and dropout with one mask."""
    impl, device = target
    m = layer(device, 3, 6, num_layers=2, chunk_size=2, bidirectional=True, dropconnect=0.4, dropout=0.3)
    m.master_input = mode
    m.train()
    lengths = torch.tensor([5, 3, 2, 1])
    padded = torch.randn(5, 4, 3, device=device)
    packed = pack_padded_sequence(padded, lengths, enforce_sorted=True)
    packed.data.requires_grad_()
    assert_equal_to_reference(m, impl, packed)


def test_unsorted_packed_input_and_no_distance_gradient(target):
    """``enforce_sorted=False`` (permuted states) and a loss without the distances (no gradient to them)."""
    impl, device = target
    m = layer(device, 2, 4, chunk_size=2)
    padded = torch.randn(4, 3, 2, device=device)
    packed = pack_padded_sequence(padded, torch.tensor([2, 4, 3]), enforce_sorted=False)
    packed.data.requires_grad_()
    hx = tuple(torch.randn(1, 3, 4, device=device, requires_grad=True) for _ in range(2))
    assert_equal_to_reference(m, impl, packed, hx, use_distances=False)


def test_gradcheck_float64(target):
    """Numerical against analytical gradients of the kernel itself, packed, float64 (fast mode: random
    projections of the Jacobian, since every interpreted launch costs tens of milliseconds)."""
    from onlstm.nn.kernels import fused_layer

    impl, device = target
    kernel = kernels.load_kernel(impl)
    torch.manual_seed(0)
    n, C, I = 2, 2, 2
    D, G = n * C, 4 * n * C + 2 * n
    bs = torch.tensor([2, 2, 1])
    opts = {"dtype": torch.float64, "device": device}
    x = torch.randn(int(bs.sum()), I, **opts)
    w_ih, w_hh, b = 0.5 * torch.randn(G, I, **opts), 0.5 * torch.randn(G, D, **opts), 0.5 * torch.randn(G, **opts)
    h0, c0 = torch.randn(2, D, **opts), torch.randn(2, D, **opts)
    inputs = tuple(t.requires_grad_() for t in (x, w_ih, w_hh, b, h0, c0))
    for inclusive in (False, True):

        def f(*args, inclusive=inclusive):
            return fused_layer(*args, bs, C, inclusive, kernel)

        assert torch.autograd.gradcheck(f, inputs, fast_mode=True)


@pytest.mark.parametrize(
    "dtype, step", [(torch.bfloat16, "split"), (torch.float16, "split"), (torch.bfloat16, "fused")]
)
def test_autocast_runs_products_in_low_precision_and_state_in_float32(target, dtype, step, monkeypatch):
    """Under autocast: float32 outputs and gradients close to the float32 reference (half-precision products
    make them differ by ~1e-3), and measurably not the float32 path (the products did run in half); both steps
    (the fused one reads half-precision copies of ``h`` and the weights in its own products)."""
    from onlstm.nn.triton_kernel import STEP_ENV

    monkeypatch.setenv(STEP_ENV, step)
    impl, device = target
    m = layer(device, 5, 8, chunk_size=2)
    x = torch.randn(6, 3, 5, device=device, requires_grad=True)
    full = forward_backward(m, impl, x, None, 1)
    with torch.autocast(device.type, dtype=dtype):
        half = forward_backward(m, impl, x, None, 1)
    ref = forward_backward(m, "reference", x, None, 1)
    for b, r in zip(half, ref):
        assert b.dtype == torch.float32
        torch.testing.assert_close(b, r, atol=3e-2 * float(r.detach().abs().max()), rtol=0)
    assert max(float((a - b).detach().abs().max()) for a, b in zip(full, half)) > 1e-5


def test_triton_is_registered_for_cuda_and_says_why_it_is_unavailable():
    assert kernels.kernel_names()[0] == "triton"
    if torch.cuda.is_available():
        return
    assert kernels.load_kernel("triton") is None
    reason = kernels.kernel_error("triton")
    assert reason is not None and reason.startswith("unavailable because") and "CUDA" in reason
    m = onlstm.ONLSTM(3, 4, chunk_size=2, impl="triton")  # a named kernel runs the reference off its device
    assert m.resolved_impl(torch.device("cpu"), torch.float32) == "reference"
    assert m.resolved_impl(torch.device("cpu"), torch.float16) == "reference"


def test_interpreter_kernel_is_never_chosen_by_auto(interpreter):
    names = kernels.kernel_names()  # 'auto' takes the first that loads; 'fused' (pure PyTorch) always does
    assert names[-1] == interpreter and names.index("fused") < names.index(interpreter)
    assert load_interpreter_kernel() is not None


@pytest.mark.parametrize("step", ["split", "fused"])
def test_the_load_time_smoke_test_passes_on_the_interpreter(interpreter, step):
    """``load_cuda_kernel`` runs ``_smoke_test`` on the GPU, where CI never goes: here it runs on the interpreter,
    each step forced, so a smoke test that the layer's own checks refuse (it once had 18 gate rows for 20) fails
    in CI instead of making the kernel unavailable on every GPU."""
    kernel = TritonKernel(load_interpreter_kernel()._steps, step=step)
    _smoke_test(kernel, torch.device("cpu"))


def _layer_speed():
    import importlib.util

    from support import REPO

    spec = importlib.util.spec_from_file_location("layer_speed", REPO / "benchmarks" / "layer_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_benchmark_code_path_runs_and_says_when_there_is_no_gpu(interpreter, capsys):
    """benchmarks/layer_speed.py's CUDA path: a clear error without CUDA; with the triton impl on the CPU
    (interpreter, tiny shape: a check that it runs, not a speed) every row is printed."""
    bench = _layer_speed()
    if not torch.cuda.is_available():
        assert bench.main(["--device", "cuda"]) == 2
        assert "no CUDA device is visible" in capsys.readouterr().err
    argv = ["--device", "cpu", "--impls", "triton,reference", "--shapes", "2x2x3x4x2", "--repeats", "1"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "not a speed" in out and all(f" {k} " in out for k in ("nn.LSTM", "triton", "reference"))


# numpy, under Triton's interpreter, warns on a max over NaNs: the case this test makes on purpose
@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")
@pytest.mark.parametrize("where", ["nan-input", "nan-weight_hh"])
def test_non_finite_values_propagate_as_in_the_reference(target, where):
    """A NaN in the input or in one recurrent weight gives NaN exactly where the reference has one
    (issue #13's check of the CPU kernels), and the same finite values elsewhere."""
    impl, device = target
    m = layer(device, 4, 10, chunk_size=5)
    x = torch.randn(6, 3, 4, device=device)
    with torch.no_grad():
        if where == "nan-input":
            x[2, 1, 0] = float("nan")
        else:  # one unit's output gate (rows 2n.. are o)
            m.weight_hh_l0[2 * m.n_chunks + 3, 7] = float("nan")
    x.requires_grad_(True)
    ref = forward_backward(m, "reference", x, None, 1)
    got = forward_backward(m, impl, x, None, 1)
    assert ref[0].isnan().any() and ref[0].isfinite().any(), "the case must mix NaN and finite outputs"
    for i, (a, b) in enumerate(zip(ref, got)):
        assert torch.equal(b.isnan(), a.isnan()) and torch.equal(b.isinf(), a.isinf()), f"item {i}"
        fin = a.isfinite()
        torch.testing.assert_close(b[fin], a[fin], atol=2e-5, rtol=1e-4, msg=lambda msg, i=i: f"item {i}: {msg}")


def test_interpreter_kernel_without_the_variable_says_how_to_turn_it_on():
    """Started without TRITON_INTERPRET=1, the CPU kernel is an error that names the variable (a subprocess:
    this process chose the interpreter before importing triton)."""
    import os
    import subprocess
    import sys

    from support import REPO

    code = (
        "import torch, onlstm\n"
        "from onlstm.nn.triton_kernel import register_interpreter_kernel\n"
        "m = onlstm.ONLSTM(2, 4, chunk_size=2, impl=register_interpreter_kernel())\n"
        "try:\n    m(torch.randn(3, 1, 2))\nexcept RuntimeError as e:\n    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "unavailable because Triton is not in interpreter mode: set TRITON_INTERPRET=1" in r.stdout


def test_speed_benchmark_leaves_out_a_kernel_that_failed_its_self_check(interpreter, monkeypatch, capsys):
    """A row of benchmarks/layer_speed.py times the kernel its label names: where the kernel fails its
    self-check the layer runs the reference loop, and that row is left out with a note instead."""
    from onlstm.nn import selfcheck
    from onlstm.nn.triton_kernel import TritonKernel

    forward = TritonKernel.forward
    monkeypatch.setattr(
        TritonKernel, "forward", lambda self, inputs: dataclasses.replace(r := forward(self, inputs), out=r.out * 1.01)
    )
    selfcheck.reset()
    try:
        argv = ["--device", "cpu", "--impls", "triton,reference", "--shapes", "2x2x3x4x2", "--repeats", "1"]
        with pytest.warns(RuntimeWarning, match="self-check"):
            assert _layer_speed().main(argv) == 0
    finally:
        selfcheck.reset()
    out = capsys.readouterr().out
    assert "note: triton would run reference" in out and "left out" in out
    rows = [line.split()[6] for line in out.splitlines() if line.startswith("T=2 ")]  # shape (5 words), dtype, impl
    assert rows == ["nn.LSTM", "reference"]


# --------------------------------------------------------------------------- the fused step (ONLSTM_TRITON_STEP)


def _fused_kernel(impl):
    """The Triton kernel of ``impl`` (interpreted or compiled) with its step forced to ``fused``."""
    from onlstm.nn.triton_kernel import TritonKernel

    return TritonKernel(kernels.load_kernel(impl)._steps, step="fused")


def _layer_outputs_and_grads(kernel, inputs, bs, chunk, inclusive, use_distances):
    """``out, h_n, c_n, dist`` of one packed layer and the gradient of every input, under a random linear loss."""
    from onlstm.nn.kernels import fused_layer

    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    outs = fused_layer(*leaves, bs, chunk, inclusive, kernel)
    gen = torch.Generator().manual_seed(3)
    loss = sum((torch.randn(t.shape, generator=gen, dtype=t.dtype).to(t.device) * t).sum()
               for t in (outs if use_distances else outs[:3]))  # fmt: skip
    return [t.detach() for t in outs] + list(torch.autograd.grad(loss, leaves))


# (chunks, chunk size, batch sizes, master_input 'reverse', loss on the distances): a program holds 16 rows and
# 64 / next_pow2(chunk) chunks, so the first case spans two row blocks and two chunk blocks (a row's master gates
# and their gradients cross programs); chunk sizes 3 (padded to 4) and 1; rows leave the packed batch
FUSED_CASES = [(33, 2, [17, 2], False, True), (5, 3, [3, 3, 1], True, False), (4, 1, [2, 1, 1], False, True)]


@pytest.mark.parametrize("case", FUSED_CASES, ids=["2x2-programs", "C3-reverse-no-dist", "C1"])
def test_fused_step_equals_the_pytorch_kernel_in_float64(target, case):
    """The fused step (the product inside the step kernel) against the pure-PyTorch ``fused`` kernel, float64:
    outputs, final states, distances and the gradient of every input, to rounding."""
    impl, device = target
    if not fp64_dot(device):
        pytest.skip("this Triton has no float64 product (tl.dot): the fused step runs split in float64")
    n, C, bs, inclusive, use_distances = case
    D, G, I = n * C, 4 * n * C + 2 * n, 3
    gen = torch.Generator().manual_seed(0)
    draw = lambda *shape, s=1.0: (s * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(device)
    inputs = (draw(sum(bs), I), draw(G, I, s=0.5), draw(G, D, s=0.3), draw(G, s=0.5), draw(bs[0], D), draw(bs[0], D))
    args = (torch.tensor(bs), C, inclusive, use_distances)
    want = _layer_outputs_and_grads(kernels.load_kernel("fused"), inputs, *args)
    got = _layer_outputs_and_grads(_fused_kernel(impl), inputs, *args)
    names = ["out", "h_n", "c_n", "dist", "dx", "dw_ih", "dw_hh", "dbias", "dh0", "dc0"]
    for name, a, b in zip(names, want, got):
        torch.testing.assert_close(b, a, atol=1e-12, rtol=1e-10, msg=lambda m, name=name: f"{name}: {m}")


def test_the_environment_variable_routes_the_layer_through_the_fused_step(target, monkeypatch):
    """``ONLSTM_TRITON_STEP=fused``: the layer (packed, unsorted, bidirectional, DropConnect, ``hx``)
    runs the fused step only (the split loops would raise) and equals the reference loop; its self-check ran
    for the fused step."""
    from onlstm.nn import selfcheck
    from onlstm.nn.triton_kernel import STEP_ENV, TritonKernel

    impl, device = target

    def split(*args, **kwargs):
        raise AssertionError("the split step ran")

    monkeypatch.setenv(STEP_ENV, "fused")
    monkeypatch.setattr(TritonKernel, "_split_steps", split)
    monkeypatch.setattr(TritonKernel, "_step_grads", split)
    m = layer(device, 3, 6, chunk_size=2, bidirectional=True, dropconnect=0.4)
    m.train()
    padded = torch.randn(4, 3, 3, device=device)
    packed = pack_padded_sequence(padded, torch.tensor([2, 4, 3]), enforce_sorted=False)
    packed.data.requires_grad_()
    hx = tuple(torch.randn(2, 3, 6, device=device, requires_grad=True) for _ in range(2))
    selfcheck.reset()
    try:
        assert_equal_to_reference(m, impl, packed, hx)
        assert any(r.sizes.endswith("fused step") and r.passed for r in selfcheck.results())
    finally:
        selfcheck.reset()


def test_the_step_is_chosen_by_the_variable_and_the_shape(monkeypatch, capsys):
    """``split`` by default; ``fused`` when asked and the layer fits (at most FUSED_MAX_CHUNKS chunks of at most
    FUSED_MAX_CHUNK units); a bad value is said once on stderr and ignored."""
    from onlstm.nn import triton_kernel as tk

    kernel = tk.TritonKernel(steps=None)
    monkeypatch.delenv(tk.STEP_ENV, raising=False)
    assert kernel.route(1150, 10) == "split" and "split step" in kernel.describe()
    monkeypatch.setenv(tk.STEP_ENV, "fused")
    assert kernel.route(1150, 10) == "fused" and "slower than the split step" in kernel.describe()
    assert kernel.route(tk.FUSED_MAX_CHUNKS + 1, 1) == "split"
    assert kernel.route(2 * (tk.FUSED_MAX_CHUNK + 1), tk.FUSED_MAX_CHUNK + 1) == "split"
    assert tk.TritonKernel(steps=None, step="split").route(1150, 10) == "split"
    monkeypatch.setenv(tk.STEP_ENV, "fast")
    assert kernel.route(1150, 10) == "split" and kernel.route(1150, 10) == "split"
    assert capsys.readouterr().err.count(f"{tk.STEP_ENV}='fast' ignored; use split or fused") == 1
    with pytest.raises(ValueError, match="step must be one of"):
        tk.TritonKernel(steps=None, step="fast")


COMPILE_FOR_HOPPER = """
import json, sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from onlstm.nn import _triton_fused as F
from onlstm.nn.triton_kernel import _fused_blocks
names = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float64: "fp64"}
ints = {"ROW0", "PREV0", "B", "NEXT0", "C_ROW0", "B_NEXT"}
low = {"H_PREV", "W", "H_MM", "DG_MM"}  # the buffers in the products' dtype
out, pairs = {}, [(torch.float32, torch.float32), (torch.float32, torch.bfloat16), (torch.float64, torch.float64)]
try:  # a Triton without a float64 product (3.3) refuses it while compiling: the step then runs split in float64
    triton.compile(ASTSource(F.probe_fp64_dot, {"a": "*fp64", "out": "*fp64"}, {}), target=GPUTarget("cuda", 90, 32))
    fp64 = True
except Exception:
    fp64, pairs = False, pairs[:2]
for dtype, mm in pairs:
    blocks = _fused_blocks(115, 10, dtype, mm, cuda=True)  # the paper's layer: 1150 units, chunks of 10
    options = {k: blocks.pop(k) for k in ("num_warps", "num_stages")}
    flags = {"INCLUSIVE": False, "HAS_HMM": mm != dtype, "HAS_GDIST": True, "HAS_MM": mm != dtype}
    for fn in (F.forward_step, F.backward_step, F.backward_masters):
        consts = {a: v for a, v in (blocks | flags).items() if a in fn.arg_names}
        sig = {a: "constexpr" if a in consts else "i32" if a in ints else "*" + names[mm if a in low else dtype]
               for a in fn.arg_names}
        kernel = triton.compile(ASTSource(fn, sig, consts), target=GPUTarget("cuda", 90, 32), options=options)
        out[f"{fn.__name__} {names[dtype]}/{names[mm]}"] = kernel.metadata.shared
print(json.dumps({"shared": out, "fp64_dot": fp64}))
"""


@pytest.mark.slow
def test_fused_step_compiles_for_a_hopper_gpu_within_its_shared_memory():
    """Without a GPU: Triton compiles the fused step's three kernels for sm_90 (H100/H200) at the paper's layer,
    fp32, bf16 products and fp64, each within the 227 KiB of shared memory a Hopper block may use (a subprocess:
    this one runs Triton's interpreter, which compiles nothing)."""
    import json
    import os
    import subprocess
    import sys

    from support import REPO

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # the default; set, so Triton 3.9 does not warn about it
    r = subprocess.run([sys.executable, "-c", COMPILE_FOR_HOPPER], env=env, capture_output=True, text=True,
                       timeout=1200)  # fmt: skip
    if r.returncode != 0 and ("ptxas" in r.stderr or "GPUTarget" in r.stderr or "No module named" in r.stderr):
        pytest.skip(f"this Triton cannot compile for sm_90 here: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    shared, fp64 = got["shared"], got["fp64_dot"]
    assert len(shared) == (9 if fp64 else 6) and all(0 <= v <= 227 * 1024 for v in shared.values()), shared
    # the layer asks this Triton the same question by running the product (the interpreter here, without a GPU)
    assert fp64 == fp64_dot(torch.device("cuda" if torch.cuda.is_available() else "cpu"))


def test_second_derivatives_and_in_place_outputs(target):
    """A Hessian through the kernel equals the reference loop's (its backward then runs that loop again, as a
    graph), and its outputs, slices of the kernel's buffers, may be changed in place like nn.LSTM's."""
    impl, device = target
    torch.manual_seed(0)
    model = onlstm.ONLSTM(2, 4, chunk_size=2).to(device)
    x = torch.randn(3, 2, 2, device=device)
    hessians = {}
    for name in (impl, "reference"):
        model.impl = name
        hessians[name] = torch.autograd.functional.hessian(lambda z: model(z)[0].pow(2).sum(), x)
    assert hessians[impl].abs().sum() > 0
    torch.testing.assert_close(hessians[impl], hessians["reference"], rtol=1e-4, atol=1e-5)
    model.impl = impl
    out, (h, _) = model(x)
    out[1:, 0] = 0
    h.mul_(2)
    assert not out[1:, 0].any()


def test_the_fused_step_runs_split_in_float64_where_triton_has_no_float64_product(target, monkeypatch):
    """Tritons 3.3 and 3.4 (torch 2.7's, 2.8's) refuse a float64 ``tl.dot``: the fused step asked for in float64 then runs split,
    and a float64 layer gives the reference loop's outputs and gradients on either answer of the probe."""
    from onlstm.nn import triton_kernel as tk

    impl, device = target
    kernel, x32, x64 = _fused_kernel(impl), torch.zeros(1, device=device), torch.zeros(1, device=device).double()
    answer = tk.fp64_dot(device)
    assert kernel.route(6, 2, x32) == "fused" and kernel.route(6, 2, x64) == ("fused" if answer else "split")
    monkeypatch.setenv(tk.STEP_ENV, "fused")
    m = layer(device, 3, 6, chunk_size=2).double()
    x = torch.randn(4, 2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).to(device)
    want = forward_backward(m, "reference", x.requires_grad_(), None, seed=1)
    for said in (True, False):
        monkeypatch.setitem(tk._fp64_dot, device.type, said)
        assert kernel.route(6, 2, x64) == ("fused" if said else "split") and kernel.route(6, 2, x32) == "fused"
        if said and not answer:
            continue  # this Triton cannot run it
        got = forward_backward(m, impl, x, None, seed=1)
        assert all(torch.allclose(a, b, rtol=1e-9, atol=1e-10) for a, b in zip(got, want))


# --------------------------------------------------------------------------- the interpreter's shortcut


def test_the_interpreters_shortcut_changes_no_bit_and_leaves_a_different_triton_alone(interpreter, monkeypatch):
    """``patch_interpreter_once``: a ``@triton.jit`` helper called inside a launch no longer patches
    ``triton.language`` again. Fewer patches, and the outputs and gradients of both steps (split, fused) are
    bitwise those of Triton's own patching; a Triton without the patch scope it relies on is left as it is."""
    from triton.runtime import interpreter as ti

    from onlstm.nn.triton_kernel import patch_interpreter_once

    if getattr(ti, "_LangPatchScope", None) is None:  # a Triton without the scope (3.5, torch 2.9's): left alone
        before = getattr(ti, "_patch_lang", None)
        assert not patch_interpreter_once() and getattr(ti, "_patch_lang", None) is before
        return
    original = getattr(ti._patch_lang, "original", ti._patch_lang)
    calls = []

    def counted(fn):
        calls.append(fn)
        return original(fn)

    def run():
        calls.clear()
        m = layer("cpu", 3, 6, chunk_size=2, bidirectional=True)
        x = torch.randn(4, 2, 3, generator=torch.Generator().manual_seed(5), requires_grad=True)
        split = forward_backward(m, interpreter, x, None, seed=1)
        gen = torch.Generator().manual_seed(0)
        inputs = [torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((5, 3), (20, 3), (20, 4), (20,))]
        inputs += [torch.zeros(2, 4, dtype=torch.float64)] * 2
        fused = _layer_outputs_and_grads(_fused_kernel(interpreter), inputs, torch.tensor([2, 2, 1]), 2, False, True)
        return split + fused, len(calls)

    monkeypatch.setattr(ti, "_patch_lang", counted)  # Triton's own, counted
    plain, plain_patches = run()
    assert patch_interpreter_once() and ti._patch_lang.original is counted
    fast, fast_patches = run()
    assert 0 < fast_patches < plain_patches  # a launch still patches; its helpers' calls no longer do
    assert all(torch.equal(a, b) for a, b in zip(fast, plain))

    monkeypatch.setattr(ti, "_patch_lang", counted)
    monkeypatch.delattr(ti, "_LangPatchScope")
    assert not patch_interpreter_once() and ti._patch_lang is counted
