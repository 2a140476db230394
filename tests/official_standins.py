"""Stand-ins for the modules of the authors' repository (yikangshen/Ordered-Neurons): the module names, class
names and pickled state of ``model.RNNModel``, ``ON_LSTM.ONLSTMStack``/``ONLSTMCell``/``LinearDropConnect``,
``locked_dropout.LockedDropout``, ``splitcross.SplitCrossEntropyLoss`` and ``data.Corpus``/``Dictionary``, with
their forward pass re-typed from the paper's equations and their code's layout (not copied). The tests write
these sources into a temporary folder, build and ``torch.save`` checkpoints in a child process that has that
folder on its path, and import them in the test process, which cannot import any of these modules.

:data:`MAKE` is the child's script: ``python make.py OUT FORMAT`` writes ``OUT/model.pt``, ``OUT/corpus.data``
and ``OUT/reference.safetensors`` (the authors'-style next-word log-probabilities of a few sentences)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SOURCES = {
    "locked_dropout.py": """
import torch.nn as nn

class LockedDropout(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, dropout=0.5):
        return x  # eval mode only in these tests
""",
    "ON_LSTM.py": """
import torch
import torch.nn as nn
import torch.nn.functional as F
from locked_dropout import LockedDropout


class LinearDropConnect(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, dropout=0.0):
        super().__init__(in_features, out_features, bias=bias)
        self.dropout = dropout

    def forward(self, x):  # eval: the weight scaled by the keep probability (not inverted dropout)
        return F.linear(x, self.weight * (1 - self.dropout), self.bias)


class ONLSTMCell(nn.Module):
    def __init__(self, input_size, hidden_size, chunk_size, dropconnect=0.0):
        super().__init__()
        self.input_size, self.hidden_size, self.chunk_size = input_size, hidden_size, chunk_size
        self.n_chunk = hidden_size // chunk_size
        self.ih = nn.Sequential(nn.Linear(input_size, 4 * hidden_size + 2 * self.n_chunk, bias=True))
        self.hh = LinearDropConnect(hidden_size, 4 * hidden_size + 2 * self.n_chunk, bias=True, dropout=dropconnect)
        self.drop_weight_modules = [self.hh]

    def step(self, pre_x, h, c):
        n, C = self.n_chunk, self.chunk_size
        g = pre_x + self.hh(h)
        m_in, m_forget = g[:, :n], g[:, n:2 * n]
        out, cell, inp, forget = g[:, 2 * n:].view(-1, 4 * n, C).chunk(4, 1)
        m_in = 1.0 - torch.cumsum(F.softmax(m_in, -1), -1)
        m_forget = torch.cumsum(F.softmax(m_forget, -1), -1)
        m_in, m_forget = m_in[:, :, None], m_forget[:, :, None]
        overlap = m_forget * m_in
        f = torch.sigmoid(forget) * overlap + (m_forget - overlap)
        i = torch.sigmoid(inp) * overlap + (m_in - overlap)
        c = f * c + i * torch.tanh(cell)
        h = torch.sigmoid(out) * torch.tanh(c)
        return h.view(-1, self.hidden_size), c


class ONLSTMStack(nn.Module):
    def __init__(self, layer_sizes, chunk_size, dropout=0.0, dropconnect=0.0):
        super().__init__()
        self.cells = nn.ModuleList(
            [ONLSTMCell(a, b, chunk_size, dropconnect=dropconnect) for a, b in zip(layer_sizes, layer_sizes[1:])]
        )
        self.lockdrop = LockedDropout()
        self.dropout = dropout
        self.sizes = layer_sizes

    def forward(self, x):  # (T, B, F) from a zero state
        for cell in self.cells:
            pre = cell.ih(x)
            h = x.new_zeros(x.shape[1], cell.hidden_size)
            c = x.new_zeros(x.shape[1], cell.n_chunk, cell.chunk_size)
            outs = []
            for t in range(x.shape[0]):
                h, c = cell.step(pre[t], h, c)
                outs.append(h)
            x = torch.stack(outs)
        return x
""",
    "model.py": """
import torch.nn as nn
from locked_dropout import LockedDropout
from ON_LSTM import ONLSTMStack


