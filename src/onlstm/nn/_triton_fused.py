"""The fused step of the Triton path (``ONLSTM_TRITON_STEP=fused``; docs/layer.md, "The Triton path"): each time
step is ONE launch each way, the recurrent product computed inside the step kernel with ``tl.dot`` (fp32
accumulation) instead of by a cuBLAS call before it. The maths is :mod:`onlstm.nn._triton_steps`' (the same
element-wise helpers), the layout differs:

* A program handles a block of ``BLOCK_B`` rows of one step and a block of ``BLOCK_CH`` whole chunks of units,
  its columns ``j = chunk * BLOCK_C + unit-in-chunk`` (padded to powers of two, masked). A chunk never spans two
  programs, so each chunk's master-gate gradient is summed within one program.
* The master gates need the softmax and cumulative sums over ALL chunks of a row, which no single unit block
  holds: every program computes the row's ``2 * NCH`` master logits itself (redundant work, small beside the
  gates' product when there are few chunks) and takes its own chunks' values with ``tl.gather``.
* Backward, the cumax vector-Jacobian product also needs every chunk of a row: a program writes its chunks'
  master-gate gradients (``DM``), and the NEXT launch (step ``t-1``), which must read step ``t``'s whole
  gradient for its product ``dG_t @ W_hh`` anyway, turns them into step ``t``'s master-logit gradients first
  (:func:`backward_masters` does it for the first step, after the loop).

Every ``tl.dot`` has blocks of at least 16 (the GPU's smallest), also under the interpreter.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_steps import _cell_backward, _cell_forward, _master_gates, _master_logit_grads, _softmax, _tanh


@triton.jit
def _dot(a, w, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    # out_dtype names the accumulator's type: Triton up to 3.6 takes float32 unless told and refuses a float64 acc
    if UPCAST:  # the interpreter multiplies bf16 tiles wrongly: the same rounded values, multiplied in fp32
        return tl.dot(a.to(acc.dtype), w.to(acc.dtype), acc, input_precision=PRECISION, out_dtype=acc.dtype)
    return tl.dot(a, w, acc, input_precision=PRECISION, out_dtype=acc.dtype)


@triton.jit
def probe_fp64_dot(a, out):
    """``out = a @ a`` for one 16x16 float64 tile by ``tl.dot``: Triton 3.3 and 3.4 (torch 2.7's and 2.8's) have no
    float64 product, and the fused step runs split in float64 there (``triton_kernel.fp64_dot``)."""
    i = tl.arange(0, 16)
    tile = tl.load(a + i[:, None] * 16 + i[None, :])
    tl.store(out + i[:, None] * 16 + i[None, :], tl.dot(tile, tile, out_dtype=tl.float64))


@triton.jit
def _program(B, NCH: tl.constexpr, CHUNK: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_CH: tl.constexpr,
             BLOCK_C: tl.constexpr):  # fmt: skip
    """This program's rows of the step (int64, and which exist) and unit columns: their chunk (clamped into
    range, for gathers), unit index and mask."""
    r = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    j = tl.arange(0, BLOCK_CH * BLOCK_C)
    chunk = tl.program_id(1) * BLOCK_CH + j // BLOCK_C
    inside = j % BLOCK_C
    return r.to(tl.int64), r < B, tl.minimum(chunk, NCH - 1), chunk * CHUNK + inside, (chunk < NCH) & (inside < CHUNK)


@triton.jit
def _by_column(values, chunk, rows):
    """``(BLOCK_B, BLOCK_N)`` per-chunk values as ``(BLOCK_B, BLOCK_U)``: each column gets its chunk's."""
    return tl.gather(values, chunk[None, :] + 0 * rows[:, None], 1)


@triton.jit
def _store4(ptr, D: tl.constexpr, a, b, c, d, mask):
    """The four gate blocks of a row (``o, c^, i, f``, ``D`` apart), cast to the buffer's dtype."""
    ty = ptr.dtype.element_ty
    tl.store(ptr, a.to(ty), mask=mask)
    tl.store(ptr + D, b.to(ty), mask=mask)
    tl.store(ptr + 2 * D, c.to(ty), mask=mask)
    tl.store(ptr + 3 * D, d.to(ty), mask=mask)


