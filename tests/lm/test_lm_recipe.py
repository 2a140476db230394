"""The training recipe pinned against the authors' training step, re-typed here from its description
(docs/lm.md, "What one training step computes"), and the averaging phase against torch.optim.ASGD driven as
the authors' loop drives it. Everything runs in float64, so agreement is to rounding.

The authors' step: embedding dropout (whole rows, rescaled), locked dropout on the embedded input, per layer a
DropConnect mask on the hidden-to-hidden weights (one per forward, not rescaled) and a locked dropout on its
output (``dropout_hidden`` between layers, ``dropout_out`` after the last); loss = cross-entropy + AR
``alpha * mean(h^2)`` on the last layer's raw (ON-LSTM code) or dropped (AWD-LSTM code) output + TAR
``beta * mean((h_t - h_{t-1})^2)`` on its raw output; gradient norm clipped; SGD with weight decay at
``lr * seq_len / bptt``; after the switch torch's ASGD(t0=0, lambd=0): the step size is the one set for the
previous step (the first step's own for the first), and the average ``ax`` starts from the second iterate.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from onlstm.lm.config import explicit_settings, run_config
from onlstm.lm.data import batchify, bptt_schedule, segment
from onlstm.lm.train import Trainer, train
from support import TINY_LM, quiet, write_corpus

MODEL = {"emb_size": 6, "hidden_sizes": [8, 6], "chunk_size": 2, "master_input": "paper"}  # tied weights


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("small"), seed=3, n_train=24)


def make_trainer(run: Path, corpus: Path, model: dict, **train_opts) -> Trainer:
    explicit = explicit_settings(TINY_LM, {"model": {**MODEL, **model}, "train": train_opts})
    return Trainer(run, corpus, run_config(explicit), log=quiet)


def run_trainer(trainer: Trainer, on_step) -> None:
    """Train ``trainer``'s run (made by :func:`make_trainer`, hooks on its model) as ``lm train`` does."""
    given = {"model": dict(trainer.config.model), "train": trainer.cfg.to_dict()}
    train(trainer.rundir.path, trainer.data_dir, given, on_step=on_step, log=quiet, trainer=trainer)


def schedules(trainer: Trainer) -> list[list]:
    c = trainer.cfg
    return [
        bptt_schedule(trainer.n_rows, c.bptt, c.seed, e, c.variable_bptt, c.bptt_short_prob, c.bptt_std, c.min_seq_len)
        for e in range(1, c.epochs + 1)
    ]


# --------------------------------------------------------------------------- fixed masks


class MaskFeed:
    """Feeds pre-drawn keep-masks (1 keep, 0 drop) to the model's random draws: locked and embedding dropout
    draw with ``bernoulli_``, DropConnect with ``uniform_() >= p`` (a 0/1 tensor compared with p in (0, 1)
    gives the mask back). A draw takes the next mask of its shape; the two of one shape (the input's and,
    with tied weights, the last layer's output) come in data-flow order. A draw of any other shape is not
    served, so a mask of the wrong shape makes the comparison fail."""

    def __init__(self):
        self.queue: dict[tuple, list[torch.Tensor]] = {}
        self.served = 0

    def add(self, masks: list[torch.Tensor]) -> None:
        for m in masks:
            self.queue.setdefault(tuple(m.shape), []).append(m)

    def install(self, monkeypatch) -> None:
        for name in ("bernoulli_", "uniform_"):
            original = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._draw(original))

    def _draw(self, original):
        def draw(t, *args, **kwargs):
            q = self.queue.get(tuple(t.shape))
            if not q:
                return original(t, *args, **kwargs)
            self.served += 1
            return t.copy_(q.pop(0))

        return draw

    def left(self) -> int:
        return sum(len(q) for q in self.queue.values())


