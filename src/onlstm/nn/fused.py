"""Fast path: one layer and one direction over a whole sequence, with a hand-written backward.

Two kernels share one contract (see ``csrc/onlstm_cpu.cpp`` for the data layout):

* the compiled C++ kernel (``_ext.load_extension``), used on CPU when it can be built;
* :class:`PythonKernel`, the same algorithm in PyTorch operations, used when it cannot.

Both take the sequence in PyTorch's packed layout (``x`` is ``(N, input)``, the ``bs_t`` rows of step
``t`` contiguous, ``bs_t`` non-increasing), so padded batches, packed batches and the reversed
direction all run through the same code.
"""
from __future__ import annotations

import torch
from torch import Tensor


class PythonKernel:
    """The fused algorithm in PyTorch operations (the fallback when the C++ kernel is unavailable)."""

    @staticmethod
    def forward(x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive, pack):
        bs = batch_sizes.tolist()
        N, G, D = x.shape[0], w_hh.shape[0], w_hh.shape[1]
        n = D // chunk
        xp = torch.addmm(bias, x, w_ih.t()) if bias is not None else x @ w_ih.t()
        act = x.new_empty(N, G)
        out, cells, tcs = x.new_empty(N, D), x.new_empty(N, D), x.new_empty(N, D)
        dist = x.new_empty(N, 2)
        w_hh_t = w_hh.t()
        off = prev = 0
        for t, b in enumerate(bs):
            h_prev = h0[:b] if t == 0 else out[prev:prev + b]
            c_prev = c0[:b] if t == 0 else cells[prev:prev + b]
            g = torch.addmm(xp[off:off + b], h_prev, w_hh_t)
            a = act[off:off + b]
            p = torch.softmax(g[:, :2 * n].view(b, 2, n), dim=-1)
            a[:, :2 * n] = p.view(b, 2 * n)
            torch.sigmoid(g[:, 2 * n:], out=a[:, 2 * n:])
            torch.tanh(g[:, 2 * n + D:2 * n + 2 * D], out=a[:, 2 * n + D:2 * n + 2 * D])
            mi, mf = _master(p[:, 0], p[:, 1], inclusive)
            w = (mf * mi).unsqueeze(-1)
            o, ch, ig, fg = a[:, 2 * n:].view(b, 4, n, chunk).unbind(1)
            c_new = (fg * w + (mf.unsqueeze(-1) - w)) * c_prev.view(b, n, chunk) + (ig * w + (mi.unsqueeze(-1) - w)) * ch
            cells[off:off + b] = c_new.view(b, D)
            torch.tanh(cells[off:off + b], out=tcs[off:off + b])
            torch.mul(o.reshape(b, D), tcs[off:off + b], out=out[off:off + b])
            dist[off:off + b, 0] = 1.0 - mf.mean(-1)
            dist[off:off + b, 1] = mi.mean(-1)
            prev, off = off, off + b
        h_n, c_n = _final_states(out, cells, bs)
        return out, h_n, c_n, dist, act, cells, tcs

    @staticmethod
    def backward(grad_out, grad_hn, grad_cn, grad_dist, x, w_ih, w_hh, h0, c0, batch_sizes, act,
                 cells, tcs, out, chunk, inclusive, pack):
        bs = batch_sizes.tolist()
        N, G, D = x.shape[0], w_hh.shape[0], w_hh.shape[1]
        n = D // chunk
        offs = [0]
        for b in bs:
            offs.append(offs[-1] + b)
        dG = x.new_empty(N, G)
        dh, dc = grad_hn.clone(), grad_cn.clone()
        for t in range(len(bs) - 1, -1, -1):
            b, off = bs[t], offs[t]
            c_prev = c0[:b] if t == 0 else cells[offs[t - 1]:offs[t - 1] + b]
            a = act[off:off + b]
            pi, pf = a[:, :n], a[:, n:2 * n]
            o, ch, ig, fg = a[:, 2 * n:].view(b, 4, n, chunk).unbind(1)
            mi, mf = _master(pi, pf, inclusive)
            w = (mf * mi).unsqueeze(-1)
            tc = tcs[off:off + b].view(b, n, chunk)
            dh_t = (grad_out[off:off + b] + dh[:b]).view(b, n, chunk)
            dcu = dc[:b].view(b, n, chunk) + dh_t * o * (1 - tc * tc)
            f_hat = fg * w + (mf.unsqueeze(-1) - w)
            i_hat = ig * w + (mi.unsqueeze(-1) - w)
            dfh = dcu * c_prev.view(b, n, chunk)
            dih = dcu * ch
            dc[:b] = (dcu * f_hat).view(b, D)
            dw = dfh * (fg - 1) + dih * (ig - 1)
            dmf = (dfh + dw * mi.unsqueeze(-1)).sum(-1)
            dmi = (dih + dw * mf.unsqueeze(-1)).sum(-1)
            if grad_dist is not None:
                dmf = dmf - grad_dist[off:off + b, 0:1] / n
                dmi = dmi + grad_dist[off:off + b, 1:2] / n
            dg = dG[off:off + b]
            gates = dg[:, 2 * n:].view(b, 4, n, chunk)
            gates[:, 0] = dh_t * tc * o * (1 - o)
            gates[:, 1] = dcu * i_hat * (1 - ch * ch)
            gates[:, 2] = dih * w * ig * (1 - ig)
            gates[:, 3] = dfh * w * fg * (1 - fg)
            dpf = torch.flip(torch.cumsum(torch.flip(dmf, (-1,)), -1), (-1,))
            dpi = torch.cumsum(dmi, -1)
            if not inclusive:
                dpi = dpi - dmi
            dg[:, n:2 * n] = pf * (dpf - (dpf * pf).sum(-1, keepdim=True))
            dg[:, :n] = pi * (dpi - (dpi * pi).sum(-1, keepdim=True))
            dh[:b] = dg @ w_hh
        h_prev = torch.cat([h0[:bs[0]]] + [out[offs[t - 1]:offs[t - 1] + bs[t]] for t in range(1, len(bs))])
        dGt = dG.t()
        return dG @ w_ih, dGt @ x, dGt @ h_prev, dG.sum(0), dh, dc


