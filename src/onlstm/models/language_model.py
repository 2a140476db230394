"""The AWD-LSTM-style language model of the paper, with any encoder from :mod:`onlstm.encoders`.

    tokens (T, B) -> embedding (row dropout) -> locked dropout -> layer 1 -> locked dropout -> ...
                  -> layer L -> locked dropout -> decoder (tied to the embedding) -> logits

Layers have their own widths (the paper: 1150-1150-400 over a 400-dim embedding); with tied
weights the last width must equal the embedding size.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..dataconfig import DictConfig
from ..encoders import ENCODERS, has_distances, make_encoder


@dataclass
class LMConfig(DictConfig):
    """Architecture of :class:`LanguageModel` (saved as JSON next to every checkpoint)."""

    config_kind = "language-model"

    vocab_size: int
    emb_size: int = 400
    hidden_sizes: list[int] = field(default_factory=lambda: [1150, 1150, 400])
    cell: str = "onlstm"
    chunk_size: int = 10
    master_input: str = "paper"
    dropout_emb: float = 0.1       # whole embedding rows (words) dropped, AWD's dropoute
    dropout_in: float = 0.5        # locked dropout on the embedding output, AWD's dropouti
    dropout_hidden: float = 0.3    # locked dropout between layers, AWD's dropouth
    dropout_out: float = 0.45      # locked dropout on the last layer's output, AWD's dropout
    dropconnect: float = 0.45      # on hidden-to-hidden weights, AWD's wdrop
    tie_weights: bool = True

    def __post_init__(self):
        self.hidden_sizes = list(self.hidden_sizes)
        if self.cell not in ENCODERS:
            raise ValueError(f"cell must be one of {sorted(ENCODERS)}, got {self.cell!r}")
        if self.vocab_size <= 0 or self.emb_size <= 0 or not self.hidden_sizes or min(self.hidden_sizes) <= 0:
            raise ValueError("vocab_size, emb_size and every hidden size must be positive and hidden_sizes non-empty")
        if self.tie_weights and self.hidden_sizes[-1] != self.emb_size:
            raise ValueError(f"tie_weights needs the last layer's width ({self.hidden_sizes[-1]}) to equal "
                             f"emb_size ({self.emb_size}); change one of them or set tie_weights: false")
        if self.cell == "onlstm":
            bad = [h for h in self.hidden_sizes if h % self.chunk_size]
            if bad:
                raise ValueError(f"hidden sizes {bad} are not divisible by chunk_size={self.chunk_size}")



def locked_dropout(x: torch.Tensor, p: float, training: bool,
                   shard: tuple[int, int] | None = None) -> torch.Tensor:
    """Dropout with one mask per sequence, shared over time (``x`` is (T, B, F)).

    ``shard = (start, total)``: ``x`` holds columns ``start:start+B`` of a batch of ``total``
    columns; the mask is drawn for all ``total`` columns and sliced, so that processes which each
    own a share of the batch (and share the random state) drop exactly what one process would.
    """
    if not training or p == 0.0:
        return x
    if shard is None:
        mask = x.new_empty(1, x.shape[1], x.shape[2]).bernoulli_(1 - p)
    else:
        start, total = shard
        if not 0 <= start <= total - x.shape[1]:
            raise ValueError(f"shard {shard} does not hold the {x.shape[1]} columns of the input")
        mask = x.new_empty(1, total, x.shape[2]).bernoulli_(1 - p)[:, start:start + x.shape[1]]
    return x * (mask / (1 - p))


def embedding_dropout(weight: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Drop whole rows of the embedding matrix (every occurrence of a word), rescaling the rest."""
    if not training or p == 0.0:
        return weight
    mask = weight.new_empty(weight.shape[0], 1).bernoulli_(1 - p) / (1 - p)
    return weight * mask


class LanguageModel(nn.Module):
    def __init__(self, config: LMConfig):
        super().__init__()
        self.config = config
        c = config
        self.embedding = nn.Embedding(c.vocab_size, c.emb_size)
        sizes = [c.emb_size] + c.hidden_sizes
        self.layers = nn.ModuleList(
            make_encoder(c.cell, sizes[i], sizes[i + 1], chunk_size=c.chunk_size, master_input=c.master_input,
                         dropconnect=c.dropconnect)
            for i in range(len(c.hidden_sizes)))
        self.decoder = nn.Linear(c.hidden_sizes[-1], c.vocab_size)
        # As the reference: small uniform embedding (an N(0, 1) tied embedding makes early gradients
        # denormal and CPU steps 15-100x slower), zero decoder bias.
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if c.tie_weights:
            self.decoder.weight = self.embedding.weight

    @property
    def has_distances(self) -> bool:
        return has_distances(self.config.cell)

    def forward(self, tokens: torch.Tensor, state=None, return_distances: bool = False, *,
                shard: tuple[int, int] | None = None):
        """``tokens`` (T, B) -> ``output`` (T, B, last width), new ``state`` (one per layer), and a dict
        with ``raw`` (last layer's output before dropout, for TAR), ``dropped`` (after, for AR) and,
        when asked, ``distances``: per layer, :class:`onlstm.Distances` with (T, B) tensors.

        ``shard = (start, total)`` (training on several processes): ``tokens`` are columns
        ``start:start+B`` of a batch of ``total``; locked-dropout masks are drawn for the whole batch
        and sliced (see :func:`locked_dropout`).
        """
        c = self.config
        w = embedding_dropout(self.embedding.weight, c.dropout_emb, self.training)
        x = locked_dropout(F.embedding(tokens, w), c.dropout_in, self.training, shard)
        state = state or [None] * len(self.layers)
        new_state, dists = [], []
        for i, layer in enumerate(self.layers):
            x, s, d = layer(x, state[i], return_distances=return_distances and self.has_distances)
            new_state.append(s)
            if d is not None:
                dists.append(type(d)(d.forget[..., 0], d.input[..., 0]))
            raw = x
            p = c.dropout_out if i == len(self.layers) - 1 else c.dropout_hidden
            x = locked_dropout(x, p, self.training, shard)
        extras = {"raw": raw, "dropped": x}
        if return_distances:
            extras["distances"] = dists
        return x, new_state, extras

    def logits(self, output: torch.Tensor) -> torch.Tensor:
        return self.decoder(output)


KIND = "lm"
"""``config.json``'s ``kind`` of a language-model run (``onlstm lm train``, ``onlstm demo``)."""


def load_language_model_run(checkpoint, tag: str = "best", device="cpu", hint: str = "train one with `onlstm lm "
                            "train` or `onlstm demo`"):
    """A language-model run directory (or a ``.safetensors`` file in one) as a
    :class:`~onlstm.runs.LoadedRun`: the model in eval mode on ``device``, its :class:`~onlstm.data.vocab.Vocab`
    and ``config.json``. Every problem is a :class:`~onlstm.checkpoint.CheckpointError` naming the file."""
    from ..checkpoint import CheckpointError
    from ..data.vocab import Vocab
    from ..runs import load_run

    def check(run) -> None:
        if len(run.vocab) != run.model.config.vocab_size:
            raise CheckpointError(f"{run.run_dir}: vocab.json has {len(run.vocab)} words but the model expects "
                                  f"{run.model.config.vocab_size}; the run directory is inconsistent")

    return load_run(checkpoint, KIND, lambda section: LanguageModel(LMConfig.from_dict(section)), tag=tag,
                    device=device, vocab=Vocab.load, check=check, what="a language model", hint=hint)
