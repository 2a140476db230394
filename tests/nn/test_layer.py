"""The ON-LSTM layer checked against the maths, against itself (fast == reference) and nn.LSTM's contract."""

import itertools
import os

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import onlstm
from onlstm.nn import functional as Fn
from onlstm.nn import kernels
from support import buildable

FAST = buildable(["cpp", "fused"])
ALL = ["reference"] + FAST


def make(impl, *args, seed=0, dtype=torch.float64, **kw):
    torch.manual_seed(seed)
    return onlstm.ONLSTM(*args, impl=impl, **kw).to(dtype)


def run_all(model, x, hx, impls, seed=1, return_distances=True):
    """Forward+backward with each implementation from the same RNG state; everything it produced."""
    res = {}
    for impl in impls:
        model.impl = impl
        torch.manual_seed(seed)
        out, (h, c), d = model(x, hx, return_distances=True)
        if isinstance(out, torch.nn.utils.rnn.PackedSequence):
            out, df, di = out.data, d.forget.data, d.input.data
        else:
            df, di = d.forget, d.input
        gen = torch.Generator().manual_seed(7)
        weights = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in (out, h, c, df, di)]
        loss = sum((w * t).sum() for w, t in zip(weights, (out, h, c, df, di)))
        leaves = [
            t
            for t in ([x.data if isinstance(x, torch.nn.utils.rnn.PackedSequence) else x] + list(hx or []))
            if t.requires_grad
        ]
        grads = torch.autograd.grad(loss, leaves + list(model.parameters()))
        res[impl] = [out, h, c, df, di, *grads]
    return res


def assert_all_close(res, ref="reference", atol=1e-9, rtol=1e-7):
    for impl, vals in res.items():
        for i, (a, b) in enumerate(zip(res[ref], vals)):
            torch.testing.assert_close(
                b, a, atol=atol, rtol=rtol, msg=lambda m, impl=impl, i=i: f"{impl} item {i}: {m}"
            )


# ---------------------------------------------------------------------------------------------
# cumax and the master gates
# ---------------------------------------------------------------------------------------------


def test_cumax_hand_computed():
    x = torch.log(torch.tensor([1.0, 2.0, 1.0]))  # softmax = [.25, .5, .25]
    torch.testing.assert_close(onlstm.cumax(x), torch.tensor([0.25, 0.75, 1.0]))
    y = torch.randn(4, 6)
    c = onlstm.cumax(y)
    assert torch.all(c[:, 1:] >= c[:, :-1]) and torch.allclose(c[:, -1], torch.ones(4))


def test_master_input_modes_hand_computed():
    logits = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64))
    torch.testing.assert_close(
        Fn.master_input(logits, "paper"), torch.tensor([0.9, 0.7, 0.4, 0.0], dtype=torch.float64)
    )
    torch.testing.assert_close(Fn.master_input(logits, "paper"), 1 - onlstm.cumax(logits))
    torch.testing.assert_close(
        Fn.master_input(logits, "reverse"), torch.tensor([1.0, 0.9, 0.7, 0.4], dtype=torch.float64)
    )
    assert Fn.master_input(logits, "paper")[-1].item() == 0.0


# ---------------------------------------------------------------------------------------------
# The cell update against the piecewise form with hard (one-hot) master gates
# ---------------------------------------------------------------------------------------------


def piecewise(c, c_hat, i, f, a, b, n, C, mode):
    """Seed-paper form: below the forget split take the candidate, above the input split keep the
    old cell, in the overlap act like an LSTM, in a gap between the two regions write zero."""
    out = torch.empty_like(c)
    for k in range(n):
        sl = slice(k * C, (k + 1) * C)
        forget_on = k >= a  # f~_k = 1
        input_on = k < b if mode == "paper" else k <= b  # i~_k = 1
        if forget_on and input_on:
            out[:, sl] = f[:, sl] * c[:, sl] + i[:, sl] * c_hat[:, sl]
        elif forget_on:
            out[:, sl] = c[:, sl]
        elif input_on:
            out[:, sl] = c_hat[:, sl]
        else:
            out[:, sl] = 0.0
    return out


