"""Under torch.compile the layer runs its kernel as operators (``onlstm::layer_forward``, ``layer_backward``;
src/onlstm/nn/kernel_ops.py) instead of tracing its step loop: the compiled model equals the eager one, outputs and
gradients, and one graph serves every sequence length. The C++ kernel, and the Triton kernel in its CPU interpreter
(the CUDA kernel's code, run by numpy: on a GPU the same operator runs it compiled). These tests compile with
``aot_eager`` (the operators' autograd, no code generation, seconds); tests/nn/test_layer.py compiles with
inductor, the default."""

from __future__ import annotations

import pytest
import torch

import onlstm
from onlstm.nn import kernel_ops, kernels


@pytest.fixture(params=["cpp", "interpreter"], ids=["cpp", "triton_interpret"])
def impl(request) -> str:
    """The C++ kernel, or the Triton kernel in its interpreter (tests/nn/conftest.py)."""
    return request.getfixturevalue(request.param) if request.param != "cpp" else "cpp"


def _layer(impl="cpp", **kw) -> onlstm.ONLSTM:
    torch.manual_seed(0)
    layer = onlstm.ONLSTM(3, 8, chunk_size=2, impl="auto" if impl == "cpp" else impl, **kw)
    if layer.resolved_impl(torch.device("cpu")) != impl:
        pytest.skip(f"{impl} does not run here: the compiled layer traces the step loop (tested below)")
    return layer


def _compile(layer, **kw):
    """The layer compiled with ``aot_eager``, and the graphs the compiler made (one per compilation)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    return torch.compile(layer, backend=backend, **{"fullgraph": True, **kw}), graphs


def _ops(graph) -> list[str]:
    return [str(n.target) for n in graph.graph.nodes if n.op == "call_function" and "onlstm" in str(n.target)]


def _outputs_and_grads(layer, x, hx):
    x = x.detach().requires_grad_()
    layer.zero_grad()
    out, (h, c), dist = layer(x, hx, return_distances=True)
    # every output in the loss: each gradient path of the backward operator is used
    (out.sin().sum() + h.cos().sum() + (c * c).sum() + (dist.forget * dist.input).sum()).backward()
    return [out, h, c, dist.forget, dist.input, x.grad] + [p.grad for p in layer.parameters()]


def test_the_compiled_layer_runs_one_operator_per_layer_and_direction_and_equals_eager(impl):
    layer = _layer(impl, num_layers=2, bidirectional=True, dropout=0.0)
    x, hx = torch.randn(6, 3, 3), (torch.randn(4, 3, 8), torch.randn(4, 3, 8))
    want = _outputs_and_grads(layer, x, hx)
    compiled, graphs = _compile(layer)
    got = _outputs_and_grads(compiled, x, hx)
    assert _ops(graphs[-1]) == ["onlstm.layer_forward.default"] * 4
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-6)  # the same kernel: equal up to summation order


def test_export_is_read_from_its_flag_not_from_the_call_a_compiler_may_fold(monkeypatch):
    """torch 2.10's compiler folds ``torch.compiler.is_exporting()`` to True under any torch.compile, so the layer took
    every compilation for an export and traced its reference loop (checked in a torch 2.10 environment: no operator
    in the graph before, the operator after). The layer reads export's own flag; the call decides only in a torch
    without the flag. (Forcing the call to True in a whole compilation would change torch's own paths as well.)"""
    from onlstm.nn import modules

    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)  # what 2.10's compiler answers
    assert not modules._exporting()  # the flag: False, no export running
    monkeypatch.setattr(torch.compiler, "_is_exporting_flag", True)  # what torch.export sets
    assert modules._exporting()
    monkeypatch.delattr(torch.compiler, "_is_exporting_flag")
    assert modules._exporting()  # no flag: the call