@triton.jit
def _recurrent_products(
    H_PREV,
    W,
    rows,
    rm,
    unit,
    um,
    NCH: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_U: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    IS64: tl.constexpr,
):
    """``h_{t-1} @ w_hh^T`` for these rows, only the columns this program needs: the row's master-input and
    master-forget logits (every chunk), and its units' four gates (fp32 accumulators; fp64 for fp64)."""
    D: tl.constexpr = NCH * CHUNK
    acc_ty: tl.constexpr = tl.float64 if IS64 else tl.float32
    n = tl.arange(0, BLOCK_N)
    nm = n < NCH
    l_in = tl.zeros((BLOCK_B, BLOCK_N), acc_ty)
    l_f = tl.zeros((BLOCK_B, BLOCK_N), acc_ty)
    a_o = tl.zeros((BLOCK_B, BLOCK_U), acc_ty)
    a_c = tl.zeros((BLOCK_B, BLOCK_U), acc_ty)
    a_i = tl.zeros((BLOCK_B, BLOCK_U), acc_ty)
    a_f = tl.zeros((BLOCK_B, BLOCK_U), acc_ty)
    for k in range(0, D, BLOCK_K):
        kk = k + tl.arange(0, BLOCK_K)
        km = kk < D
        h = tl.load(H_PREV + rows[:, None] * D + kk[None, :], mask=rm[:, None] & km[None, :], other=0)
        wn, wu = W + n.to(tl.int64)[None, :] * D + kk[:, None], W + unit.to(tl.int64)[None, :] * D + kk[:, None]
        mn, mu = nm[None, :] & km[:, None], um[None, :] & km[:, None]
        l_in = _dot(h, tl.load(wn, mask=mn, other=0), l_in, PRECISION, UPCAST)
        l_f = _dot(h, tl.load(wn + NCH * D, mask=mn, other=0), l_f, PRECISION, UPCAST)
        a_o = _dot(h, tl.load(wu + 2 * NCH * D, mask=mu, other=0), a_o, PRECISION, UPCAST)
        a_c = _dot(h, tl.load(wu + (2 * NCH + D) * D, mask=mu, other=0), a_c, PRECISION, UPCAST)
        a_i = _dot(h, tl.load(wu + (2 * NCH + 2 * D) * D, mask=mu, other=0), a_i, PRECISION, UPCAST)
        a_f = _dot(h, tl.load(wu + (2 * NCH + 3 * D) * D, mask=mu, other=0), a_f, PRECISION, UPCAST)
    return l_in, l_f, a_o, a_c, a_i, a_f