@pytest.mark.parametrize("mode", ["paper", "reverse"])
@pytest.mark.parametrize("impl", ALL)
def test_hard_master_gates_give_piecewise_update(mode, impl):
    n, C, B = 5, 3, 4
    D = n * C
    gen = torch.Generator().manual_seed(3)
    for a, b in itertools.product(range(n), range(n)):
        pre = torch.randn(B, 2 * n + 4 * D, generator=gen, dtype=torch.float64)
        pre[:, : 2 * n] = 0.0
        pre[:, b] = 1e4  # master input one-hot at b
        pre[:, n + a] = 1e4  # master forget one-hot at a
        c = torch.randn(B, D, generator=gen, dtype=torch.float64)
        m = make(impl, 3, D, chunk_size=C, master_input=mode)
        with torch.no_grad():
            m.weight_ih_l0.zero_()
            m.weight_hh_l0.zero_()
            m.bias_ih_l0.copy_(pre[0])
            m.bias_hh_l0.zero_()
        x = torch.zeros(1, 1, 3, dtype=torch.float64)
        _, (h1, c1), d = m(x, (torch.zeros(1, 1, D, dtype=torch.float64), c[:1].unsqueeze(0)), return_distances=True)
        o, ch, i, f = pre[:1, 2 * n :].view(1, 4, D).unbind(1)
        want = piecewise(c[:1], torch.tanh(ch), torch.sigmoid(i), torch.sigmoid(f), a, b, n, C, mode)
        torch.testing.assert_close(c1[0], want, atol=1e-12, rtol=0)
        torch.testing.assert_close(h1[0], torch.sigmoid(o) * torch.tanh(want), atol=1e-12, rtol=0)
        # distances: forget = 1 - mean(f~) = a / n; input = mean(i~)
        assert d.forget.item() == pytest.approx(a / n)
        assert d.input.item() == pytest.approx((b if mode == "paper" else b + 1) / n)


def reference_code_cell(x, hx, cx, w_ih, b_ih, w_hh, b_hh, n, C):
    """The authors' cell, re-typed from its description (cell kept as (B, n, C), 1 - cumsoftmax)."""
    gates = F.linear(x, w_ih, b_ih) + F.linear(hx, w_hh, b_hh)
    cin, cforget = gates[:, : n * 2].chunk(2, 1)
    outg, cell, ing, forg = gates[:, n * 2 :].view(-1, n * 4, C).chunk(4, 1)
    cin = 1.0 - torch.cumsum(torch.softmax(cin, -1), -1)
    cforget = torch.cumsum(torch.softmax(cforget, -1), -1)
    d_f = 1.0 - cforget.sum(-1) / n
    d_i = cin.sum(-1) / n
    cin, cforget = cin[:, :, None], cforget[:, :, None]
    ing, forg, cell, outg = torch.sigmoid(ing), torch.sigmoid(forg), torch.tanh(cell), torch.sigmoid(outg)
    overlap = cforget * cin
    forg = forg * overlap + (cforget - overlap)
    ing = ing * overlap + (cin - overlap)
    cy = forg * cx + ing * cell
    hy = outg * torch.tanh(cy)
    return hy.view(-1, n * C), cy, d_f, d_i


@pytest.mark.parametrize("impl", ALL)
def test_weights_in_reference_layout_give_reference_outputs(impl):
    n, C, I, B, T = 4, 5, 6, 3, 7
    D = n * C
    m = make(impl, I, D, chunk_size=C, master_input="paper")
    x = torch.randn(T, B, I, dtype=torch.float64)
    out, (_h_n, c_n), d = m(x, return_distances=True)
    hx, cx = torch.zeros(B, D, dtype=torch.float64), torch.zeros(B, n, C, dtype=torch.float64)
    for t in range(T):
        hx, cx, d_f, d_i = reference_code_cell(
            x[t], hx, cx, m.weight_ih_l0, m.bias_ih_l0, m.weight_hh_l0, m.bias_hh_l0, n, C
        )
        torch.testing.assert_close(out[t], hx)
        torch.testing.assert_close(d.forget[t, :, 0], d_f)
        torch.testing.assert_close(d.input[t, :, 0], d_i)
    torch.testing.assert_close(c_n[0], cx.view(B, D))


@pytest.mark.parametrize("impl", ALL)
def test_paper_top_chunk_stays_zero_reverse_does_not(impl):
    n, C = 4, 3
    torch.manual_seed(0)
    x = torch.randn(30, 5, 6, dtype=torch.float64)
    for mode in ("paper", "reverse"):
        m = make(impl, 6, n * C, chunk_size=C, master_input=mode)
        c0 = torch.zeros(1, 5, n * C, dtype=torch.float64)
        with torch.no_grad():
            # step by step, so every intermediate cell is seen
            h, c = torch.zeros_like(c0), c0
            tops = []
            for t in range(30):
                _, (h, c) = m(x[t : t + 1], (h, c))
                tops.append(c[0, :, -C:].abs().max().item())
        if mode == "paper":
            assert max(tops) == 0.0
        else:
            assert min(tops) > 1e-6


def test_single_chunk_paper_layer_outputs_zeros():
    m = make("reference", 3, 4, chunk_size=4, master_input="paper")
    out, _ = m(torch.randn(5, 2, 3, dtype=torch.float64))
    assert out.abs().max().item() == 0.0


# ---------------------------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["paper", "reverse"])
def test_gradcheck_cell(mode):
    torch.manual_seed(0)
    cell = onlstm.ONLSTMCell(3, 6, chunk_size=2, master_input=mode).double()
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    h = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    c = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)

    names = [k for k, _ in cell.named_parameters()]

    def f(x, h, c, *params):
        (h1, c1), d = torch.func.functional_call(
            cell, dict(zip(names, params)), (x, (h, c)), {"return_distances": True}
        )
        return h1, c1, d.forget, d.input

    params = [p.detach().clone().requires_grad_(True) for p in cell.parameters()]
    assert torch.autograd.gradcheck(f, (x, h, c, *params))


