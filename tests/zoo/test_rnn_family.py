"""The Elman RNN, SRU and QRNN encoders: their equations (hand-computed cases and step loops written here from
docs/encoders.md, not the modules' code), their registry entries and their options."""

from __future__ import annotations

import json
import math

import pytest
import torch

from onlstm import encoders as E
from onlstm.lm.config import load_config
from onlstm.models import LanguageModel, LMConfig
from onlstm.zoo import QRNN, SRU, qrnn_reference, sru_reference
from support import CONFIGS

sigmoid = torch.sigmoid


@pytest.fixture(autouse=True)
def _double():
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # equality with the step loops down to rounding
    yield
    torch.set_default_dtype(dtype)


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------- SRU


def sru_by_equations(layer: SRU, x: torch.Tensor, c: torch.Tensor):
    """docs/encoders.md's SRU equations, one step at a time; weight rows: W, W_f, W_r[, W_p]; bias: b_f, b_r."""
    H = layer.hidden_size
    W, Wf, Wr, Wp = layer.weight[:H], layer.weight[H : 2 * H], layer.weight[2 * H : 3 * H], layer.weight[3 * H :]
    bf, br = layer.bias[:H], layer.bias[H:]
    outs = []
    for x_t in x:
        f = sigmoid(x_t @ Wf.T + bf)
        r = sigmoid(x_t @ Wr.T + br)
        c = f * c + (1 - f) * (x_t @ W.T)
        skip = x_t @ Wp.T if x.shape[-1] != H else x_t
        outs.append(r * torch.tanh(c) + (1 - r) * skip)
    return torch.stack(outs), c


def test_sru_by_hand():
    layer = SRU(1, 1)
    with torch.no_grad():  # z = 2x, f = r = 1/2, no projection (in == out)
        layer.weight.copy_(torch.tensor([[2.0], [0.0], [0.0]]))
        layer.bias.zero_()
    out, (h, c), dist = layer(torch.ones(2, 1, 1))
    # c1 = 0 / 2 + 2 / 2 = 1;  c2 = 1 / 2 + 2 / 2 = 1.5;  h = tanh(c) / 2 + x / 2
    expected = [0.5 * math.tanh(1.0) + 0.5, 0.5 * math.tanh(1.5) + 0.5]
    close(out.flatten(), torch.tensor(expected))
    close(c.flatten(), torch.tensor([1.5]))
    close(h.flatten(), torch.tensor(expected[1:]))
    assert dist is None


@pytest.mark.parametrize("input_size", [4, 6])  # with and without the projection of the highway term
def test_sru_equals_its_equations_step_by_step(input_size):
    torch.manual_seed(0)
    layer = SRU(input_size, 6)
    with torch.no_grad():
        layer.bias.uniform_(-1, 1)  # non-zero biases, so their place is checked too
    assert layer.weight.shape == ((4 if input_size != 6 else 3) * 6, input_size)
    x, c0 = torch.randn(7, 3, input_size), torch.randn(3, 6)
    out, (h, c), _ = layer(x, (torch.randn(1, 3, 6), c0.unsqueeze(0)))  # h of hx is not part of the recurrence
    want, want_c = sru_by_equations(layer, x, c0)
    close(out, want)
    close(c[0], want_c)
    close(h[0], want[-1])


def test_sru_fast_path_equals_its_step_reference_with_gradients():
    torch.manual_seed(1)
    layer, x = SRU(5, 6), torch.randn(6, 2, 5, requires_grad=True)
    fast, (h, c), _ = layer(x)
    grads = torch.autograd.grad(fast.sum() + c.sum(), [x, *layer.parameters()])
    ref, (h_ref, c_ref) = sru_reference(layer, x)
    close(fast, ref)
    close(c, c_ref)
    close(h, h_ref)
    for g, g_ref in zip(grads, torch.autograd.grad(ref.sum() + c_ref.sum(), [x, *layer.parameters()])):
        close(g, g_ref)


# --------------------------------------------------------------------------- QRNN


