"""What a PyTorch user does with ``nn.LSTM`` beyond one forward and backward, done with ``onlstm.ONLSTM``'s
kernels: second derivatives (Hessians, gradient penalties), ``torch.func`` transforms, changing an output in
place, an empty batch, and the constructor's checks of ``nn.LSTM``'s arguments.

The kernels' backward is hand-written and has no graph; a second derivative runs the reference loop again inside
the backward (kernels._differentiable_backward) and ``torch.func`` transforms run the reference loop: both are
checked against the reference loop's own derivatives and against finite differences (gradgradcheck, float64)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import onlstm
from onlstm.nn import kernels

KERNELS = ["cpp", "fused"]


def make(impl: str, *args, seed: int = 0, **kw) -> onlstm.ONLSTM:
    torch.manual_seed(seed)
    model = onlstm.ONLSTM(*args, impl=impl, **kw).double()
    if model.resolved_impl(torch.device("cpu"), torch.float64) != impl:
        pytest.skip(f"impl={impl!r} does not run here: {kernels.kernel_error(impl)}")
    return model


def scalar(model: onlstm.ONLSTM, x, hx=None) -> torch.Tensor:
    """Every output of the layer in one nonlinear scalar, so that no second derivative is trivially zero."""
    out, (h, c), d = model(x, hx, return_distances=True)
    if isinstance(out, torch.nn.utils.rnn.PackedSequence):
        out, forget = out.data, d.forget.data
    else:
        forget = d.forget
    return out.sin().sum() + h.pow(2).sum() + (c * h).sum() + forget.pow(2).sum()


@pytest.mark.parametrize("impl", KERNELS)
@pytest.mark.parametrize("mode", ["paper", "reverse"])
def test_second_derivatives_through_a_kernel_pass_gradgradcheck(impl, mode):
    model = make(impl, 2, 2, num_layers=2, chunk_size=1, bidirectional=True, master_input=mode)
    x = torch.randn(3, 1, 2, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(4, 1, 2, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(4, 1, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x, h0, c0: scalar(model, x, (h0, c0)), (x, h0, c0))


@pytest.mark.parametrize("impl", KERNELS)
def test_second_derivatives_of_the_weights_on_a_packed_sequence(impl):
    model = make(impl, 2, 4, chunk_size=2)
    x = torch.randn(3, 3, 2, dtype=torch.float64)
    packed = pack_padded_sequence(x, torch.tensor([3, 1, 2]), enforce_sorted=False)
    names = ["weight_ih_l0", "weight_hh_l0", "bias_hh_l0"]
    params = tuple(getattr(model, n).detach().clone().requires_grad_() for n in names)

    def f(*ws):
        return scalar_of(torch.func.functional_call(model, dict(zip(names, ws)), (packed,)))

    def scalar_of(result):
        out, (h, _c) = result
        return out.data.pow(2).sum() + h.pow(3).sum()

    assert torch.autograd.gradgradcheck(f, params)


@pytest.mark.parametrize("impl", KERNELS)
def test_a_hessian_through_a_kernel_equals_the_reference_loops(impl):
    model = make(impl, 2, 4, chunk_size=2)
    x = torch.randn(3, 2, 2, dtype=torch.float64)
    hessians = {}
    for name in (impl, "reference"):
        model.impl = name
        hessians[name] = torch.autograd.functional.hessian(lambda z: model(z)[0].pow(2).sum(), x)
    assert hessians[impl].abs().sum() > 0  # once, the kernel's backward gave a Hessian of zeros
    torch.testing.assert_close(hessians[impl], hessians["reference"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("impl", KERNELS)
def test_a_gradient_penalty_trains(impl):
    model = make(impl, 3, 4, chunk_size=2)
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    out, _ = model(x)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    (out.pow(2).mean() + g.pow(2).sum()).backward()
    grads = {}
    for name in (impl, "reference"):
        model.zero_grad()
        model.impl = name
        xr = x.detach().requires_grad_()
        out, _ = model(xr)
        (g,) = torch.autograd.grad(out.sum(), xr, create_graph=True)
        (out.pow(2).mean() + g.pow(2).sum()).backward()
        grads[name] = [p.grad.clone() for p in model.parameters()]
    for a, b in zip(grads[impl], grads["reference"]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("impl", KERNELS)
def test_torch_func_transforms_equal_the_eager_layer(impl):
    model = make(impl, 2, 4, chunk_size=2)
    x = torch.randn(3, 1, 2, dtype=torch.float64)
    jac = torch.func.jacrev(lambda z: model(z)[0].sum())(x)
    xr = x.clone().requires_grad_()
    model(xr)[0].sum().backward()
    torch.testing.assert_close(jac, xr.grad)
    xs = torch.randn(4, 3, 1, 2, dtype=torch.float64)
    batched = torch.func.vmap(lambda z: model(z)[0])(xs)
    torch.testing.assert_close(batched, torch.stack([model(z)[0] for z in xs]))
    assert model.resolved_impl(x.device, x.dtype) == impl  # the transforms' detour ends with them


@pytest.mark.parametrize("impl", KERNELS + ["reference"])
def test_outputs_may_be_changed_in_place(impl):
    model = make(impl, 3, 4, chunk_size=2)
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    out, (h, _c) = model(x)
    out[3:, 1] = 0  # masking padded steps, as nn.LSTM's output allows
    h.mul_(2)
    assert out[3:, 1].abs().sum() == 0
    with torch.no_grad():
        out, _ = model(x)
        out.zero_()


@pytest.mark.cpp
def test_an_output_changed_in_place_is_not_differentiated_wrongly():
    """Changing a saved output in place and then differentiating through it is refused (autograd's version
    check), as for any PyTorch operation; it never gives silently wrong gradients."""
    model = make("cpp", 3, 4, chunk_size=2)
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    out, _ = model(x)
    out.mul_(2)
    with pytest.raises(RuntimeError, match="inplace"):
        out.sum().backward()


@pytest.mark.parametrize(
    "kw", [dict(), dict(batch_first=True), dict(num_layers=2, bidirectional=True)], ids=["plain", "bf", "bi"]
)
def test_an_empty_batch_gives_nn_lstms_shapes_and_a_backward(kw):
    model, reference = onlstm.ONLSTM(3, 4, chunk_size=2, **kw), torch.nn.LSTM(3, 4, **kw)
    x = torch.randn(0, 5, 3) if kw.get("batch_first") else torch.randn(5, 0, 3)
    out, (h, c), d = model(x, return_distances=True)
    want, (want_h, want_c) = reference(x)
    assert (out.shape, h.shape, c.shape) == (want.shape, want_h.shape, want_c.shape)
    assert d.forget.shape == d.input.shape == (*out.shape[:2], model.num_layers * model.num_directions)
    out.sum().backward()
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    out, (h, _) = model(x, (torch.zeros_like(h), torch.zeros_like(c)))
    assert out.shape == want.shape and h.shape == want_h.shape
    with pytest.raises(ValueError, match="empty sequence dimension"):
        model(x.transpose(0, 1)[:0] if not kw.get("batch_first") else x.transpose(0, 1)[:, :0])


def test_an_empty_batchs_final_cell_state_comes_from_c0():
    """``c_n`` of an empty batch was built from ``h_0``: a loss on it sent its gradient to ``h_0`` and left ``c_0``
    without one, where ``nn.LSTM`` gives both."""
    model = onlstm.ONLSTM(3, 4, chunk_size=2, num_layers=2)
    for rnn in (model, torch.nn.LSTM(3, 4, num_layers=2)):
        h0, c0 = (torch.zeros(2, 0, 4, requires_grad=True) for _ in range(2))
        _, (_, c_n) = rnn(torch.randn(5, 0, 3), (h0, c0))
        c_n.sum().backward()
        assert c0.grad is not None and c0.grad.shape == c0.shape, type(rnn).__name__


@pytest.mark.parametrize("flag", ["bias", "batch_first", "bidirectional"])
def test_flags_must_be_bools_as_in_nn_lstm(flag):
    with pytest.raises(TypeError, match=f"{flag} should be of type bool, got: str"):
        onlstm.ONLSTM(3, 4, **{flag: "no"})  # a string would be truthy: batch_first="no" would read batch-first
    if flag == "bias":
        with pytest.raises(TypeError, match="bias should be of type bool, got: int"):
            onlstm.ONLSTMCell(3, 4, 1, bias=0)


def test_nn_lstm_arguments_where_they_differ():
    assert onlstm.ONLSTM(3, 4, proj_size=0).hidden_size == 4
    # code written for nn.LSTM reads the attribute (the output width: proj_size or hidden_size)
    assert onlstm.ONLSTM(3, 4).proj_size == torch.nn.LSTM(3, 4).proj_size == 0
    with pytest.raises(ValueError, match="no projection"):
        onlstm.ONLSTM(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="4th positional argument is chunk_size"):
        onlstm.ONLSTM(3, 4, 1, True)  # nn.LSTM's positional bias=True
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\]"):
        onlstm.ONLSTM(3, 4, num_layers=2, dropout=1.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        onlstm.ONLSTM(3, 4, num_layers=2, dropout=1.0)  # nn.LSTM takes p = 1 too
        assert not caught
        onlstm.ONLSTM(3, 4, dropout=0.5)
    assert len(caught) == 1 and "num_layers=1" in str(caught[0].message)
    assert caught[0].filename == __file__  # the warning points at the caller's line