@pytest.mark.parametrize("impl", FAST)
@pytest.mark.parametrize("mode", ["paper", "reverse"])
def test_gradcheck_fast_path(impl, mode):
    from onlstm.nn.kernels import fused_layer, kernel_error, load_kernel

    kernel = load_kernel(impl)
    assert kernel is not None, f"the {impl} kernel failed to load: {kernel_error(impl)}"
    torch.manual_seed(0)
    n, C, I = 3, 2, 4
    D, G = n * C, 4 * n * C + 2 * n
    bs = torch.tensor([3, 3, 2, 1])  # a packed batch with unequal lengths
    N = int(bs.sum())
    x = torch.randn(N, I, dtype=torch.float64, requires_grad=True)
    w_ih = (0.5 * torch.randn(G, I, dtype=torch.float64)).requires_grad_()
    w_hh = (0.5 * torch.randn(G, D, dtype=torch.float64)).requires_grad_()
    b = (0.5 * torch.randn(G, dtype=torch.float64)).requires_grad_()
    h0 = torch.randn(3, D, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(3, D, dtype=torch.float64, requires_grad=True)

    def f(x, w_ih, w_hh, b, h0, c0):
        return fused_layer(x, w_ih, w_hh, b, h0, c0, bs, C, mode == "reverse", kernel)

    assert torch.autograd.gradcheck(f, (x, w_ih, w_hh, b, h0, c0))


# ---------------------------------------------------------------------------------------------
# NaN and Inf: every implementation gives a non-finite value exactly where the reference does
# ---------------------------------------------------------------------------------------------


def poison(m, x, where):
    """Put a NaN (or an Inf) into the input or into one weight, in place."""
    with torch.no_grad():
        if where == "nan-input":
            x[2, 1, 0] = float("nan")
        elif where == "inf-input":
            x[3, 0, 1] = float("inf")
        elif where == "nan-weight_hh":  # one unit's output gate (rows 2n.. are o)
            m.weight_hh_l0[2 * m.n_chunks + 3, 7] = float("nan")
        elif where == "nan-weight_ih":  # one master-forget logit
            m.weight_ih_l0[m.n_chunks + 1, 2] = float("nan")


@pytest.mark.parametrize("where", ["nan-input", "inf-input", "nan-weight_hh", "nan-weight_ih"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_non_finite_values_propagate_as_in_the_reference(where, dtype, bidirectional):
    m = make("reference", 4, 10, chunk_size=5, dtype=dtype, bidirectional=bidirectional)  # issue #13's layer
    x = torch.randn(6, 3, 4, dtype=dtype)
    poison(m, x, where)
    x.requires_grad_(True)
    res = run_all(m, x, None, ALL)
    ref = res["reference"]
    out, x_grad = ref[0], ref[5]
    assert out.isnan().any(), "the poisoned value must reach the output"
    if where != "nan-weight_ih":  # a NaN master-forget logit reaches every unit at once: all NaN
        assert out.isfinite().any(), "the case must mix non-finite and finite outputs"
    if where == "nan-input":  # the NaN reaches row 1 from step 2 on (up to step 2 in the reverse direction)
        assert out[:, [0, 2]].isfinite().all() and out[2:, 1, :10].isnan().all() and out[:2, 1, :10].isfinite().all()
        if bidirectional:
            assert out[:3, 1, 10:].isnan().all() and out[3:, 1, 10:].isfinite().all()
        assert x_grad[:, [0, 2]].isfinite().all() and x_grad[:, 1].isnan().any()
    for impl, vals in res.items():
        for i, (a, b) in enumerate(zip(ref, vals)):
            for kind in ("isnan", "isposinf", "isneginf"):
                assert torch.equal(getattr(b, kind)(), getattr(a, kind)()), f"{impl} item {i}: {kind} differs"
            fin = a.isfinite()
            torch.testing.assert_close(
                b[fin],
                a[fin],
                atol=2e-5 if dtype == torch.float32 else 1e-9,
                rtol=1e-4 if dtype == torch.float32 else 1e-7,
                msg=lambda msg, impl=impl, i=i: f"{impl} item {i}: {msg}",
            )


# ---------------------------------------------------------------------------------------------
# Fast == reference, chunked == whole, packed == alone
# ---------------------------------------------------------------------------------------------

CONFIGS = [
    dict(input_size=5, hidden_size=6, num_layers=1, chunk_size=2),
    dict(input_size=4, hidden_size=12, num_layers=2, chunk_size=3, bidirectional=True),
    dict(input_size=3, hidden_size=8, num_layers=3, chunk_size=4, master_input="paper", bias=False),
    dict(input_size=5, hidden_size=6, num_layers=2, chunk_size=1, dropout=0.3, dropconnect=0.4, bidirectional=True),
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("train", [True, False])
def test_fast_equals_reference(cfg, train):
    m = make("reference", **cfg)
    m.train(train)
    x = torch.randn(6, 3, cfg["input_size"], dtype=torch.float64, requires_grad=True)
    L = cfg["num_layers"] * (2 if cfg.get("bidirectional") else 1)
    hx = tuple(torch.randn(L, 3, cfg["hidden_size"], dtype=torch.float64, requires_grad=True) for _ in range(2))
    assert_all_close(run_all(m, x, hx, ALL))


def test_fast_equals_reference_float32_paper_size():
    m = make("reference", 40, 50, num_layers=2, chunk_size=10, dtype=torch.float32, dropconnect=0.45)
    x = torch.randn(12, 4, 40, requires_grad=True)
    assert_all_close(run_all(m, x, None, ALL), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("cfg", CONFIGS[1:3])
def test_packed_fast_equals_reference(cfg):
    m = make("reference", **cfg)
    lengths = torch.tensor([2, 6, 4, 1, 6])
    x = torch.randn(6, 5, cfg["input_size"], dtype=torch.float64)
    packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
    packed.data.requires_grad_(True)
    assert_all_close(run_all(m, packed, None, ALL))


@pytest.mark.parametrize("impl", ALL)
@pytest.mark.parametrize("cfg", CONFIGS[:3])
def test_two_chunks_with_carried_state_equal_one_pass(impl, cfg):
    if cfg.get("bidirectional"):
        cfg = dict(cfg, bidirectional=False)  # a backward direction cannot be split in time
    m = make(impl, **cfg).eval()
    x = torch.randn(9, 2, cfg["input_size"], dtype=torch.float64)
    out, (h, c), d = m(x, return_distances=True)
    o1, s1, d1 = m(x[:4], return_distances=True)
    o2, s2, d2 = m(x[4:], s1, return_distances=True)
    torch.testing.assert_close(torch.cat([o1, o2]), out)
    torch.testing.assert_close(s2[0], h)
    torch.testing.assert_close(s2[1], c)
    torch.testing.assert_close(torch.cat([d1.forget, d2.forget]), d.forget)
    torch.testing.assert_close(torch.cat([d1.input, d2.input]), d.input)


@pytest.mark.parametrize("impl", ALL)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_packed_batch_equals_each_sequence_alone(impl, bidirectional):
    m = make(impl, 3, 6, num_layers=2, chunk_size=2, bidirectional=bidirectional).eval()
    lengths = torch.tensor([3, 7, 1, 5])
    x = torch.randn(7, 4, 3, dtype=torch.float64)
    x[torch.arange(7).unsqueeze(1) >= lengths] = float("nan")  # padding must never be read
    L = 2 * (2 if bidirectional else 1)
    hx = tuple(torch.randn(L, 4, 6, dtype=torch.float64) for _ in range(2))
    packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, (h, c), d = m(packed, hx, return_distances=True)
    out_pad, _ = pad_packed_sequence(out)
    df_pad, _ = pad_packed_sequence(d.forget)
    di_pad, _ = pad_packed_sequence(d.input)
    for b, n in enumerate(lengths.tolist()):
        ob, (hb, cb), db = m(x[:n, b : b + 1], (hx[0][:, b : b + 1], hx[1][:, b : b + 1]), return_distances=True)
        torch.testing.assert_close(out_pad[:n, b], ob[:, 0])
        torch.testing.assert_close(h[:, b], hb[:, 0])
        torch.testing.assert_close(c[:, b], cb[:, 0])
        torch.testing.assert_close(df_pad[:n, b], db.forget[:, 0])
        torch.testing.assert_close(di_pad[:n, b], db.input[:, 0])


# ---------------------------------------------------------------------------------------------
# Shapes and options, as nn.LSTM
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ALL)
@pytest.mark.parametrize("batch_first,bidirectional,unbatched", list(itertools.product([False, True], repeat=3)))
def test_shapes_match_nn_lstm(impl, batch_first, bidirectional, unbatched):
    kw = dict(num_layers=2, batch_first=batch_first, bidirectional=bidirectional)
    lstm = torch.nn.LSTM(5, 8, **kw)
    m = onlstm.ONLSTM(5, 8, chunk_size=4, impl=impl, **kw)
    x = torch.randn(7, 5) if unbatched else (torch.randn(3, 7, 5) if batch_first else torch.randn(7, 3, 5))
    o1, (h1, c1) = lstm(x)
    o2, (h2, c2), d = m(x, return_distances=True)
    assert o2.shape == o1.shape and h2.shape == h1.shape and c2.shape == c1.shape
    assert d.forget.shape == d.input.shape == o1.shape[:-1] + (2 * (2 if bidirectional else 1),)
    if batch_first and not unbatched:  # distances follow the output's layout
        m.batch_first = False
        _, _, d_tf = m(x.transpose(0, 1), return_distances=True)
        torch.testing.assert_close(d_tf.forget.transpose(0, 1), d.forget)


def test_an_unknown_impl_is_refused():
    ref = make("reference", 3, 6, chunk_size=2)
    for name in ("python", "cuda"):  # "python" was fused's name before 0.1
        with pytest.raises(ValueError, match="impl must be one of"):
            ref.impl = name


def test_bfloat16_runs_on_the_reference_path():
    m = make("auto", 4, 6, chunk_size=3, dtype=torch.bfloat16)
    x = torch.randn(5, 2, 4, dtype=torch.bfloat16)
    assert m.resolved_impl(x.device, x.dtype) == "reference"
    out, (_h, _c) = m(x)
    assert out.dtype == torch.bfloat16 and out.shape == (5, 2, 6)
    ref = make("reference", 4, 6, chunk_size=3, dtype=torch.float32)
    ref.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
    # bfloat16 keeps 8 bits of mantissa (relative error 2**-8 per rounding, compounded over 5 steps and the
    # products' sums): 5e-2 is about ten roundings' worth at these sizes
    torch.testing.assert_close(out.float(), ref(x.float())[0], atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("impl", ALL)
def test_distances_under_autocast_have_the_outputs_dtype(impl):
    """Under bfloat16 autocast the kernels give float32 outputs and distances; the reference loop (also what
    torch.compile runs) gave float32 outputs but bfloat16 distances, computed from gates in the products' dtype."""
    m = make(impl, 3, 6, num_layers=2, chunk_size=2, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _, d = m(torch.randn(4, 2, 3), return_distances=True)
        _, d_cell = onlstm.ONLSTMCell(3, 6, 2)(torch.randn(2, 3), return_distances=True)
    assert d.forget.dtype == d.input.dtype == out.dtype == torch.float32
    assert d_cell.forget.dtype == d_cell.input.dtype == torch.float32


def test_parameter_names_match_nn_lstm():
    lstm = torch.nn.LSTM(5, 8, num_layers=2, bidirectional=True)
    m = onlstm.ONLSTM(5, 8, num_layers=2, chunk_size=4, bidirectional=True)
    assert [k for k, _ in m.named_parameters()] == [k for k, _ in lstm.named_parameters()]
    assert m.weight_ih_l1_reverse.shape == (4 * 8 + 2 * 2, 16)
    assert [[p.shape for p in ps] for ps in m.all_weights][0] == [(36, 5), (36, 8), (36,), (36,)]
    m.flatten_parameters()


def test_dropconnect_one_mask_per_call_and_scaled_in_eval():
    p = 0.4
    m = make("reference", 3, 6, chunk_size=2, dropconnect=p)
    plain = make("reference", 3, 6, chunk_size=2)
    plain.load_state_dict(m.state_dict())
    x = torch.randn(8, 2, 3, dtype=torch.float64)
    for impl in ALL:
        m.impl = impl
        torch.manual_seed(5)
        out, _ = m(x)
        torch.manual_seed(5)
        keep = torch.empty_like(m.weight_hh_l0).uniform_() >= p  # the one mask for the whole call
        with torch.no_grad():
            plain.weight_hh_l0.copy_(m.weight_hh_l0 * keep)
        torch.testing.assert_close(out, plain(x)[0])
        m.eval()
        with torch.no_grad():
            plain.weight_hh_l0.copy_(m.weight_hh_l0 * (1 - p))
        torch.testing.assert_close(m(x)[0], plain(x)[0])
        m.train()


def _flatten_like_cudnn(self):
    """What ``nn.LSTM.flatten_parameters`` does on cuDNN (on the CPU it does nothing): the tensors the module holds
    are copied into one new buffer and moved there (``set_``)."""
    weights = self._flat_weights
    buffer = torch.cat([w.detach().reshape(-1) for w in weights])
    offset = 0
    with torch.no_grad():
        for w in weights:
            w.set_(buffer.untyped_storage(), offset, w.shape)
            offset += w.numel()


def test_dropconnect_on_a_torch_lstm_leaves_its_parameters_where_they_are(monkeypatch):
    """DropConnect on ``nn.LSTM`` (``dropconnect_call``) swaps ``weight_hh_l0``, after which cuDNN re-flattens the
    weights the module holds. Given the module's own parameters, it moved them into a buffer of the call, and a CUDA
    graph's replays copied stale values over the optimizer's updates (seen on an H200). The parameters must stay
    where they are, and the call must still be the masked step, with a gradient for every parameter."""
    from onlstm.nn.modules import dropconnect_call

    monkeypatch.setattr(torch.nn.LSTM, "flatten_parameters", _flatten_like_cudnn)
    lstm = torch.nn.LSTM(3, 4).double()
    where = {n: p.data_ptr() for n, p in lstm.named_parameters()}
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    torch.manual_seed(3)
    out, _ = dropconnect_call(lstm, 0.5, True, x)
    assert {n: p.data_ptr() for n, p in lstm.named_parameters()} == where
    torch.manual_seed(3)
    keep = torch.empty_like(lstm.weight_hh_l0).uniform_() >= 0.5
    plain = torch.nn.LSTM(3, 4).double()
    plain.load_state_dict(lstm.state_dict())
    with torch.no_grad():
        plain.weight_hh_l0.mul_(keep)
    torch.testing.assert_close(out, plain(x)[0])
    out.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in lstm.parameters())


def test_cell_step_loop_equals_layer():
    torch.manual_seed(0)
    cell = onlstm.ONLSTMCell(4, 6, chunk_size=3, dropconnect=0.3).double()
    layer = onlstm.ONLSTM(4, 6, chunk_size=3, dropconnect=0.3, impl="reference").double()
    layer.load_state_dict({k + "_l0": v for k, v in cell.state_dict().items()})
    x = torch.randn(5, 2, 4, dtype=torch.float64)
    torch.manual_seed(9)
    out, (_h_n, c_n), d = layer(x, return_distances=True)
    torch.manual_seed(9)
    cell.sample_mask()
    h = c = None
    for t in range(5):
        (h, c), dist = cell(x[t], None if h is None else (h, c), return_distances=True)
        torch.testing.assert_close(h, out[t])
        torch.testing.assert_close(dist.forget, d.forget[t, :, 0])
    torch.testing.assert_close(c, c_n[0])
    # unbatched
    (h1, c1) = cell.eval()(x[0, 0])
    assert h1.shape == (6,) and c1.shape == (6,)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(input_size=0, hidden_size=4), "input_size must be a positive integer"),
        (dict(input_size=3, hidden_size=-4), "hidden_size must be a positive integer"),
        (dict(input_size=3, hidden_size=10, chunk_size=3), "divisible by chunk_size"),
        (dict(input_size=3, hidden_size=4, chunk_size=0), "chunk_size must be a positive integer"),
        (dict(input_size=3, hidden_size=4, num_layers=0), "num_layers must be a positive integer"),
        (dict(input_size=3, hidden_size=4, dropout=1.5), "dropout must be a probability"),
        (dict(input_size=3, hidden_size=4, dropconnect=-0.1), "dropconnect must be a probability"),
        (dict(input_size=3, hidden_size=4, master_input="forward"), "master_input must be one of"),
        (dict(input_size=3, hidden_size=4, impl="cuda"), "impl must be one of"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        onlstm.ONLSTM(**kwargs)


def test_bad_cell_arguments():
    with pytest.raises(ValueError, match="divisible by chunk_size"):
        onlstm.ONLSTMCell(3, 10, chunk_size=4)
    cell = onlstm.ONLSTMCell(3, 4, chunk_size=2)
    with pytest.raises(ValueError, match="expected input of shape"):
        cell(torch.randn(2, 2, 3))
    with pytest.raises(ValueError, match="input has 5 features, expected input_size=3"):
        cell(torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"expected c of shape \(2, 4\)"):
        cell(torch.randn(2, 3), (torch.zeros(2, 4), torch.zeros(2, 2, 2)))


@pytest.mark.parametrize("impl", ALL)
def test_bad_forward_input(impl):
    m = onlstm.ONLSTM(3, 4, num_layers=2, chunk_size=2, impl=impl)
    with pytest.raises(ValueError, match="expected input of 3 dimensions"):
        m(torch.randn(2, 3, 4, 3))
    with pytest.raises(ValueError, match="Expected 3, got 5"):
        m(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="floating-point"):
        m(torch.ones(2, 3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"expected h_0 of shape \(2, 3, 4\)"):
        m(torch.randn(2, 3, 3), (torch.zeros(1, 3, 4), torch.zeros(2, 3, 4)))
    with pytest.raises(ValueError, match=r"expected c_0 of shape \(2, 3, 4\)"):
        m(torch.randn(2, 3, 3), (torch.zeros(2, 3, 4), torch.zeros(2, 3, 5)))
    with pytest.raises(ValueError, match=r"expected h_0 of shape \(2, 4\)"):
        m(torch.randn(5, 3), (torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)))
    # one tensor, as a GRU takes: the message names the layer, the pair and both shapes
    pair = r"ONLSTM: hx must be a pair \(h_0, c_0\) of tensors of shape \(2, 3, 4\), got a tensor of shape \(2, 3, 4\)"
    with pytest.raises(ValueError, match=pair):
        m(torch.randn(2, 3, 3), torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="empty"):
        m(torch.randn(0, 3, 3))


@pytest.mark.cuda
def test_cuda_matches_cpu():
    m = make("auto", 5, 8, num_layers=2, chunk_size=2, dtype=torch.float32)
    x = torch.randn(6, 3, 5)
    out_cpu, _, d_cpu = m(x, return_distances=True)
    out_gpu, _, d_gpu = m.cuda()(x.cuda(), return_distances=True)
    # auto picks the Triton kernel where it loads (first seen on an H100, issue #33), else the reference loop
    expected = "triton" if kernels.load_kernel("triton") is not None else "reference"
    assert m.resolved_impl(x.cuda().device) == expected
    torch.testing.assert_close(out_gpu.cpu(), out_cpu, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(d_gpu.forget.cpu(), d_cpu.forget, atol=1e-5, rtol=1e-4)


@pytest.mark.cuda
def test_a_cuda_graph_of_the_layer_gives_the_eager_step():
    """docs/layer.md, "CUDA graphs": one forward+backward replayed from a graph equals the eager one, twice
    (the second replay reuses the graphs' buffers; the row-index copies captured must still hold)."""
    m = make("auto", 6, 20, num_layers=2, chunk_size=5, dtype=torch.float32).cuda()
    x = torch.randn(7, 3, 6, device="cuda", requires_grad=True)

    class First(torch.nn.Module):  # a Module, so that the graphs take the layer's parameters as inputs too
        def __init__(self):
            super().__init__()
            self.layer = m

        def forward(self, inp):
            return self.layer(inp)[0]

    def step(fn):
        for t in [*m.parameters(), x]:
            t.grad = None
        out = fn(x)
        kept = out.detach().clone()
        out.sum().backward()
        return [kept] + [t.grad.detach().clone() for t in [*m.parameters(), x]]

    eager = step(First())
    graphed = torch.cuda.make_graphed_callables(First(), (x,))
    for _ in range(2):
        for got, want in zip(step(graphed), eager):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


# -- issue 13: clear errors from the Python API --------------------------------------------------------


def test_a_float64_input_into_a_float32_layer_says_what_to_convert():
    x = torch.randn(5, 2, 4, dtype=torch.float64)
    lstm_message = None
    try:
        torch.nn.LSTM(4, 10)(x)
    except (ValueError, RuntimeError) as exc:  # nn.LSTM names both dtypes and the two fixes
        lstm_message = str(exc)
    assert lstm_message and "float64" in lstm_message and "float32" in lstm_message
    with pytest.raises(
        ValueError, match=r"input dtype \(torch.float64\) does not match weight dtype \(torch.float32\)"
    ):
        onlstm.ONLSTM(4, 10, chunk_size=5)(x)
    with pytest.raises(ValueError, match=r"model.to\(torch.float64\)"):
        onlstm.ONLSTMCell(4, 10, chunk_size=5)(x[0])
    assert onlstm.ONLSTM(4, 10, chunk_size=5).double()(x)[0].dtype == torch.float64  # the suggested fix works


@pytest.mark.parametrize("cell", [False, True], ids=["ONLSTM", "ONLSTMCell"])
def test_a_float64_state_into_a_float32_layer_says_what_to_convert(cell):
    # issue 48: the state was not checked, and the kernel's matmul raised a bare RuntimeError
    layer = onlstm.ONLSTMCell(4, 10, chunk_size=5) if cell else onlstm.ONLSTM(4, 10, chunk_size=5)
    x = torch.randn(2, 4) if cell else torch.randn(5, 2, 4)
    shape = (2, 10) if cell else (1, 2, 10)
    hx = (torch.zeros(shape, dtype=torch.float64), torch.zeros(shape))
    with pytest.raises(ValueError, match=r"dtype \(torch.float64\) does not match the layer's weight dtype") as err:
        layer(x, hx)
    assert "to(torch.float32)" in str(err.value) and "model.to(torch.float64)" in str(err.value)
    assert layer(x, tuple(t.float() for t in hx))[0].dtype == torch.float32  # the suggested conversion works


def _tiny_layer_and_input():
    torch.manual_seed(0)
    return onlstm.ONLSTM(3, 4, chunk_size=2).eval(), torch.randn(3, 2, 3)  # impl 'auto': the fastest kernel


@pytest.mark.slow  # compiling takes tens of seconds
def test_torch_export_traces_the_layer_and_matches_eager():
    # issue 48: the batch sizes of a padded input were read back from a tensor (a data-dependent guard)
    layer, x = _tiny_layer_and_input()
    out, (h, c), dist = layer(x, return_distances=True)
    exported = torch.export.export(layer, (x,), {"return_distances": True}).module()
    e_out, (e_h, e_c), e_dist = exported(x, return_distances=True)
    for got, want in ((e_out, out), (e_h, h), (e_c, c), (e_dist.forget, dist.forget), (e_dist.input, dist.input)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.slow  # tracing takes seconds
def test_torch_export_with_a_dynamic_batch_matches_eager_at_every_batch_size():
    # int() on the batch sizes fixed the batch to the example's, and the reverse direction's row order was built
    # from Python ints: an exported model served one batch size only. The time loop is Python, so the sequence
    # length stays the example's (docs/layer.md, Compiling)
    torch.manual_seed(0)
    layer = onlstm.ONLSTM(3, 4, num_layers=2, chunk_size=2, bidirectional=True).eval()
    x, hx = torch.randn(3, 2, 3), (torch.randn(4, 2, 4), torch.randn(4, 2, 4))
    batch = torch.export.Dim("batch", min=1, max=64)
    shapes = ({1: batch}, ({1: batch}, {1: batch}))
    exported = torch.export.export(layer, (x, hx), dynamic_shapes=shapes).module()
    for b in (1, 2, 5):
        x_b, hx_b = torch.randn(3, b, 3), (torch.randn(4, b, 4), torch.randn(4, b, 4))
        out, (h, c) = layer(x_b, hx_b)
        e_out, (e_h, e_c) = exported(x_b, hx_b)
        for got, want in ((e_out, out), (e_h, h), (e_c, c)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # another length: refused by the graph's guard on dimension 0 (torch 2.13: "Guard failed: input.size()[0] == 3";
    # earlier versions raise a RuntimeError "... shape[0] to be equal to 3"), never answered wrongly
    with pytest.raises((AssertionError, RuntimeError), match=r"\[0\]\D*3"):
        exported(torch.randn(4, 2, 3), hx)


@pytest.mark.slow  # exporting takes seconds
def test_onnx_export_with_a_dynamic_batch_runs_in_onnxruntime_as_eager(tmp_path):
    # optional packages (not in the dev extra): the check a user deploying through ONNX makes, run where they are
    pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    layer, x = onlstm.ONLSTM(3, 4, num_layers=2, chunk_size=2, bidirectional=True).eval(), torch.randn(3, 2, 3)
    batch = torch.export.Dim("batch", min=1, max=64)
    torch.onnx.export(layer, (x,), dynamic_shapes=({1: batch},), dynamo=True).save(str(tmp_path / "layer.onnx"))
    session = ort.InferenceSession(str(tmp_path / "layer.onnx"))
    for b in (1, 5):
        x_b = torch.randn(3, b, 3)
        out, (h, c) = layer(x_b)
        got = session.run(None, {session.get_inputs()[0].name: x_b.numpy()})
        for g, want in zip(got, (out, h, c)):
            torch.testing.assert_close(torch.from_numpy(g), want, atol=1e-5, rtol=1e-5)


COMPILED = """
import torch, onlstm
import torch._inductor.cpu_vec_isa as isa
# scalar C++: the vector width is inductor's own business, and finding it compiles ten probes (about 30 s of the
# test's 45 on 2 cores); scalar code also spares ATEN_CPU_CAPABILITY=default, where torch 2.13's inductor writes
# vector code its headers leave out (docs/layer.md). Our operators are what is tested: they are called, not compiled
isa.valid_vec_isa_list = lambda: []
torch.manual_seed(0)
layer, x = onlstm.ONLSTM(3, 4, chunk_size=2).eval(), torch.randn(3, 2, 3)  # impl 'auto': the fastest kernel
def run(model):  # outputs and the weights' gradients (the backward compiled too)
    layer.zero_grad()
    out, (h, c) = model(x)
    (out.sum() + h.sum() + c.sum()).backward()
    return [out, h, c] + [p.grad.clone() for p in layer.parameters()]
for got, want in zip(run(torch.compile(layer, fullgraph=True)), run(layer)):
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
print("COMPILED OK")
"""


@pytest.mark.slow  # compiling takes tens of seconds
def test_torch_compile_fullgraph_matches_eager(tmp_path):
    # in a process and an inductor cache of its own: torch 2.13 caches a compiled graph without the vector width
    # it was written for, so code compiled under ATEN_CPU_CAPABILITY=avx2 (or =default here) on an AVX-512 CPU
    # and taken from a shared cache by a later process overflowed its buffers there (a heap corruption that
    # crashed this test in CI's workers; docs/layer.md, Compiling)
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, ["src", os.environ.get("PYTHONPATH")]))}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    r = subprocess.run([sys.executable, "-c", COMPILED], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0 and "COMPILED OK" in r.stdout, r.stderr[-3000:]


def test_batch_sizes_of_a_padded_input_come_from_its_shape(monkeypatch):
    # the fast, always-run part of the two tests above: the layer never reads a padded input's batch sizes back
    # from a tensor (what tracing cannot do), and the checks of a list of sizes use no tensor
    layer, x = _tiny_layer_and_input()
    layer.impl = "reference"
    want = layer(x)[0]
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: pytest.fail("a tensor was read back"))
    torch.testing.assert_close(layer(x)[0], want)


@pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")  # torch deprecates TorchScript itself
def test_torchscript_is_refused_naming_torch_compile():
    m = onlstm.ONLSTM(4, 10, chunk_size=5, impl="reference")
    x = torch.randn(6, 3, 4)
    with pytest.raises(NotImplementedError, match="torch.jit.script.*use torch.compile"):
        torch.jit.script(m)
    with pytest.raises(NotImplementedError, match="torch.jit.trace.*use torch.compile"):
        torch.jit.trace(m, (x,))
    assert m(x)[0].shape == (6, 3, 10)  # the module itself is untouched
