"""The two Triton kernels of the ``triton`` layer kernel: one element-wise ON-LSTM step, forward and backward
(docs/layer.md, "The Triton path"; the maths is :mod:`onlstm.nn.fused`'s, step by step). One program handles
one batch row of one step, its units an ``(n, C)`` tile. Sequence buffers (``XP``, ``ACT``, ``CELL``, ...) are
passed whole with the step's first row ``ROW0`` (``C_ROW0`` for ``C_PREV``), not specialised on, so one
compiled kernel serves every step; per-step buffers (``HU``, ``DH``, ``DC_*``) start at row 0. Arithmetic
runs in ``ACT``'s dtype; ``HU`` and the ``*_MM`` copies may be half precision.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    # tl has no tanh that the interpreter also runs; exp(-2|x|) never overflows
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _softmax(logits, mask, AXIS: tl.constexpr):
    e = tl.exp(logits - tl.max(logits, AXIS, keep_dims=True))
    e = tl.where(mask, e, 0.0)
    return e / tl.sum(e, AXIS, keep_dims=True)


@triton.jit
def _master_gates(p_in, p_forget, INCLUSIVE: tl.constexpr, AXIS: tl.constexpr):
    """Master forget = prefix sum of its softmax; master input = (in/ex)clusive suffix sum of its own (along the
    chunks, ``AXIS``)."""
    m_forget = tl.cumsum(p_forget, AXIS)
    m_input = tl.cumsum(p_in, AXIS, reverse=True)
    if not INCLUSIVE:
        m_input = m_input - p_in  # the exclusive sum this way makes the top chunk exactly 0
    return m_input, m_forget


@triton.jit
def _cell_forward(o_pre, c_pre, i_pre, f_pre, m_in, m_forget, c_prev):
    """The four gates and the overlap update of the cell: ``o, c^, i, f, c_t, h_t`` (the master gates broadcast
    to the units; shared by the split and the fused step)."""
    o = _sigmoid(o_pre)
    ch = _tanh(c_pre)
    ig = _sigmoid(i_pre)
    fg = _sigmoid(f_pre)
    w = m_forget * m_in  # overlap of the two master gates
    f_hat = fg * w + (m_forget - w)
    i_hat = ig * w + (m_in - w)
    c_new = f_hat * c_prev + i_hat * ch
    return o, ch, ig, fg, c_new, o * _tanh(c_new)


@triton.jit(do_not_specialize=["ROW0", "C_ROW0"])
def forward_step(
    XP,  # (b, G) input projection + bias of this step, in ACT's dtype
    HU,  # (b, G) h_{t-1} @ w_hh^T (matmul dtype)
    C_PREV,  # (b, D)
    ACT,  # (b, G) out: [softmax l_i | softmax l_f | sigmoid o | tanh c^ | sigmoid i | sigmoid f]
    CELL,  # (b, D) out: c_t
    OUT,  # (b, D) out: h_t
    H_MM,  # (b, D) out: h_t in the matmul dtype (only if HAS_HMM)
    DIST,  # (b, 2) out: d_f, d_i
    ROW0,  # first row of the step in the sequence buffers
    C_ROW0,  # first row of C_PREV
    NCH: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_C: tl.constexpr,
    INCLUSIVE: tl.constexpr,
    HAS_HMM: tl.constexpr,
):
    D: tl.constexpr = NCH * CHUNK
    G: tl.constexpr = 4 * D + 2 * NCH
    pid = tl.program_id(0).to(tl.int64)
    row = pid + ROW0
    xp, hu, act = XP + row * G, HU + pid * G, ACT + row * G
    ty = ACT.dtype.element_ty
    k = tl.arange(0, BLOCK_N)
    km = k < NCH
    p_in = _softmax(tl.load(xp + k, mask=km, other=-float("inf")) + tl.load(hu + k, mask=km, other=0).to(ty), km, 0)
    lf = tl.load(xp + NCH + k, mask=km, other=-float("inf")) + tl.load(hu + NCH + k, mask=km, other=0).to(ty)
    p_forget = _softmax(lf, km, 0)
    tl.store(act + k, p_in, mask=km)
    tl.store(act + NCH + k, p_forget, mask=km)
    m_in, m_forget = _master_gates(p_in, p_forget, INCLUSIVE, 0)
    tl.store(DIST + row * 2, 1.0 - tl.sum(tl.where(km, m_forget, 0.0), 0) / NCH)
    tl.store(DIST + row * 2 + 1, tl.sum(tl.where(km, m_in, 0.0), 0) / NCH)
    c = tl.arange(0, BLOCK_C)
    u = k[:, None] * CHUNK + c[None, :]  # (BLOCK_N, BLOCK_C) unit index: chunk-major, as in the gate rows
    um = km[:, None] & (c < CHUNK)[None, :]
    g = 2 * NCH + u
    o, ch, ig, fg, c_new, h = _cell_forward(
        tl.load(xp + g, mask=um, other=0) + tl.load(hu + g, mask=um, other=0).to(ty),
        tl.load(xp + D + g, mask=um, other=0) + tl.load(hu + D + g, mask=um, other=0).to(ty),
        tl.load(xp + 2 * D + g, mask=um, other=0) + tl.load(hu + 2 * D + g, mask=um, other=0).to(ty),
        tl.load(xp + 3 * D + g, mask=um, other=0) + tl.load(hu + 3 * D + g, mask=um, other=0).to(ty),
        m_in[:, None],
        m_forget[:, None],
        tl.load(C_PREV + (pid + C_ROW0) * D + u, mask=um, other=0),
    )
    tl.store(act + g, o, mask=um)
    tl.store(act + D + g, ch, mask=um)
    tl.store(act + 2 * D + g, ig, mask=um)
    tl.store(act + 3 * D + g, fg, mask=um)
    tl.store(CELL + row * D + u, c_new, mask=um)
    tl.store(OUT + row * D + u, h, mask=um)
    if HAS_HMM:
        tl.store(H_MM + row * D + u, h.to(H_MM.dtype.element_ty), mask=um)


@triton.jit
def _softmax_vjp(p, grad, AXIS: tl.constexpr):
    return p * (grad - tl.sum(grad * p, AXIS, keep_dims=True))


@triton.jit
def _cell_backward(o, ch, ig, fg, tc, dh, dc_in, c_prev, m_in, m_forget):
    """Per unit, from the gradients reaching ``h_t`` (``dh``) and ``c_t`` (``dc_in``): the gradient to ``c_{t-1}``,
    the unit's shares of the master-forget and master-input gradients, and those of the four gate
    pre-activations ``o, c^, i, f`` (``tc = tanh(c_t)``; shared by the split and the fused step)."""
    dcu = dc_in + dh * o * (1.0 - tc * tc)
    w = m_forget * m_in
    f_hat = fg * w + (m_forget - w)
    i_hat = ig * w + (m_in - w)
    dfh = dcu * c_prev
    dih = dcu * ch
    dw = dfh * (fg - 1.0) + dih * (ig - 1.0)
    d_o = dh * tc * o * (1.0 - o)
    d_c = dcu * i_hat * (1.0 - ch * ch)
    d_i = dih * w * ig * (1.0 - ig)
    d_f = dfh * w * fg * (1.0 - fg)
    return dcu * f_hat, dfh + dw * m_in, dih + dw * m_forget, d_o, d_c, d_i, d_f


@triton.jit(do_not_specialize=["ROW0", "C_ROW0"])
def backward_step(
    ACT,  # (b, G) saved activations of this step
    C_PREV,  # (b, D) c_{t-1}
    CELL,  # (b, D) c_t
    GOUT,  # (b, D) gradient of the output h_t
    DH,  # (b, D) gradient reaching h_t from step t+1 (or from h_n)
    DC_IN,  # (b, D) gradient reaching c_t
    DC_OUT,  # (b, D) out: gradient to c_{t-1}
    GDIST,  # (b, 2) gradient of the distances (only if HAS_GDIST)
    DG,  # (b, G) out: gradient of the pre-activation
    DG_MM,  # (b, G) out: the same in the matmul dtype (only if HAS_MM)
    ROW0,
    C_ROW0,
    NCH: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_C: tl.constexpr,
    INCLUSIVE: tl.constexpr,
    HAS_GDIST: tl.constexpr,
    HAS_MM: tl.constexpr,
):
    D: tl.constexpr = NCH * CHUNK
    G: tl.constexpr = 4 * D + 2 * NCH
    pid = tl.program_id(0).to(tl.int64)
    row = pid + ROW0
    act, dg = ACT + row * G, DG + row * G
    k = tl.arange(0, BLOCK_N)
    km = k < NCH
    c = tl.arange(0, BLOCK_C)
    u = k[:, None] * CHUNK + c[None, :]
    um = km[:, None] & (c < CHUNK)[None, :]
    p_in = tl.load(act + k, mask=km, other=0)
    p_forget = tl.load(act + NCH + k, mask=km, other=0)
    m_in, m_forget = _master_gates(p_in, p_forget, INCLUSIVE, 0)
    g = 2 * NCH + u
    o = tl.load(act + g, mask=um, other=0)
    dh = tl.load(GOUT + row * D + u, mask=um, other=0) + tl.load(DH + pid * D + u, mask=um, other=0)
    dc_out, d_mf, d_mi, d_o, d_c, d_i, d_f = _cell_backward(
        o, tl.load(act + D + g, mask=um, other=0), tl.load(act + 2 * D + g, mask=um, other=0),
        tl.load(act + 3 * D + g, mask=um, other=0), _tanh(tl.load(CELL + row * D + u, mask=um, other=0)), dh,
        tl.load(DC_IN + pid * D + u, mask=um, other=0), tl.load(C_PREV + (pid + C_ROW0) * D + u, mask=um, other=0),
        m_in[:, None], m_forget[:, None],
    )  # fmt: skip
    tl.store(DC_OUT + pid * D + u, dc_out, mask=um)
    d_mforget = tl.sum(d_mf, 1)
    d_min = tl.sum(d_mi, 1)
    if HAS_GDIST:
        d_mforget = d_mforget - tl.load(GDIST + row * 2) / NCH
        d_min = d_min + tl.load(GDIST + row * 2 + 1) / NCH
    d_chunks = _master_logit_grads(p_in, p_forget, d_min, d_mforget, km, INCLUSIVE, 0)
    d_gates = (d_o, d_c, d_i, d_f)
    _store_gate_grads(dg, d_chunks, d_gates, k, km, g, um, NCH, D)
    if HAS_MM:
        _store_gate_grads(DG_MM + row * G, d_chunks, d_gates, k, km, g, um, NCH, D)


@triton.jit
def _master_logit_grads(p_in, p_forget, d_min, d_mforget, km, INCLUSIVE: tl.constexpr, AXIS: tl.constexpr):
    """Gradients of both master-gate logits from those of the gates: the cumax vector-Jacobian products."""
    d_mforget = tl.where(km, d_mforget, 0.0)
    d_min = tl.where(km, d_min, 0.0)
    d_pforget = tl.cumsum(d_mforget, AXIS, reverse=True)  # adjoint of the prefix sum
    d_pin = tl.cumsum(d_min, AXIS)  # adjoint of the suffix sum
    if not INCLUSIVE:
        d_pin = d_pin - d_min
    return _softmax_vjp(p_in, d_pin, AXIS), _softmax_vjp(p_forget, d_pforget, AXIS)


@triton.jit
def _store_gate_grads(dg, d_chunks, d_gates, k, km, g, um, NCH: tl.constexpr, D: tl.constexpr):
    ty = dg.dtype.element_ty
    tl.store(dg + k, d_chunks[0].to(ty), mask=km)
    tl.store(dg + NCH + k, d_chunks[1].to(ty), mask=km)
    tl.store(dg + g, d_gates[0].to(ty), mask=um)
    tl.store(dg + D + g, d_gates[1].to(ty), mask=um)
    tl.store(dg + 2 * D + g, d_gates[2].to(ty), mask=um)
    tl.store(dg + 3 * D + g, d_gates[3].to(ty), mask=um)
