"""The Triton kernel checks itself against the reference loop on first use (onlstm.nn.selfcheck).

Run on CPU tensors under Triton's interpreter (``impl='triton_interpret'``, the same kernel and the same
check as on CUDA); a deliberately broken kernel is made by patching the kernel class.
"""

import dataclasses
import json
import warnings

import pytest
import torch

pytest.importorskip("triton")

import onlstm
from onlstm.cli import main
from onlstm.nn import kernels, selfcheck
from onlstm.nn.triton_kernel import TritonKernel, register_interpreter_kernel

CPU = torch.device("cpu")


@pytest.fixture
def impl():
    name = register_interpreter_kernel()
    if kernels.load_kernel(name) is None:
        kernels.unregister_kernel(name)
        pytest.skip(f"Triton interpreter not usable here: {kernels.kernel_error(name)}")
    selfcheck.reset()
    yield name
    selfcheck.reset()
    kernels.unregister_kernel(name)


def broken_outputs(monkeypatch):
    """The kernel's output 1% off: a wrong kernel that still runs."""
    forward = TritonKernel.forward

    def wrong(self, *args, **kwargs):
        res = forward(self, *args, **kwargs)
        return dataclasses.replace(res, out=res.out * 1.01)

    monkeypatch.setattr(TritonKernel, "forward", wrong)


def run(model, x):
    """Forward and backward; the warnings raised meanwhile."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = model(x)[0]
        out.sum().backward()
    return out.detach(), [w for w in caught if "self-check" in str(w.message)]


def layer(impl, hidden=8, **kw):
    torch.manual_seed(0)
    return onlstm.ONLSTM(3, hidden, chunk_size=2, impl=impl, **kw)


def test_a_correct_kernel_passes_once_per_configuration_and_leaves_the_random_state_alone(impl):
    m = layer(impl)
    x = torch.randn(5, 2, 3)
    state = torch.random.get_rng_state()
    _, warned = run(m, x)
    assert warned == [] and torch.equal(torch.random.get_rng_state(), state)
    run(m, x)  # the same configuration: no second check
    with torch.autocast("cpu", dtype=torch.bfloat16):  # products in bf16: another configuration
        run(m, x)
    done = selfcheck.results()
    assert [(r.products, r.passed) for r in done] == [("float32", True), ("bfloat16", True)]
    assert done[0].error < done[0].tolerance == selfcheck.TOLERANCE["full"]
    assert done[1].tolerance == selfcheck.TOLERANCE["reduced"]
    assert m.resolved_impl(CPU) == impl


def test_a_wrong_kernel_warns_once_and_the_process_uses_the_reference_loop(impl, monkeypatch, capsys):
    broken_outputs(monkeypatch)
    m = layer(impl)
    x = torch.randn(5, 2, 3)
    out, warned = run(m, x)
    assert len(warned) == 1
    message = str(warned[0].message)
    assert "hidden=8 chunk=2" in message and "in output" in message and "reference loop" in message
    m.impl = "reference"
    torch.testing.assert_close(out, m(x)[0].detach(), rtol=0, atol=0)  # it was the reference loop
    m.impl = impl
    assert m.resolved_impl(CPU) == "reference"
    other = layer(impl, hidden=6)  # another size on the same device and dtype: reference, no new warning
    _, warned = run(other, x)
    assert warned == [] and other.resolved_impl(CPU) == "reference"
    capsys.readouterr()
    assert main(["info", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["kernel_selfcheck"]
    assert entry["passed"] is False and entry["worst"] == "output" and entry["error"] == pytest.approx(0.01, rel=1e-3)


def test_a_kernel_that_raises_fails_its_check_with_the_reason(impl, monkeypatch):
    def fails(self, *args, **kwargs):
        raise RuntimeError("invalid device function")

    monkeypatch.setattr(TritonKernel, "backward", fails)
    m = layer(impl)
    _, warned = run(m, torch.randn(4, 1, 3))  # the layer's own backward runs the reference loop too
    assert len(warned) == 1 and "raised RuntimeError: invalid device function" in str(warned[0].message)
    (result,) = selfcheck.results()
    assert result.error is None and not result.passed


def test_the_variable_turns_the_check_off(impl, monkeypatch, capsys):
    monkeypatch.setenv(selfcheck.ENV, "0")
    broken_outputs(monkeypatch)
    m = layer(impl)
    x = torch.randn(5, 2, 3)
    out, warned = run(m, x)
    assert warned == [] and selfcheck.results() == [] and m.resolved_impl(CPU) == impl
    m.impl = "reference"
    assert not torch.allclose(out, m(x)[0].detach())  # the broken kernel did run
    assert main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kernel_selfcheck"] == f"off ({selfcheck.ENV}=0)"


def test_the_check_runs_inside_inference_mode(impl):
    m = layer(impl, master_input="reverse").eval()
    with torch.inference_mode():
        m(torch.randn(3, 2, 3))
    (result,) = selfcheck.results()
    assert result.passed and "master_input=reverse" in result.sizes