# long function: a kernel whose 24 arguments take a line each, saying what each buffer holds
@triton.jit(do_not_specialize=["ROW0", "PREV0", "B"])
def forward_step(
    XP,  # (N, G) input projection + bias, in ACT's dtype
    H_PREV,  # (., D) h_{t-1} in the matmul dtype, its rows from PREV0
    W,  # (G, D) w_hh in the matmul dtype
    C_PREV,  # (., D) c_{t-1}, its rows from PREV0
    ACT,  # (N, G) out: activations, as the split step writes them
    CELL,  # (N, D) out: c_t
    OUT,  # (N, D) out: h_t
    H_MM,  # (N, D) out: h_t in the matmul dtype (only if HAS_HMM)
    DIST,  # (N, 2) out: d_f, d_i
    ROW0,  # first row of this step in the sequence buffers
    PREV0,  # first row of H_PREV and C_PREV
    B,  # rows of this step
    NCH: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_CH: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
    INCLUSIVE: tl.constexpr,
    HAS_HMM: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    IS64: tl.constexpr,
):
    D: tl.constexpr = NCH * CHUNK
    G: tl.constexpr = 4 * D + 2 * NCH
    ty = ACT.dtype.element_ty
    r, rm, chunk, unit, um = _program(B, NCH, CHUNK, BLOCK_B, BLOCK_CH, BLOCK_C)
    n = tl.arange(0, BLOCK_N)
    nm = n < NCH
    l_in, l_f, a_o, a_c, a_i, a_f = _recurrent_products(
        H_PREV,
        W,
        r + PREV0,
        rm,
        unit,
        um,
        NCH,
        CHUNK,
        BLOCK_B,
        BLOCK_N,
        BLOCK_CH * BLOCK_C,
        BLOCK_K,
        PRECISION,
        UPCAST,
        IS64,
    )
    xp, act = XP + (r + ROW0)[:, None] * G, ACT + (r + ROW0)[:, None] * G
    both = rm[:, None] & nm[None, :]
    # padded rows get finite logits (0), padded chunks -inf: no NaN appears even where nothing is stored
    p_in = _softmax(tl.where(nm[None, :], tl.load(xp + n[None, :], mask=both, other=0) + l_in.to(ty), -float("inf")),
                    nm[None, :], 1)  # fmt: skip
    lf = tl.where(nm[None, :], tl.load(xp + NCH + n[None, :], mask=both, other=0) + l_f.to(ty), -float("inf"))
    p_forget = _softmax(lf, nm[None, :], 1)
    m_in, m_forget = _master_gates(p_in, p_forget, INCLUSIVE, 1)
    if tl.program_id(1) == 0:  # the row's master gates and distances: written by one program of the row
        tl.store(act + n[None, :], p_in, mask=both)
        tl.store(act + NCH + n[None, :], p_forget, mask=both)
        tl.store(DIST + (r + ROW0) * 2, 1.0 - tl.sum(tl.where(nm[None, :], m_forget, 0.0), 1) / NCH, mask=rm)
        tl.store(DIST + (r + ROW0) * 2 + 1, tl.sum(tl.where(nm[None, :], m_in, 0.0), 1) / NCH, mask=rm)
    cm = rm[:, None] & um[None, :]
    g = 2 * NCH + unit[None, :]
    o, ch, ig, fg, c_new, h = _cell_forward(
        tl.load(xp + g, mask=cm, other=0) + a_o.to(ty),
        tl.load(xp + D + g, mask=cm, other=0) + a_c.to(ty),
        tl.load(xp + 2 * D + g, mask=cm, other=0) + a_i.to(ty),
        tl.load(xp + 3 * D + g, mask=cm, other=0) + a_f.to(ty),
        _by_column(m_in, chunk, r),
        _by_column(m_forget, chunk, r),
        tl.load(C_PREV + (r + PREV0)[:, None] * D + unit[None, :], mask=cm, other=0),
    )
    _store4(act + g, D, o, ch, ig, fg, cm)
    cells = (r + ROW0)[:, None] * D + unit[None, :]
    tl.store(CELL + cells, c_new, mask=cm)
    tl.store(OUT + cells, h, mask=cm)
    if HAS_HMM:
        tl.store(H_MM + cells, h.to(H_MM.dtype.element_ty), mask=cm)


@triton.jit
def _master_grads(ACT, DM, GDIST, DG, DG_MM, r, rm, STORE, NCH: tl.constexpr, CHUNK: tl.constexpr,
                  BLOCK_N: tl.constexpr, INCLUSIVE: tl.constexpr, HAS_GDIST: tl.constexpr,
                  HAS_MM: tl.constexpr):  # fmt: skip
    """The master-logit gradients of rows ``r`` (absolute) from their chunks' gate-gradient sums ``DM``: stored
    into ``DG`` (and ``DG_MM``) where ``STORE``, and returned for the product that needs them."""
    G: tl.constexpr = 4 * NCH * CHUNK + 2 * NCH
    n = tl.arange(0, BLOCK_N)
    nm = n < NCH
    both = rm[:, None] & nm[None, :]
    act, dm = ACT + r[:, None] * G + n[None, :], DM + r[:, None] * (2 * NCH) + n[None, :]
    d_min = tl.load(dm, mask=both, other=0)
    d_mforget = tl.load(dm + NCH, mask=both, other=0)
    if HAS_GDIST:  # the distances are the chunks' means of the master gates
        d_mforget = d_mforget - tl.load(GDIST + r * 2, mask=rm, other=0)[:, None] / NCH
        d_min = d_min + tl.load(GDIST + r * 2 + 1, mask=rm, other=0)[:, None] / NCH
    p_in = tl.load(act, mask=both, other=0)
    p_forget = tl.load(act + NCH, mask=both, other=0)
    d_pin, d_pforget = _master_logit_grads(p_in, p_forget, d_min, d_mforget, nm[None, :], INCLUSIVE, 1)
    if STORE:
        dg = r[:, None] * G + n[None, :]
        tl.store(DG + dg, d_pin.to(DG.dtype.element_ty), mask=both)
        tl.store(DG + dg + NCH, d_pforget.to(DG.dtype.element_ty), mask=both)
        if HAS_MM:
            tl.store(DG_MM + dg, d_pin.to(DG_MM.dtype.element_ty), mask=both)
            tl.store(DG_MM + dg + NCH, d_pforget.to(DG_MM.dtype.element_ty), mask=both)
    return d_pin, d_pforget


