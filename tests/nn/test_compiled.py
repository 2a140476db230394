"""Under torch.compile the layer runs the C++ kernel as operators (``onlstm::cpp_forward``, ``cpp_backward``;
src/onlstm/nn/cpp_ops.py) instead of tracing its step loop: the compiled model equals the eager one, outputs and
gradients, and one graph serves every sequence length. These tests compile with ``aot_eager`` (the operators'
autograd, no C++ code generation, seconds); tests/nn/test_layer.py compiles with inductor, the default."""

from __future__ import annotations

import pytest
import torch

import onlstm
from onlstm.nn import cpp_ops


def _layer(**kw) -> onlstm.ONLSTM:
    torch.manual_seed(0)
    layer = onlstm.ONLSTM(3, 8, chunk_size=2, **kw)
    if layer.resolved_impl(torch.device("cpu")) != "cpp":
        pytest.skip("the C++ kernel does not run here: the compiled layer traces the step loop (tested below)")
    return layer


def _compile(layer, **kw):
    """The layer compiled with ``aot_eager``, and the graphs the compiler made (one per compilation)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    return torch.compile(layer, fullgraph=True, backend=backend, **kw), graphs


def _ops(graph) -> list[str]:
    return [str(n.target) for n in graph.graph.nodes if n.op == "call_function" and "onlstm" in str(n.target)]


def _outputs_and_grads(layer, x, hx):
    x = x.detach().requires_grad_()
    layer.zero_grad()
    out, (h, c), dist = layer(x, hx, return_distances=True)
    # every output in the loss: each gradient path of the backward operator is used
    (out.sin().sum() + h.cos().sum() + (c * c).sum() + (dist.forget * dist.input).sum()).backward()
    return [out, h, c, dist.forget, dist.input, x.grad] + [p.grad for p in layer.parameters()]


def test_the_compiled_layer_runs_one_operator_per_layer_and_direction_and_equals_eager():
    layer = _layer(num_layers=2, bidirectional=True, dropout=0.0)
    x, hx = torch.randn(6, 3, 3), (torch.randn(4, 3, 8), torch.randn(4, 3, 8))
    want = _outputs_and_grads(layer, x, hx)
    compiled, graphs = _compile(layer)
    got = _outputs_and_grads(compiled, x, hx)
    assert _ops(graphs[-1]) == ["onlstm.cpp_forward.default"] * 4
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-6)  # the same kernel: equal up to summation order


def test_one_graph_serves_every_sequence_length_and_batch():
    layer = _layer()
    compiled, graphs = _compile(layer, dynamic=True)
    first = None
    for steps, batch in ((5, 2), (9, 2), (2, 3), (40, 4)):  # sizes of 1 get graphs of their own
        x = torch.randn(steps, batch, 3)
        torch.testing.assert_close(compiled(x)[0], layer(x)[0], atol=1e-6, rtol=1e-6)
        first = first or len(graphs)  # (dynamo may trace the first call twice: it restarts its analysis)
    assert len(graphs) == first, "compiled again for another length or batch"


def test_the_operators_pass_torch_librarys_checks():
    # the fake implementations' shapes against the kernel's, the schema, the autograd registration
    torch.manual_seed(0)
    _layer()
    steps, batch, hidden, chunk = 4, 3, 8, 2
    gates = 4 * hidden + 2 * hidden // chunk
    x, w_ih, w_hh = torch.randn(steps * batch, 3), torch.randn(gates, 3), torch.randn(gates, hidden)
    args = (x, w_ih, w_hh, torch.randn(gates), torch.randn(batch, hidden), torch.randn(batch, hidden),
            torch.full((steps,), batch), chunk, False)  # fmt: skip
    for t in args[:6]:
        t.requires_grad_()
    torch.library.opcheck(cpp_ops.cpp_forward, args)
    out, h_n, c_n, dist, act, cells, bf16 = cpp_ops.cpp_forward(*args)
    x, w_ih, w_hh, _, h0, c0, batch_sizes = (t.detach() for t in args[:7])
    grads = [torch.randn_like(t) for t in (out, h_n, c_n, dist)]
    saved = (x, w_ih, w_hh, h0, c0, batch_sizes, out.detach(), act.detach(), cells.detach(), bf16)
    torch.library.opcheck(cpp_ops.cpp_backward, (*grads, *saved, chunk, False))


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