def test_outputs_left_out_of_the_loss_get_no_gradient_and_the_rest_are_right(impl):
    layer = _layer(impl)
    x = torch.randn(4, 2, 3, requires_grad=True)

    def grads(model):
        x.grad = None
        layer.zero_grad()
        model(x)[1][1].sum().backward()  # only c_n: the output, h_n and the distances get no gradient
        return [x.grad] + [p.grad for p in layer.parameters()]

    want = grads(layer)
    for g, w in zip(grads(_compile(layer)[0]), want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-6)


def test_a_packed_sequence_compiles_in_pieces_and_still_runs_the_operators():
    # its batch sizes are data: the compiler breaks the graph where they are read, the layers stay operators
    from torch.nn.utils.rnn import pack_sequence

    layer = _layer("cpp", num_layers=2)
    xs = [torch.randn(n, 3) for n in (5, 2, 4)]

    def run(model):
        layer.zero_grad()
        out, (h, c) = model(pack_sequence(xs, enforce_sorted=False))
        (out.data.sin().sum() + h.sum() + c.cos().sum()).backward()
        return [out.data.detach(), h.detach(), c.detach()] + [p.grad for p in layer.parameters()]

    want = run(layer)
    compiled, graphs = _compile(layer, fullgraph=False)
    for g, w in zip(run(compiled), want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-6)
    assert [op for graph in graphs for op in _ops(graph)] == ["onlstm.layer_forward.default"] * 2


def test_one_graph_serves_every_sequence_length_and_batch():
    layer = _layer("cpp")
    compiled, graphs = _compile(layer, dynamic=True)
    first = None
    for steps, batch in ((5, 2), (9, 2), (2, 3), (40, 4)):  # sizes of 1 get graphs of their own
        x = torch.randn(steps, batch, 3)
        torch.testing.assert_close(compiled(x)[0], layer(x)[0], atol=1e-6, rtol=1e-6)
        first = first or len(graphs)  # (dynamo may trace the first call twice: it restarts its analysis)
    assert len(graphs) == first, "compiled again for another length or batch"


# packed once: the operators pass the batch sizes on, and the Triton kernel's packed path is tests/nn/test_triton.py's
@pytest.mark.parametrize(
    ("kernel", "packed"), [("cpp", False), ("cpp", True), ("interpreter", False)], ids=["cpp", "cpp-packed", "triton"]
)
def test_the_operators_pass_torch_librarys_checks(request, kernel, packed):
    # the fake implementations' shapes against the kernel's, the schema, the autograd registration
    impl = request.getfixturevalue(kernel) if kernel != "cpp" else "cpp"
    torch.manual_seed(0)
    _layer(impl)
    steps, batch, hidden, chunk = 4, 3, 8, 2
    gates, sizes = 4 * hidden + 2 * hidden // chunk, [3, 3, 2, 1] if packed else [batch] * steps
    x, w_ih, w_hh = torch.randn(sum(sizes), 3), torch.randn(gates, 3), torch.randn(gates, hidden)
    args = (x, w_ih, w_hh, torch.randn(gates), torch.randn(batch, hidden), torch.randn(batch, hidden),
            torch.tensor(sizes) if packed else None, chunk, False, impl, torch.float32)  # fmt: skip
    for t in args[:6]:
        t.requires_grad_()
    torch.library.opcheck(kernel_ops.layer_forward, args)
    out, h_n, c_n, dist, act, cells, mm = kernel_ops.layer_forward(*args)
    x, w_ih, w_hh, _, h0, c0 = (t.detach() for t in args[:6])
    grads = [torch.randn_like(t) for t in (out, h_n, c_n, dist)]
    saved = (x, w_ih, w_hh, h0, c0, args[6], out.detach(), act.detach(), cells.detach(), mm)
    torch.library.opcheck(kernel_ops.layer_backward, (*grads, *saved, chunk, False, impl, torch.float32))
    torch.library.opcheck(kernel_ops.layer_backward, (None, None, grads[2], None, *saved, chunk, False, impl,
                                                      torch.float32))  # fmt: skip