def qrnn_by_equations(layer: QRNN, x: torch.Tensor, c: torch.Tensor, x_prev: torch.Tensor):
    """docs/encoders.md's QRNN equations; weight rows z, f, o; columns: x_t's weights, then x_{t-1}'s."""
    H, n = layer.hidden_size, x.shape[-1]
    W_now, W_prev, b = layer.weight[:, :n], layer.weight[:, n:], layer.bias
    outs = []
    for x_t in x:
        pre = x_t @ W_now.T + x_prev @ W_prev.T + b
        z, f, o = torch.tanh(pre[:, :H]), sigmoid(pre[:, H : 2 * H]), sigmoid(pre[:, 2 * H :])
        c = f * c + (1 - f) * z
        outs.append(o * c)
        x_prev = x_t
    return torch.stack(outs), c


def test_qrnn_by_hand():
    layer = QRNN(1, 1)
    with torch.no_grad():  # z = tanh(x_t + x_{t-1}), f = o = 1/2
        layer.weight.copy_(torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]))
        layer.bias.zero_()
    out, (h, c, x_last), _ = layer(torch.tensor([1.0, 2.0]).view(2, 1, 1))
    c1 = 0.5 * math.tanh(1.0)  # x_{-1} = 0
    c2 = 0.5 * c1 + 0.5 * math.tanh(3.0)
    close(out.flatten(), torch.tensor([0.5 * c1, 0.5 * c2]))
    close(c.flatten(), torch.tensor([c2]))
    close(h.flatten(), torch.tensor([0.5 * c2]))
    close(x_last.flatten(), torch.tensor([2.0]))


def test_qrnn_equals_its_equations_step_by_step():
    torch.manual_seed(2)
    layer = QRNN(4, 6)
    x, c0, x0 = torch.randn(7, 3, 4), torch.randn(3, 6), torch.randn(3, 4)
    out, (h, c, x_last), _ = layer(x, (torch.zeros(1, 3, 6), c0.unsqueeze(0), x0.unsqueeze(0)))
    want, want_c = qrnn_by_equations(layer, x, c0, x0)
    close(out, want)
    close(c[0], want_c)
    close(x_last[0], x[-1])
    close(h[0], want[-1])
    ref, ref_state = qrnn_reference(layer, x, (h, c0.unsqueeze(0), x0.unsqueeze(0)))
    close(ref, out)
    for a, b in zip(ref_state, (h, c, x_last)):
        close(a, b)


def test_a_wrong_carried_state_says_what_is_expected():
    with pytest.raises(ValueError, match=r"hx x_last must have shape \(1, 3, 4\), got \(1, 3, 6\)"):
        QRNN(4, 6)(torch.randn(2, 3, 4), (torch.zeros(1, 3, 6),) * 3)
    with pytest.raises(ValueError, match=r"hx must be a tuple \(h, c\)"):
        SRU(4, 6)(torch.randn(2, 3, 4), torch.zeros(1, 3, 6))
    with pytest.raises(ValueError, match="expected input features of size 4, got 5"):
        SRU(4, 6)(torch.randn(2, 3, 5))


# --------------------------------------------------------------------------- Elman RNN


@pytest.mark.parametrize("nonlinearity, g", [("tanh", torch.tanh), ("relu", torch.relu)])
def test_rnn_applies_its_nonlinearity(nonlinearity, g):
    torch.manual_seed(3)
    layer = E.make_encoder("rnn", 3, 4, nonlinearity=nonlinearity)
    rnn = layer.rnn
    x = torch.randn(5, 2, 3)
    out, h_last, _ = layer(x)
    h = torch.zeros(2, 4)
    for t, x_t in enumerate(x):  # h_t = g(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)
        h = g(x_t @ rnn.weight_ih_l0.T + rnn.bias_ih_l0 + h @ rnn.weight_hh_l0.T + rnn.bias_hh_l0)
        close(out[t], h)
    close(h_last[0], h)
    with pytest.raises(E.EncoderError, match="rnn option nonlinearity must be one of tanh, relu, got 'sigmoid'"):
        E.make_encoder("rnn", 3, 4, nonlinearity="sigmoid")


