"""The preset logic/paper is the authors' logic script (proplog.py): its settings, its validation split, its
learning-rate schedule, and three of its training steps re-typed here from the script (ON-LSTM and its --std
LSTM) and compared with ours, weight by weight."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from onlstm.config import Settings
from onlstm.logic.config import SECTIONS
from onlstm.logic.data import read_examples, split_train_valid, write_file
from onlstm.logic.generate import random_formula_text
from onlstm.logic.model import TOKEN_IDS, collate
from onlstm.logic.relations import RELATIONS
from onlstm.logic.train import LogicTask, PlateauSchedule, train_step

pytestmark = pytest.mark.usefixtures("one_thread")

# proplog.py's argparse defaults and fixed settings, as written in the script.
SCRIPT = {
    "emb_size": 128, "hidden_size": 400, "chunk_size": 10, "dropout": 0.2, "dropconnect": 0.0,
    "mlp_hidden": 400, "mlp_activation": "elu", "lr": 1e-3, "clip": 1.0, "epochs": 50, "batch_size": 128,
    "weight_decay": 1.2e-6, "adam_eps": 1e-9, "adam_beta1": 0.9, "lr_decay": 0.5, "valid_fraction": 0.1,
    "valid_split": "ordered", "valid_every": 0, "min_lr": 0.0, "max_train_ops": 6, "score_test": True,
}  # fmt: skip


def paper(cell: str = "onlstm", **train):
    settings = Settings.resolve(SECTIONS, "paper", experiment="logic", keys=("data", "out"))
    return settings.build("model", cell=cell), settings.build("train", **train), settings.build("compare")


def test_the_preset_has_the_scripts_settings():
    model, train, compare = paper()
    got = {**vars(model), **vars(train)}
    assert {k: got[k] for k in SCRIPT} == SCRIPT
    assert train.patience >= train.epochs  # no early stopping: all 50 epochs
    assert compare.cells == ["onlstm", "lstm-std"] and compare.seeds[0] == 1111 and len(compare.seeds) >= 3


def test_validation_is_every_tenth_pair_of_the_files_in_order(tmp_path):
    rng, lines = random.Random(0), []
    for k in range(3):
        rows = [("#", random_formula_text(k, rng)[0], random_formula_text(0, rng)[0]) for _ in range(17 + k)]
        write_file(tmp_path / f"train{k}", rows)
        lines += [(r[1], r[2]) for r in rows]
    _, train = paper()[:2]
    fit, valid = split_train_valid(read_examples(tmp_path, split="train"), train)
    assert [(ex.text_a, ex.text_b) for ex in valid] == lines[9::10]  # the script's counter % 10 == 0, from 1
    assert len(fit) + len(valid) == len(lines)


def test_the_schedule_is_reduce_lr_on_plateau_max_patience_2_threshold_0():
    _, train = paper()[:2]
    ours_opt = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=train.lr)
    theirs_opt = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=train.lr)
    ours = PlateauSchedule(ours_opt, train.lr_decay, train.lr_patience, train.min_lr)
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(theirs_opt, "max", 0.5, patience=2, threshold=0)
    best = None
    for acc in [0.5, 0.6, 0.6, 0.59, 0.6, 0.61, 0.61, 0.61, 0.61, 0.6, 0.6, 0.6, 0.62, 0.5, 0.5, 0.5, 0.5]:
        improved = best is None or acc > best  # the engine's rule: strictly better
        best = acc if improved else best
        ours.step(improved)
        theirs.step(acc)
        assert ours_opt.param_groups[0]["lr"] == theirs_opt.param_groups[0]["lr"]
    assert ours_opt.param_groups[0]["lr"] < train.lr / 4  # the sequence did decay, more than once


class AuthorsCell(nn.Module):
    """proplog.py's ON_LSTM.ONLSTMCell (no DropConnect: --wdrop 0), re-typed from the script's repository."""

    def __init__(self, ninp: int, nhid: int, chunk: int, std: bool):
        super().__init__()
        self.n, self.chunk, self.nhid, self.std = nhid // chunk, chunk, nhid, std
        self.ih = nn.Linear(ninp, 4 * nhid + 2 * self.n)
        self.hh = nn.Linear(nhid, 4 * nhid + 2 * self.n)

    def forward(self, x):  # (T, N, E) -> (T, N, H)
        hx, cx, outs = x.new_zeros(x.shape[1], self.nhid), x.new_zeros(x.shape[1], self.n, self.chunk), []
        for t_input in self.ih(x):
            gates = t_input + self.hh(hx)
            cin, cforget = gates[:, : 2 * self.n].chunk(2, 1)
            og, cell, ig, fg = gates[:, 2 * self.n :].view(-1, 4 * self.n, self.chunk).chunk(4, 1)
            cin = (1.0 - torch.cumsum(F.softmax(cin, -1), -1))[:, :, None]
            cforget = torch.cumsum(F.softmax(cforget, -1), -1)[:, :, None]
            ig, fg, cell, og = torch.sigmoid(ig), torch.sigmoid(fg), torch.tanh(cell), torch.sigmoid(og)
            if not self.std:
                overlap = cforget * cin
                fg, ig = fg * overlap + (cforget - overlap), ig * overlap + (cin - overlap)
            cx = fg * cx + ig * cell
            hx = (og * torch.tanh(cx)).view(-1, self.nhid)
            outs.append(hx)
        return torch.stack(outs)


class AuthorsClassifier(nn.Module):
    """proplog.py's Classifier (dropout 0 here, so that its steps and ours see the same numbers)."""

    def __init__(self, std: bool):
        super().__init__()
        self.embedding = nn.Embedding(len(TOKEN_IDS), 128, padding_idx=0)
        self.encoder = AuthorsCell(128, 400, 10, std)
        self.mlp = nn.Sequential(nn.Linear(4 * 400, 400), nn.ELU(), nn.Linear(400, len(RELATIONS)))

    def forward(self, sents):  # (T, 2B) padded with 0
        lengths, n = (sents != 0).sum(0), sents.shape[1] // 2
        out = self.encoder(self.embedding(sents))
        last = out[lengths - 1, torch.arange(sents.shape[1])]
        c1, c2 = last[:n], last[n:]
        return self.mlp(torch.cat([c1, c2, c1 * c2, torch.abs(c1 - c2)], dim=1))