def _master(pi: Tensor, pf: Tensor, inclusive: bool):
    mf = torch.cumsum(pf, -1)
    mi = torch.flip(torch.cumsum(torch.flip(pi, (-1,)), -1), (-1,))
    if not inclusive:
        mi = mi - pi
    return mi, mf


def _final_states(out: Tensor, cells: Tensor, bs: list[int]):
    """Each row's state after its own last step (rows drop out of the packed batch from the end)."""
    h_n, c_n = out.new_empty(bs[0], out.shape[1]), out.new_empty(bs[0], out.shape[1])
    off = 0
    for t, b in enumerate(bs):
        nxt = bs[t + 1] if t + 1 < len(bs) else 0
        if b > nxt:
            h_n[nxt:b] = out[off + nxt:off + b]
            c_n[nxt:b] = cells[off + nxt:off + b]
        off += b
    return h_n, c_n


class FusedLayer(torch.autograd.Function):
    """Autograd wrapper around a kernel's whole-sequence forward and hand-written backward."""

    @staticmethod
    def forward(ctx, x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive, kernel, pack):
        out, h_n, c_n, dist, act, cells, tcs = kernel.forward(
            x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive, pack)
        ctx.save_for_backward(x, w_ih, w_hh, h0, c0, batch_sizes, act, cells, tcs, out)
        ctx.config = (chunk, inclusive, kernel, pack, bias is not None)
        return out, h_n, c_n, dist

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_out, g_hn, g_cn, g_dist):
        x, w_ih, w_hh, h0, c0, batch_sizes, act, cells, tcs, out = ctx.saved_tensors
        chunk, inclusive, kernel, pack, has_bias = ctx.config
        zeros = torch.zeros_like
        g_out = zeros(out) if g_out is None else g_out.contiguous()
        g_hn = zeros(h0) if g_hn is None else g_hn.contiguous()
        g_cn = zeros(c0) if g_cn is None else g_cn.contiguous()
        dx, dw_ih, dw_hh, db, dh0, dc0 = kernel.backward(
            g_out, g_hn, g_cn, g_dist, x, w_ih, w_hh, h0, c0, batch_sizes, act, cells, tcs, out,
            chunk, inclusive, pack)
        return dx, dw_ih, dw_hh, (db if has_bias else None), dh0, dc0, None, None, None, None, None


def fused_layer(x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive, kernel, pack=True):
    """Run one ON-LSTM layer/direction over a packed sequence; returns ``out, h_n, c_n, dist``.

    ``dist[:, 0]`` is the master-forget distance and ``dist[:, 1]`` the master-input distance of
    every row.
    """
    return FusedLayer.apply(x.contiguous(), w_ih, w_hh, bias, h0.contiguous(), c0.contiguous(),
                            batch_sizes, chunk, inclusive, kernel, pack)