@triton.jit
def _h_gradient(d_pin, d_pforget, DG_MM, W, rows, rm, unit, um, NCH: tl.constexpr, CHUNK: tl.constexpr,
                BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_U: tl.constexpr, BLOCK_K: tl.constexpr,
                PRECISION: tl.constexpr, UPCAST: tl.constexpr, IS64: tl.constexpr):  # fmt: skip
    """``dG_{t+1} @ w_hh`` for this program's units: the master-logit columns from registers (``d_pin``,
    ``d_pforget``, completed by this launch), the gate columns from ``DG_MM`` (written by the launch before)."""
    D: tl.constexpr = NCH * CHUNK
    G: tl.constexpr = 4 * D + 2 * NCH
    mm_ty = DG_MM.dtype.element_ty
    n = tl.arange(0, BLOCK_N).to(tl.int64)
    wn, mn = W + n[:, None] * D + unit[None, :], (n < NCH)[:, None] & um[None, :]
    acc = tl.zeros((BLOCK_B, BLOCK_U), tl.float64 if IS64 else tl.float32)
    acc = _dot(d_pin.to(mm_ty), tl.load(wn, mask=mn, other=0), acc, PRECISION, UPCAST)
    acc = _dot(d_pforget.to(mm_ty), tl.load(wn + NCH * D, mask=mn, other=0), acc, PRECISION, UPCAST)
    for k in range(2 * NCH, G, BLOCK_K):
        kk = k + tl.arange(0, BLOCK_K)
        km = kk < G
        a = tl.load(DG_MM + rows[:, None] * G + kk[None, :], mask=rm[:, None] & km[None, :], other=0)
        w = tl.load(W + kk.to(tl.int64)[:, None] * D + unit[None, :], mask=km[:, None] & um[None, :], other=0)
        acc = _dot(a, w, acc, PRECISION, UPCAST)
    return acc