def test_without_the_cpp_kernel_the_compiled_layer_traces_the_step_loop():
    torch.manual_seed(0)
    layer = onlstm.ONLSTM(3, 8, chunk_size=2, impl="fused")
    x = torch.randn(2, 2, 3)  # two steps: the loop is unrolled, each step traced
    compiled, graphs = _compile(layer)
    torch.testing.assert_close(compiled(x)[0], layer(x)[0], atol=1e-6, rtol=1e-6)
    assert not _ops(graphs[0])


def test_the_layer_marks_its_choice_constant_as_torch_does_without_importing_the_compiler():
    import subprocess
    import sys

    from onlstm.nn import modules

    def probe(): ...

    torch.compiler.assume_constant_result(probe)
    assert vars(probe) and vars(probe).items() <= vars(modules._chosen_impl).items()  # the same mark
    code = "import sys, onlstm; print('torch._dynamo' in sys.modules)"  # the compiler costs seconds to import
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


@pytest.mark.parametrize("setting", ["on", "off"])
def test_under_bfloat16_autocast_the_compiled_layer_takes_the_products_the_eager_one_takes(monkeypatch, setting):
    # the autocast is inside the compiled function, where the compiler turns it into casts: the operator is told
    # the products' dtype while tracing, and its backward reads the one the forward took
    from onlstm.nn import cpp_gemm

    layer, kernel = _layer("cpp"), kernels.load_kernel("cpp")
    monkeypatch.setenv(cpp_gemm.BF16_ENV, setting)
    kernel.forget_bf16()

    def step(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return layer(x)[0].float()

    x = torch.randn(5, 2, 3)
    try:
        want = _grads_of(step, layer, x)
        if setting == "on" and not kernel.bf16[0]:  # "on" cannot force products the CPU's libraries refuse
            pytest.skip(f"no bfloat16 products on this CPU: {kernel.bf16[1]}")
        assert kernel.bf16[0] == (setting == "on"), kernel.bf16
        got = _grads_of(torch.compile(step, fullgraph=True, backend="aot_eager"), layer, x)
        plain = _grads_of(lambda t: layer(t)[0], layer, x)
    finally:
        kernel.forget_bf16()
    for g, w, p in zip(got, want, plain, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-6)  # the same kernel, the same products
        # bfloat16 keeps 8 bits of mantissa: its products move the figures far beyond float32's summation order
        assert (setting == "on") == (not torch.allclose(g, p, atol=1e-4, rtol=0))


def _grads_of(fn, layer, x):
    x = x.detach().requires_grad_()
    layer.zero_grad()
    out = fn(x)
    out.pow(2).sum().backward()
    return [out.detach(), x.grad] + [p.grad.clone() for p in layer.parameters()]


def test_on_cuda_the_operators_outputs_stay_on_the_gpu():
    # what the compiler plans from, with fake CUDA tensors (no GPU needed): an output on the CPU would be a CPU node
    # in the compiled graph, which torch.compile's CUDA graphs ("reduce-overhead") leave out of their capture
    from torch._subclasses.fake_tensor import FakeTensorMode

    steps, batch, hidden, chunk = 4, 3, 8, 2
    gates = 4 * hidden + 2 * hidden // chunk
    with FakeTensorMode():
        x, w_ih, w_hh = (torch.empty(*s, device="cuda") for s in ((steps * batch, 3), (gates, 3), (gates, hidden)))
        h0 = torch.empty(batch, hidden, device="cuda")
        outs = kernel_ops.layer_forward(x, w_ih, w_hh, None, h0, h0, None, chunk, False, "triton", torch.float32)
        out, h_n, c_n, dist, act, cells, mm = outs
        grads = kernel_ops.layer_backward(out, h_n, c_n, dist, x, w_ih, w_hh, h0, h0, None, out, act, cells, mm,
                                          chunk, False, "triton", torch.float32)  # fmt: skip
    assert {t.device.type for t in (*outs, *grads)} == {"cuda"}