def test_rnn_dropconnect_scales_the_recurrent_weights_in_eval():
    torch.manual_seed(4)
    layer = E.make_encoder("rnn", 3, 4, dropconnect=0.25).eval()
    x = torch.randn(5, 2, 3)
    plain = E.make_encoder("rnn", 3, 4).eval()
    plain.load_state_dict(layer.state_dict())
    with torch.no_grad():
        plain.rnn.weight_hh_l0.mul_(0.75)  # not inverted: eval uses (1 - p) W_hh
    close(layer(x)[0], plain(x)[0])


# --------------------------------------------------------------------------- registry entries and presets


def test_registry_declares_the_family():
    for name in ("rnn", "sru", "qrnn"):
        spec = E.get(name)
        assert not spec.yields_distances and spec.causal and spec.stateful and spec.description
    assert E.get("rnn").option_names == ("nonlinearity", "dropconnect")
    assert E.get("sru").option_names == () and E.get("qrnn").option_names == ()
    # SRU and QRNN have no hidden-to-hidden weights: DropConnect asked for explicitly is an error ...
    for name in ("sru", "qrnn"):
        with pytest.raises(E.EncoderError, match=rf"encoder '{name}' does not accept the option\(s\) dropconnect"):
            E.make_encoder(name, 3, 4, dropconnect=0.3)
    assert "sru" not in E.accepted_by("dropconnect") and "rnn" in E.accepted_by("dropconnect")


@pytest.mark.parametrize("name", ["rnn", "sru", "qrnn"])
def test_the_cpu_preset_builds_every_new_encoder(name):
    """... while a preset's shared dropconnect field reaches only the encoders that declare it."""
    model = dict(load_config(CONFIGS / "lm" / "ptb-cpu.yaml").model)
    assert model["dropconnect"] == 0.3 and model["chunk_size"] == 10
    cfg = LMConfig.from_dict({**model, "vocab_size": 50, "cell": name})
    assert cfg.layer_options() == ({"dropconnect": 0.3} if name == "rnn" else {})
    lm = LanguageModel(cfg)
    assert [layer.hidden_size for layer in lm.layers] == [400, 400, 200]
    out, state, _ = lm(torch.randint(0, 50, (6, 2)))
    assert out.shape == (6, 2, 200) and len(state) == 3


def test_the_zoo_imports_nothing_of_the_project_but_nn_and_errors():
    """docs/design.md §4.2: encoders.py imports the zoo to register its layers, so the zoo stays below it
    (it may raise the project's one error type, a leaf module)."""
    from test_architecture import PACKAGE, imported_modules

    for path in sorted((PACKAGE / "zoo").glob("*.py")):
        module = f"onlstm.zoo.{path.stem}"
        outside = {
            m
            for m in imported_modules(path.read_text(), module)
            if not m.startswith(("onlstm.zoo", "onlstm.nn", "onlstm.errors"))
        }
        assert not outside, f"{module} imports {sorted(outside)}"


def test_a_logic_comparison_of_the_family(tmp_path):
    from onlstm.cli import main
    from onlstm.logic.generate import GenerateConfig, generate_dataset

    data, out = tmp_path / "data", tmp_path / "cmp"
    generate_dataset(data, GenerateConfig(per_length=12, seed=4, max_ops=6, test_count=4))
    sizes = ["--emb-size", "8", "--hidden-size", "12", "--mlp-hidden", "8", "--epochs", "1", "--batch-size", "32"]
    argv = ["logic", "compare", "--data", str(data), "--out", str(out), "--cells", "rnn", "sru", "qrnn", *sizes]
    torch.set_default_dtype(torch.float32)  # a training run, not an equality check
    assert main([*argv, "--no-progress", "--lengths", "1-6"]) == 0
    result = json.loads((out / "compare.json").read_text())
    assert result["cells"] == ["rnn", "sru", "qrnn"]
