"""The ``fused`` kernel: one layer and one direction over a whole packed sequence in PyTorch operations,
with a hand-written backward (contract: :class:`onlstm.nn.kernels.LayerKernel`). The CPU fallback when the
C++ kernel cannot be built.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .functional import prefix_sum, suffix_sum
from .kernels import KernelGrads, KernelInputs, KernelOutputs, OutputGrads, last_rows, previous_h, step_offsets


class FusedKernel:
    """The fused algorithm in PyTorch operations; ``saved = (out, act, cells, tanh(cells))``."""

    @staticmethod
    def forward(inputs: KernelInputs) -> KernelOutputs:
        x, w_ih, w_hh, bias, h0, c0, batch_sizes, chunk, inclusive = inputs
        bs, N, (G, D) = batch_sizes.tolist(), x.shape[0], w_hh.shape
        n, w_hh_t = D // chunk, w_hh.t()
        xp = torch.addmm(bias, x, w_ih.t()) if bias is not None else x @ w_ih.t()
        act, dist = x.new_empty(N, G), x.new_empty(N, 2)
        out, cells, tcs = x.new_empty(N, D), x.new_empty(N, D), x.new_empty(N, D)
        off = prev = 0
        for t, b in enumerate(bs):
            h_prev = h0[:b] if t == 0 else out[prev : prev + b]
            c_prev = c0[:b] if t == 0 else cells[prev : prev + b]
            g = torch.addmm(xp[off : off + b], h_prev, w_hh_t)
            a = act[off : off + b]
            p = torch.softmax(g[:, : 2 * n].view(b, 2, n), dim=-1)
            a[:, : 2 * n] = p.view(b, 2 * n)
            torch.sigmoid(g[:, 2 * n :], out=a[:, 2 * n :])
            torch.tanh(g[:, 2 * n + D : 2 * n + 2 * D], out=a[:, 2 * n + D : 2 * n + 2 * D])
            o, ch, _, _, f_hat, i_hat, mi, mf, _ = _gates(p[:, 0], p[:, 1], a, b, n, chunk, inclusive)
            c_new = f_hat * c_prev.view(b, n, chunk) + i_hat * ch
            cells[off : off + b] = c_new.view(b, D)
            torch.tanh(cells[off : off + b], out=tcs[off : off + b])
            torch.mul(o.reshape(b, D), tcs[off : off + b], out=out[off : off + b])
            dist[off : off + b, 0] = 1.0 - mf.mean(-1)
            dist[off : off + b, 1] = mi.mean(-1)
            prev, off = off, off + b
        last = last_rows(bs, out.device)  # h_n, c_n: each row's state after its own last step
        return KernelOutputs(out, out[last], cells[last], dist, saved=(out, act, cells, tcs))

    @staticmethod
    def backward(inputs: KernelInputs, saved: tuple[Tensor, ...], grads: OutputGrads) -> KernelGrads:
        out, act, cells, tcs = saved
        x, w_ih, w_hh, _, h0, c0, batch_sizes, chunk, inclusive = inputs
        grad_out, grad_dist = grads.out, grads.dist
        bs, N, (G, D) = batch_sizes.tolist(), x.shape[0], w_hh.shape
        n, offs, dG = D // chunk, step_offsets(bs), x.new_empty(N, G)
        dh, dc = grads.h_n.clone(), grads.c_n.clone()
        for t in range(len(bs) - 1, -1, -1):
            b, off = bs[t], offs[t]
            c_prev = c0[:b] if t == 0 else cells[offs[t - 1] : offs[t - 1] + b]
            a = act[off : off + b]
            pi, pf = a[:, :n], a[:, n : 2 * n]
            o, ch, ig, fg, f_hat, i_hat, mi, mf, w = _gates(pi, pf, a, b, n, chunk, inclusive)
            tc = tcs[off : off + b].view(b, n, chunk)
            dh_t = (grad_out[off : off + b] + dh[:b]).view(b, n, chunk)
            dcu = dc[:b].view(b, n, chunk) + dh_t * o * (1 - tc * tc)
            dfh = dcu * c_prev.view(b, n, chunk)
            dih = dcu * ch
            dc[:b] = (dcu * f_hat).view(b, D)
            dw = dfh * (fg - 1) + dih * (ig - 1)
            dmf = (dfh + dw * mi.unsqueeze(-1)).sum(-1)
            dmi = (dih + dw * mf.unsqueeze(-1)).sum(-1)
            if grad_dist is not None:
                dmf = dmf - grad_dist[off : off + b, 0:1] / n
                dmi = dmi + grad_dist[off : off + b, 1:2] / n
            dg = dG[off : off + b]
            gates = dg[:, 2 * n :].view(b, 4, n, chunk)
            gates[:, 0] = dh_t * tc * o * (1 - o)
            gates[:, 1] = dcu * i_hat * (1 - ch * ch)
            gates[:, 2] = dih * w * ig * (1 - ig)
            gates[:, 3] = dfh * w * fg * (1 - fg)
            dpf = suffix_sum(dmf, inclusive=True)  # adjoint of mf = prefix_sum(pf)
            dpi = prefix_sum(dmi, inclusive)  # adjoint of mi = suffix_sum(pi)
            dg[:, n : 2 * n] = pf * (dpf - (dpf * pf).sum(-1, keepdim=True))
            dg[:, :n] = pi * (dpi - (dpi * pi).sum(-1, keepdim=True))
            dh[:b] = dg @ w_hh
        h_prev = previous_h(h0, out, bs)
        dGt = dG.t()
        return KernelGrads(dG @ w_ih, dGt @ x, dGt @ h_prev, dG.sum(0), dh, dc)


def _gates(pi: Tensor, pf: Tensor, a: Tensor, b: int, n: int, chunk: int, inclusive: bool) -> tuple[Tensor, ...]:
    """From a step's chunk softmaxes and activations ``a``: ``o, ĉ, i, f, f^, i^, i~, f~, w`` (docs/design.md §1.1)."""
    mi, mf = suffix_sum(pi, inclusive), prefix_sum(pf, inclusive=True)
    w = (mf * mi).unsqueeze(-1)
    o, ch, ig, fg = a[:, 2 * n :].view(b, 4, n, chunk).unbind(1)
    return o, ch, ig, fg, fg * w + (mf.unsqueeze(-1) - w), ig * w + (mi.unsqueeze(-1) - w), mi, mf, w