class RNNModel(nn.Module):
    def __init__(self, rnn_type, ntoken, ninp, nhid, chunk_size, nlayers, dropout=0.5, dropouth=0.5,
                 dropouti=0.5, dropoute=0.1, wdrop=0.0, tie_weights=False):
        super().__init__()
        self.lockdrop = LockedDropout()
        self.idrop, self.hdrop, self.drop = nn.Dropout(dropouti), nn.Dropout(dropouth), nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = ONLSTMStack([ninp] + [nhid] * (nlayers - 1) + [ninp], chunk_size=chunk_size,
                               dropconnect=wdrop, dropout=dropouth)
        self.decoder = nn.Linear(ninp, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.rnn_type, self.ninp, self.nhid, self.nlayers = rnn_type, ninp, nhid, nlayers
        self.dropout, self.dropouti, self.dropouth, self.dropoute = dropout, dropouti, dropouth, dropoute
        self.tie_weights = tie_weights

    def forward(self, tokens):
        out = self.rnn(self.encoder(tokens))
        return out.view(-1, out.shape[2])
""",
    "splitcross.py": """
from collections import defaultdict
import torch
import torch.nn as nn
import torch.nn.functional as F


class SplitCrossEntropyLoss(nn.Module):
    def __init__(self, hidden_size, splits, verbose=False):
        super().__init__()
        self.hidden_size = hidden_size
        self.splits = [0] + splits + [100 * 1000000]
        self.nsplits = len(self.splits) - 1
        self.stats = defaultdict(list)
        self.verbose = verbose
        if self.nsplits > 1:
            self.tail_vectors = nn.Parameter(torch.zeros(self.nsplits - 1, hidden_size))
            self.tail_bias = nn.Parameter(torch.zeros(self.nsplits - 1))

    def logprob(self, weight, bias, h):  # every word's log-probability, (N, V)
        if self.nsplits == 1:
            return F.log_softmax(F.linear(h, weight, bias), -1)
        head_end = self.splits[1]
        head = F.log_softmax(F.linear(h, torch.cat([weight[:head_end], self.tail_vectors]),
                                      torch.cat([bias[:head_end], self.tail_bias])), -1)
        parts = [head[:, :head_end]]
        for k in range(1, self.nsplits):
            a, b = self.splits[k], self.splits[k + 1]
            tail = F.log_softmax(F.linear(h, weight[a:b], bias[a:b]), -1)
            parts.append(head[:, -k:][:, :1] + tail)  # split k is scored by the k-th tombstone from the end
        return torch.cat(parts, 1)
""",
    "data.py": """
from collections import Counter
import torch


class Dictionary(object):
    def __init__(self):
        self.word2idx, self.idx2word, self.counter, self.total = {}, [], Counter(), 0

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        self.counter[self.word2idx[word]] += 1
        self.total += 1
        return self.word2idx[word]


class Corpus(object):
    def __init__(self, lines):
        self.dictionary = Dictionary()
        ids = [self.dictionary.add_word(w) for line in lines for w in line.split() + ["<eos>"]]
        self.train = self.valid = self.test = torch.LongTensor(ids)
""",
}

#: The child's script: builds a model (random weights, non-zero biases), saves it and the corpus as the
#: authors' main.py does, and the reference log-probabilities computed by the re-typed forward pass.
MAKE = """
import json, sys, torch
from safetensors.torch import save_file
import data, model, splitcross


def make(out, fmt, splits, odd):
    torch.manual_seed(0)
    text = ["the cat sat on the mat", "a dog ran <unk> fast", "the big red dog sat", "on a mat the cat ran slow"]
    corpus = data.Corpus(text)
    V = len(corpus.dictionary.idx2word)
    m = model.RNNModel("LSTM", V, 8, 12, 4, 3, dropout=0.4, dropouth=0.25, dropouti=0.3, dropoute=0.1,
                       wdrop=0.45, tie_weights=True)
    criterion = splitcross.SplitCrossEntropyLoss(8, splits=[int(s) for s in splits.split(",")] if splits else [])
    with torch.no_grad():
        for p in list(m.parameters()) + list(criterion.parameters()):
            p.uniform_(-0.6, 0.6)
    optimizer = torch.optim.SGD(list(m.parameters()) + list(criterion.parameters()), lr=30, weight_decay=1.2e-6)
    m.eval()
    if odd:  # right classes, wrong contents (a statement run here: no reference, the model may not run)
        exec(odd)
    legacy = dict(_use_new_zipfile_serialization=False) if fmt == "legacy" else {}
    torch.save([m, criterion, optimizer], out + "/model.pt", **legacy)
    torch.save(corpus, out + "/corpus.data", **legacy)
    if odd:
        return
    sents = [[corpus.dictionary.word2idx[w] for w in ["<eos>"] + s.split() + ["<eos>"]] for s in text]
    ref = {}
    with torch.no_grad():
        for k, ids in enumerate(sents):
            x = torch.tensor(ids[:-1]).unsqueeze(1)
            lp = criterion.logprob(m.decoder.weight, m.decoder.bias, m(x))  # (T, V)
            ref[f"logprobs{k}"] = lp.contiguous()
            ref[f"ids{k}"] = torch.tensor(ids)
    save_file(ref, out + "/reference.safetensors")


for case in json.loads(sys.argv[1]):  # [out, fmt, splits, odd] each
    make(*case)
"""


def make_checkpoint(folder: Path, fmt: str = "zip", splits: str = "", odd: str = "") -> Path:
    """Write the stand-in modules and the checkpoint files into ``folder`` (a child process does the pickling,
    so the test process never imports the stand-ins); returns ``folder``. ``odd``: a statement run before saving
    (on ``m``, the model, and ``corpus``) to make the contents wrong; then no reference is written."""
    make_checkpoints(folder, {folder: (fmt, splits, odd)})
    return folder


def make_checkpoints(root: Path, cases: dict[Path, tuple[str, str, str]]) -> None:
    """:func:`make_checkpoint` for each ``folder: (fmt, splits, odd)``, all in one child process (each start of
    Python and torch costs seconds on two cores); the stand-in modules are written into ``root / "authors"``."""
    src = root / "authors"
    src.mkdir(parents=True, exist_ok=True)
    for name, text in SOURCES.items():
        (src / name).write_text(text)
    (src / "make.py").write_text(MAKE)
    for folder in cases:
        Path(folder).mkdir(parents=True, exist_ok=True)
    todo = [[str(folder), *case] for folder, case in cases.items()]
    subprocess.run([sys.executable, str(src / "make.py"), json.dumps(todo)], check=True, cwd=src)