# long function: a kernel whose 29 arguments take a line each, saying what each buffer holds
@triton.jit(do_not_specialize=["ROW0", "NEXT0", "C_ROW0", "B", "B_NEXT"])
def backward_step(
    ACT,  # (N, G) saved activations
    C_PREV,  # (., D) c_{t-1}, its rows from C_ROW0
    CELL,  # (N, D) c_t
    GOUT,  # (N, D) gradient of the outputs
    GHN,  # (B0, D) gradient of h_n: reaches h_t of the rows whose sequence ends at this step
    DC,  # (B0, D) in: gradient reaching c_t; out: gradient to c_{t-1} (each program its own elements)
    GDIST,  # (N, 2) gradient of the distances (only if HAS_GDIST)
    DG,  # (N, G) out: gradient of the pre-activations (the master columns of step t+1 and the gates of step t)
    DG_MM,  # (N, G) the same in the matmul dtype (DG itself unless HAS_MM)
    DM,  # (N, 2 NCH) in: step t+1's chunk sums of the master-gate gradients; out: step t's
    W,  # (G, D) w_hh in the matmul dtype
    ROW0,  # first row of step t
    NEXT0,  # first row of step t+1
    C_ROW0,
    B,  # rows of step t
    B_NEXT,  # rows of step t+1 (0 at the last step)
    NCH: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_CH: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
    INCLUSIVE: tl.constexpr,
    HAS_GDIST: tl.constexpr,
    HAS_MM: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    IS64: tl.constexpr,
):
    D: tl.constexpr = NCH * CHUNK
    G: tl.constexpr = 4 * D + 2 * NCH
    ty = ACT.dtype.element_ty
    r, rm, chunk, unit, um = _program(B, NCH, CHUNK, BLOCK_B, BLOCK_CH, BLOCK_C)
    nr = rm & (r < B_NEXT)  # rows that go on to step t+1
    # step t+1's gradient completed (its master logits), then its product with w_hh: the gradient reaching h_t
    d_pin, d_pforget = _master_grads(ACT, DM, GDIST, DG, DG_MM, r + NEXT0, nr, tl.program_id(1) == 0, NCH, CHUNK,
                                     BLOCK_N, INCLUSIVE, HAS_GDIST, HAS_MM)  # fmt: skip
    acc = _h_gradient(d_pin, d_pforget, DG_MM, W, r + NEXT0, nr, unit, um, NCH, CHUNK, BLOCK_B, BLOCK_N,
                      BLOCK_CH * BLOCK_C, BLOCK_K, PRECISION, UPCAST, IS64)  # fmt: skip
    n = tl.arange(0, BLOCK_N)
    cm = rm[:, None] & um[None, :]
    cols = (r + ROW0)[:, None] * D + unit[None, :]
    ends = cm & (r >= B_NEXT)[:, None]  # sequences whose last step this is: h_n's gradient reaches them here
    dh = tl.load(GOUT + cols, mask=cm, other=0) + acc.to(ty)
    dh += tl.load(GHN + r[:, None] * D + unit[None, :], mask=ends, other=0)
    # step t's own gradients
    act = ACT + (r + ROW0)[:, None] * G
    both = rm[:, None] & (n < NCH)[None, :]
    p_in = tl.load(act + n[None, :], mask=both, other=0)
    p_forget = tl.load(act + NCH + n[None, :], mask=both, other=0)
    m_in, m_forget = _master_gates(p_in, p_forget, INCLUSIVE, 1)
    g = 2 * NCH + unit[None, :]
    dc = DC + r[:, None] * D + unit[None, :]
    dc_out, d_mf, d_mi, d_o, d_c, d_i, d_f = _cell_backward(
        tl.load(act + g, mask=cm, other=0), tl.load(act + D + g, mask=cm, other=0),
        tl.load(act + 2 * D + g, mask=cm, other=0), tl.load(act + 3 * D + g, mask=cm, other=0),
        _tanh(tl.load(CELL + cols, mask=cm, other=0)), dh, tl.load(dc, mask=cm, other=0),
        tl.load(C_PREV + (r + C_ROW0)[:, None] * D + unit[None, :], mask=cm, other=0),
        _by_column(m_in, chunk, r), _by_column(m_forget, chunk, r),
    )  # fmt: skip
    tl.store(dc, dc_out, mask=cm)
    _store4(DG + (r + ROW0)[:, None] * G + g, D, d_o, d_c, d_i, d_f, cm)
    if HAS_MM:
        _store4(DG_MM + (r + ROW0)[:, None] * G + g, D, d_o, d_c, d_i, d_f, cm)
    # this program's chunks are whole: their sums of the master-gate gradients are complete here
    shape: tl.constexpr = (BLOCK_B, BLOCK_CH, BLOCK_C)
    s_f = tl.sum(tl.reshape(tl.where(cm, d_mf, 0.0), shape), 2)
    s_i = tl.sum(tl.reshape(tl.where(cm, d_mi, 0.0), shape), 2)
    kc = tl.program_id(1) * BLOCK_CH + tl.arange(0, BLOCK_CH)
    dm, km2 = DM + (r + ROW0)[:, None] * (2 * NCH) + kc[None, :], rm[:, None] & (kc < NCH)[None, :]
    tl.store(dm, s_i, mask=km2)
    tl.store(dm + NCH, s_f, mask=km2)


@triton.jit(do_not_specialize=["ROW0", "B"])
def backward_masters(ACT, DM, GDIST, DG, DG_MM, ROW0, B, NCH: tl.constexpr, CHUNK: tl.constexpr,
                     BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, INCLUSIVE: tl.constexpr,
                     HAS_GDIST: tl.constexpr, HAS_MM: tl.constexpr):  # fmt: skip
    """The master-logit gradients of one step's rows (the first step's, which no later launch completes)."""
    r = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rm = r < B
    r = r.to(tl.int64)
    _master_grads(ACT, DM, GDIST, DG, DG_MM, r + ROW0, rm, True, NCH, CHUNK, BLOCK_N, INCLUSIVE, HAS_GDIST, HAS_MM)