def draw_masks(gen: torch.Generator, cfg, vocab: int, batch: int) -> dict[str, torch.Tensor]:
    """One training step's keep-masks, in data-flow order."""
    m = cfg.model

    def keep(shape, p):
        return (torch.rand(shape, generator=gen) >= p).double()

    sizes = m["hidden_sizes"]
    out = {"emb": keep((vocab, 1), m["dropout_emb"]), "in": keep((1, batch, m["emb_size"]), m["dropout_in"])}
    for i, h in enumerate(sizes):
        gates = 4 * h + 2 * (h // m["chunk_size"])  # the cell's weight_hh rows: 4 gates + 2 master gates
        out[f"hh{i}"] = keep((gates, h), m["dropconnect"])
        out[f"out{i}"] = keep((1, batch, h), m["dropout_out"] if i == len(sizes) - 1 else m["dropout_hidden"])
    return out


# --------------------------------------------------------------------------- the authors' step, re-typed


def authors_cell(x, hx, cx, w_ih, b_ih, w_hh, b_hh, C):
    """The authors' ON-LSTM cell: master gates by cumulative softmax (input gate 1 - cumsum), cell (B, n, C)."""
    n = cx.shape[1]
    gates = F.linear(x, w_ih, b_ih) + F.linear(hx, w_hh, b_hh)
    m_in, m_forget = gates[:, : 2 * n].chunk(2, 1)
    outg, cell, ing, forg = gates[:, 2 * n :].view(-1, 4 * n, C).chunk(4, 1)
    m_in = (1.0 - torch.cumsum(torch.softmax(m_in, -1), -1))[:, :, None]
    m_forget = torch.cumsum(torch.softmax(m_forget, -1), -1)[:, :, None]
    overlap = m_forget * m_in
    forg = torch.sigmoid(forg) * overlap + (m_forget - overlap)
    ing = torch.sigmoid(ing) * overlap + (m_in - overlap)
    cy = forg * cx + ing * torch.tanh(cell)
    return torch.sigmoid(outg).reshape(-1, n * C) * torch.tanh(cy).reshape(-1, n * C), cy


def authors_forward(W: dict, x, hidden, masks: dict, m: dict):
    """-> (output after the last dropout, new hidden state, last layer's raw output)."""
    emb = W["emb"] * masks["emb"] / (1 - m["dropout_emb"])
    h = F.embedding(x, emb) * masks["in"] / (1 - m["dropout_in"])
    new_hidden = []
    for i, (w_ih, w_hh, b_ih, b_hh) in enumerate(W["layers"]):
        hx, cx = hidden[i]
        w_hh = w_hh * masks[f"hh{i}"]  # DropConnect: one mask per forward, not rescaled
        outs = []
        for t in range(x.shape[0]):
            hx, cx = authors_cell(h[t], hx, cx, w_ih, b_ih, w_hh, b_hh, m["chunk_size"])
            outs.append(hx)
        new_hidden.append((hx.detach(), cx.detach()))
        raw = torch.stack(outs)
        p = m["dropout_out"] if i == len(W["layers"]) - 1 else m["dropout_hidden"]
        h = raw * masks[f"out{i}"] / (1 - p)
    return h, new_hidden, raw


class AuthorsRun:
    """The authors' loop on leaf tensors copied from our initial model (tied decoder = embedding)."""

    def __init__(self, model, cfg, ar_target: str):
        t = {n: p.detach().clone().requires_grad_() for n, p in model.named_parameters()}
        layers = [
            tuple(t[f"layers.{i}.rnn.{k}_l0"] for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            for i in range(len(cfg.model["hidden_sizes"]))
        ]
        self.W = {"emb": t["embedding.weight"], "layers": layers, "dec_b": t["decoder.bias"]}
        self.params = list(t.values())  # our parameter order (the tied decoder weight is the embedding)
        self.cfg, self.ar_target = cfg, ar_target
        self.s, self.prev_lr, self.ax = 0, None, None

    def zero_hidden(self, batch):
        m = self.cfg.model
        self.hidden = [
            (torch.zeros(batch, h), torch.zeros(batch, h // m["chunk_size"], m["chunk_size"]))
            for h in m["hidden_sizes"]
        ]

    def step(self, x, y, masks, lr_t, averaging) -> dict:
        c, m = self.cfg.train, self.cfg.model
        out, self.hidden, raw = authors_forward(self.W, x, self.hidden, masks, m)
        logits = F.linear(out, self.W["emb"], self.W["dec_b"])
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        ar = c.alpha * (raw if self.ar_target == "raw" else out).pow(2).mean()
        tar = c.beta * (raw[1:] - raw[:-1]).pow(2).mean()
        grads = torch.autograd.grad(ce + ar + tar, self.params)
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        coef = min(1.0, c.clip / (float(norm) + 1e-6))  # clip_grad_norm_'s rule
        eta = lr_t
        if averaging:  # ASGD: the rate fixed at the end of the previous averaged step
            self.s += 1
            eta = lr_t if self.s == 1 else self.prev_lr
            self.prev_lr = lr_t
        with torch.no_grad():
            for p, g in zip(self.params, grads):
                p -= eta * (g * coef + c.weight_decay * p)
        if averaging:  # mu = 1 for the first two steps, then 1 / (s - 1): the mean of iterates 2..s
            now = [p.detach().clone() for p in self.params]
            self.ax = now if self.s <= 2 else [a + (q - a) / (self.s - 1) for a, q in zip(self.ax, now)]
        return {"loss": ce + ar + tar, "ce": ce, "ar": ar, "tar": tar, "raw": raw, "dropped": out}


# --------------------------------------------------------------------------- the tests


def close(a, b):
    # float64 (rounding ~1e-16): the re-typed step rounds differently from ours and the difference grows over
    # the two epochs, but stays far below this tolerance: measured at most 2.5e-4 of it with ATen's AVX512,
    # AVX2 and plain kernels (issue 20); every value is also compared at the first step, where a wrong term
    # (a mask, AR on the wrong output) shows before any growth.
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("ar_target", ["raw", "dropped"])
def test_training_steps_equal_the_authors_step_with_dropout(tmp_path, small_corpus, float64, monkeypatch, ar_target):
    """Two epochs, the second averaging: at every step the loss, its cross-entropy, AR and TAR terms, the
    last layer's raw and dropped outputs, the weights after the update and the averaged weights equal the
    re-typed authors' step fed the same masks. The total loss tells the AR targets apart (the dropped
    output's AR is about 1/(1-p) times the raw one's), so each ar_target is pinned to its own tensor."""
    trainer = make_trainer(tmp_path / "run", small_corpus, {}, epochs=2, asgd_start_epoch=2, ar_target=ar_target)
    cfg, scheds = trainer.config, schedules(trainer)
    n_steps = sum(len(s) for s in scheds)
    assert len(scheds[0]) >= 3 and len(scheds[1]) >= 3, "the corpus must give several steps per epoch"
    gen = torch.Generator().manual_seed(5)
    B, V = cfg.train.batch_size, len(trainer.corpus.vocab)
    masks = [draw_masks(gen, cfg, V, B) for _ in range(n_steps)]
    feed = MaskFeed()
    for mk in masks:
        feed.add(list(mk.values()))
    ref = AuthorsRun(trainer.model, cfg, ar_target)
    ours: list[dict] = []
    trainer.objective.register_forward_hook(lambda mod, i, o: ours.append({"loss": o[0].detach(), "ce": o[1]}))

    extras: list[dict] = []

    def keep_extras(mod, inputs, output) -> None:  # returns None: a hook's return value replaces the output
        if mod.training:
            extras.append(dict(output[2]))

    trainer.model.register_forward_hook(keep_extras)
    after: list[dict] = []
    trainer_params = trainer.params
    feed.install(monkeypatch)
    run_trainer(
        trainer,
        lambda tr: after.append(
            {
                "params": [p.detach().clone() for p in trainer_params],
                "avg": [a.detach().clone() for a in tr.averaged_weights()] if tr.prog.task.averaging else None,
            }
        ),
    )
    monkeypatch.undo()
    assert feed.left() == 0 and feed.served == n_steps * 6, "every step drew exactly its six masks"
    data = batchify(trainer.corpus["train"].ids, B)
    k = 0
    for epoch, sched in enumerate(scheds, start=1):
        ref.zero_hidden(B)
        for seg in sched:
            x, y = segment(data, seg.start, seg.length)
            r = ref.step(x, y, masks[k], cfg.train.lr * seg.lr_scale, averaging=epoch == 2)
            close(ours[k]["loss"], r["loss"])
            close(ours[k]["ce"], r["ce"])
            c = cfg.train  # the AR and TAR terms of our outputs (the total above pins how they are combined)
            close(c.alpha * extras[k][ar_target].pow(2).mean(), r["ar"])
            close(c.beta * (extras[k]["raw"][1:] - extras[k]["raw"][:-1]).pow(2).mean(), r["tar"])
            close(extras[k]["raw"], r["raw"])
            close(extras[k]["dropped"], r["dropped"])
            for a, b in zip(after[k]["params"], ref.params):
                close(a, b)
            if epoch == 2:
                for a, b in zip(after[k]["avg"], ref.ax):
                    close(a, b)
            k += 1
    assert k == n_steps == len(ours) == len(extras)


def test_averaging_equals_torch_asgd_driven_as_the_authors_do(tmp_path, small_corpus, float64):
    """Our averaged weights after every step of the averaging phase = torch.optim.ASGD(t0=0, lambd=0)'s ``ax``
    in the authors' loop: lr set to lr * seq_len / bptt before each step and put back after, clipping,
    weight decay, a fresh ASGD at the switch (dropout off: the model itself is pinned above)."""
    no_dropout = {k: 0.0 for k in ("dropout_emb", "dropout_in", "dropout_hidden", "dropout_out", "dropconnect")}
    trainer = make_trainer(tmp_path / "run", small_corpus, no_dropout, epochs=2, asgd_start_epoch=2)
    c, scheds = trainer.cfg, schedules(trainer)
    model = copy.deepcopy(trainer.model)
    ours: list = []
    run_trainer(trainer, lambda tr: ours.append(tr.averaged_weights() and [a.clone() for a in tr.averaged_weights()]))
    params = list(model.parameters())
    opt: torch.optim.Optimizer = torch.optim.SGD(params, lr=c.lr, weight_decay=c.weight_decay)
    data = batchify(trainer.corpus["train"].ids, c.batch_size)
    k = 0
    for epoch, sched in enumerate(scheds, start=1):
        hidden = None
        if epoch == 2:
            opt = torch.optim.ASGD(params, lr=c.lr, t0=0, lambd=0.0, weight_decay=c.weight_decay)
        for seg in sched:
            x, y = segment(data, seg.start, seg.length)
            lr2 = opt.param_groups[0]["lr"]
            opt.param_groups[0]["lr"] = lr2 * seg.lr_scale
            out, hidden, ex = model(x, hidden)
            hidden = [tuple(t.detach() for t in s) for s in hidden]
            logits = model.logits(out)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss = loss + c.alpha * ex["raw"].pow(2).mean() + c.beta * (ex["raw"][1:] - ex["raw"][:-1]).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, c.clip)
            opt.step()
            opt.param_groups[0]["lr"] = lr2
            if epoch == 2:
                for a, p in zip(ours[k], params):
                    torch.testing.assert_close(a, opt.state[p]["ax"], rtol=1e-12, atol=1e-14)
            else:
                assert ours[k] is None
            k += 1
    assert k == len(ours) and len(scheds[1]) >= 3