def copy_ours_into_theirs(ours, theirs: AuthorsClassifier) -> None:
    rnn, skip = ours.encoder.rnn, 2 * theirs.encoder.n - 2 * ours.encoder.rnn.n_chunks  # lstm-std: 2 master rows
    with torch.no_grad():
        theirs.embedding.weight.copy_(ours.embedding.weight)
        for mine, name in ((theirs.encoder.ih, "ih"), (theirs.encoder.hh, "hh")):
            mine.weight[skip:] = getattr(rnn, f"weight_{name}_l0")
            mine.bias[skip:] = getattr(rnn, f"bias_{name}_l0")
        for mine, their in ((ours.mlp[1], theirs.mlp[0]), (ours.mlp[4], theirs.mlp[2])):
            their.weight.copy_(mine.weight)
            their.bias.copy_(mine.bias)


def random_batch(rng: random.Random, n: int):
    pairs = []
    for _ in range(n):
        a, b = (random_formula_text(rng.randrange(7), rng)[0] for _ in range(2))
        ids = [[TOKEN_IDS[t] for t in s.split(" ")] for s in (a, b)]
        pairs.append((ids[0], ids[1], rng.randrange(len(RELATIONS))))
    return pairs


@pytest.mark.parametrize("cell", ["onlstm", "lstm-std"])
def test_three_training_steps_equal_the_scripts(cell, tmp_path):
    model_cfg, train_cfg, _ = paper(cell)
    model_cfg.dropout = 0.0
    task = LogicTask(model_cfg, train_cfg, tmp_path, [], [], lambda _m: None)
    ours = task.model.double()  # in place: the optimizer keeps the same parameters
    assert [type(m) for m in ours.mlp] == [nn.Dropout, nn.Linear, nn.ELU, nn.Dropout, nn.Linear]
    theirs = AuthorsClassifier(std=cell == "lstm-std").double()
    copy_ours_into_theirs(ours, theirs)
    opt = torch.optim.Adam(theirs.parameters(), lr=1e-3, eps=1e-9, weight_decay=1.2e-6)  # the script's line
    rng = random.Random(1)
    for _ in range(3):  # Adam's first step does not depend on beta1: three steps do
        batch = random_batch(rng, 6)
        train_step(ours, task.opt, collate(batch), train_cfg.clip)
        a, _, b, _, y = collate(batch)
        t = max(a.shape[0], b.shape[0])
        sents = torch.cat([F.pad(a, (0, 0, 0, t - a.shape[0])), F.pad(b, (0, 0, 0, t - b.shape[0]))], dim=1)
        opt.zero_grad()
        F.cross_entropy(theirs(sents), y).backward()
        torch.nn.utils.clip_grad_norm_(list(theirs.parameters()), 1.0)
        opt.step()
    fresh = AuthorsClassifier(std=cell == "lstm-std").double()
    copy_ours_into_theirs(ours, fresh)
    for (name, p), q in zip(theirs.named_parameters(), fresh.parameters()):
        rows = slice(2 * theirs.encoder.n - 2 * ours.encoder.rnn.n_chunks, None) if "encoder" in name else slice(None)
        assert torch.allclose(p[rows], q[rows], rtol=0, atol=1e-10), name
