"""The relation classifier (after Bowman et al. 2015): one shared encoder for both formulas (any of
:mod:`onlstm.encoders`), features ``[h1, h2, h1*h2, |h1-h2|]``, an MLP over the 7 relations (docs/logic.md, "Model").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_sequence

from ..checkpoint import CheckpointError, config_header, read_json
from ..device import evaluating
from ..encoders import make_encoder
from ..errors import InputError
from ..saved import LoadedRun, RunFiles, load_run
from ..sharing import check_run_config, model_card, pretrained_path, save_pretrained
from .config import MLP_ACTIVATIONS, LogicModelConfig
from .data import Example
from .formulas import VOCABULARY, Binary, Formula, FormulaSyntaxError, Not, Var, parse, to_tokens
from .relations import RELATIONS

#: The ``kind`` of a logic run (registered by :mod:`onlstm.logic`).
KIND = "logic-classifier"
PAD = "<pad>"
#: Token strings by id; id 0 is padding.
TOKENS: tuple[str, ...] = (PAD,) + VOCABULARY
TOKEN_IDS: dict[str, int] = {t: i for i, t in enumerate(TOKENS)}


_ACTIVATIONS = {"relu": nn.ReLU, "elu": nn.ELU}
assert tuple(_ACTIVATIONS) == MLP_ACTIVATIONS  # the config offers exactly the activations built here
assert len(TOKENS) == LogicModelConfig().vocab_size  # the config's default counts the padding id


def token_ids(formula: Formula | str) -> list[int]:
    """Token ids of a formula (a :class:`Formula` or its text in the notation)."""
    tokens = formula.split(" ") if isinstance(formula, str) else to_tokens(formula)
    try:
        return [TOKEN_IDS[t] for t in tokens]
    except KeyError as exc:
        raise InputError(f"unknown token {exc.args[0]!r}; the vocabulary is {' '.join(VOCABULARY)}") from None


def pad_batch(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (T, N) int64 padded with 0, lengths (N,) int64)`` from lists of token ids."""
    if not seqs:
        raise ValueError("empty batch")
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int64)
    if int(lengths.min()) == 0:
        raise ValueError("a formula has no tokens")
    return pad_sequence([torch.as_tensor(s, dtype=torch.int64) for s in seqs]), lengths


def check_batch_size(batch_size: int) -> None:
    """``batch_size`` of the Python API: a whole number of at least 1 (0 or -1 would read nothing)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")


def pair_features(h1: torch.Tensor, h2: torch.Tensor) -> torch.Tensor:
    """``[h1, h2, h1 * h2, |h1 - h2|]`` along the last dimension: (B, H), (B, H) -> (B, 4H)."""
    return torch.cat([h1, h2, h1 * h2, (h1 - h2).abs()], dim=-1)


def _last_hidden(state) -> torch.Tensor:
    """The top layer's final hidden state (N, H) from an encoder state (``(h, c)`` or ``h``)."""
    h = state[0] if isinstance(state, tuple) else state  # (layers, N, H)
    return h[-1]


class LogicClassifier(nn.Module):
    """Shared-encoder pair classifier over the 7 relations (class ``k`` = ``RELATIONS[k]``)."""

    def __init__(self, config: LogicModelConfig):
        super().__init__()
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.emb_size, padding_idx=0)
        # Small uniform init, as the language model (an N(0, 1) embedding gives denormal gradients on CPU).
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        with torch.no_grad():
            self.embedding.weight[0].zero_()
        self.encoder = make_encoder(c.cell, c.emb_size, c.hidden_size, **c.layer_options())
        n_feat = 4 * c.hidden_size
        # dropout, [linear, activation, dropout,] linear: the saved weights are named by these positions
        layers: list[nn.Module] = [nn.Dropout(c.dropout)]
        if c.mlp_hidden:
            layers += [nn.Linear(n_feat, c.mlp_hidden), _ACTIVATIONS[c.mlp_activation](), nn.Dropout(c.dropout)]
        self.mlp = nn.Sequential(*layers, nn.Linear(c.mlp_hidden or n_feat, c.n_classes))

    def encode(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Encode formulas: ``tokens`` (T, N) padded, ``lengths`` (N,) -> hidden state at each last token (N, H)."""
        if tokens.dim() != 2 or lengths.dim() != 1 or tokens.shape[1] != lengths.shape[0]:
            raise ValueError(
                f"expected tokens (T, N) and lengths (N,), got {tuple(tokens.shape)} and {tuple(lengths.shape)}"
            )
        _, state, _ = self.encoder(self.embed(tokens, lengths))
        return _last_hidden(state)  # (N, H)

    def embed(self, tokens: torch.Tensor, lengths: torch.Tensor) -> PackedSequence:
        """The encoder's input for formulas ``tokens`` (T, N) padded, ``lengths`` (N,): their embeddings, packed,
        with dropout in training mode."""
        # Pack the token ids, not the embeddings: the lookup and the dropout mask then cover the real tokens
        # only (padding is about half of a batch of mixed lengths; this is ~4% of a paper-size training step).
        ids = pack_padded_sequence(tokens, lengths.cpu(), enforce_sorted=False)
        x = F.dropout(self.embedding(ids.data), self.config.dropout, self.training)  # (tokens, E)
        return PackedSequence(x, ids.batch_sizes, ids.sorted_indices, ids.unsorted_indices)

    def padded_logits(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits (B, 7) for both formulas of ``B`` pairs as the columns of one padded block ``tokens`` (T, 2B), the
        first formulas first, and their ``lengths`` (2B,): one shape for many batches (CUDA graphs,
        ``logic/graphs.py``). Each formula's encoding is the output at its last token, which is the final state
        for the recurrent encoders of ``logic.graphs.GRAPH_CELLS``."""
        x = F.dropout(self.embedding(tokens), self.config.dropout, self.training)  # (T, 2B, E)
        out, _, _ = self.encoder(x)
        h = out[lengths - 1, torch.arange(tokens.shape[1], device=tokens.device)]  # (2B, H)
        n = tokens.shape[1] // 2
        return self.mlp(pair_features(h[:n], h[n:]))

    def features(self, a_tokens, a_lengths, b_tokens, b_lengths) -> torch.Tensor:
        """``[h1, h2, h1*h2, |h1-h2|]`` (B, 4H); both formulas go through the encoder in one call."""
        n, t = a_tokens.shape[1], max(a_tokens.shape[0], b_tokens.shape[0])
        both = torch.cat([F.pad(x, (0, 0, 0, t - x.shape[0])) for x in (a_tokens, b_tokens)], dim=1)  # (T, 2B)
        h = self.encode(both, torch.cat([a_lengths, b_lengths]))  # (2B, H)
        return pair_features(h[:n], h[n:])

    def forward(self, a_tokens, a_lengths, b_tokens, b_lengths) -> torch.Tensor:
        """Logits (B, 7) for pairs given as padded token batches (see :func:`pad_batch`)."""
        return self.mlp(self.features(a_tokens, a_lengths, b_tokens, b_lengths))

    def predict(self, pairs, batch_size: int = 512) -> list[str]:
        """The relation predicted for each pair ``(A, B)`` of formulas (texts in the notation, docs/logic.md, or
        :class:`~onlstm.logic.formulas.Formula` objects): one of :data:`~onlstm.logic.relations.RELATIONS`
        (``= < > ^ | v #``). A text that is no formula is a ``FormulaSyntaxError`` naming its pair."""
        return [RELATIONS[k] for k in self.relation_probabilities(pairs, batch_size).argmax(-1).tolist()]

    def relation_probabilities(self, pairs, batch_size: int = 512) -> torch.Tensor:
        """``(N, 7)`` probabilities of the relations of ``pairs`` (as :meth:`predict` reads them), the columns in
        the order of :data:`~onlstm.logic.relations.RELATIONS`; in eval mode, the model's mode given back."""
        check_batch_size(batch_size)
        return encoded_logits(self, encode_pairs(pairs), batch_size).softmax(-1)

    def save_pretrained(
        self,
        directory,
        *,
        run_config: dict | None = None,
        command: str | None = None,
        results: dict | None = None,
        overwrite: bool = False,
    ):
        """Save in Hugging Face's layout (:func:`onlstm.sharing.save_pretrained`); ``run_config`` (the run's
        header), ``command`` and ``results`` as for :meth:`onlstm.models.LanguageModel.save_pretrained`."""
        run_config = check_run_config(getattr(self, "run_config", None) if run_config is None else run_config)
        config = {**run_config, **config_header(KIND, self.config.to_dict())}
        title = f"{self.config.cell} logical-inference classifier ({self.config.hidden_size} units)"
        card = model_card(title, config, LOGIC_USAGE, command, results, results_headline(results))
        return save_pretrained(directory, self, config, card, list(TOKENS), overwrite=overwrite)

    @classmethod
    def from_pretrained(
        cls, name_or_path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
    ) -> LogicClassifier:
        """A classifier saved by :meth:`save_pretrained` (a local directory, or a Hub id with
        ``huggingface_hub`` installed) or a training run directory, in eval mode on ``device``, in ``dtype`` (by
        default the one it was saved in)."""
        from ..device import as_device

        model, config = load_classifier(pretrained_path(name_or_path), device=as_device(device), dtype=dtype)
        model.run_config = config
        return model


def results_headline(results: dict | None) -> str:
    """A logic run's best validation accuracy in ``results.json``, in words for its card ("" where it holds none)."""
    if not isinstance(results, dict) or not isinstance(results.get("best_valid_accuracy"), (int, float)):
        return ""
    pairs = f" on {results['n_valid']:,} pairs" if isinstance(results.get("n_valid"), int) else ""
    return f"Best validation accuracy **{100 * results['best_valid_accuracy']:.2f}%**{pairs}."


LOGIC_USAGE = """
```python
from onlstm.logic.model import LogicClassifier

model = LogicClassifier.from_pretrained("THIS_DIRECTORY")
```

Evaluate it: `onlstm logic eval --checkpoint THIS_DIRECTORY --data DIR`.
"""


def load_classifier(
    checkpoint: str | Path, tag: str = "best", device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> tuple[LogicClassifier, dict]:
    """Model (on ``device``, eval mode) and header from a run directory or a ``.safetensors`` file inside one.
    Raises :class:`~onlstm.checkpoint.CheckpointError` when the files are missing or corrupt, or when the
    checkpoint is of another kind (e.g. a language model)."""
    build = lambda section: LogicClassifier(LogicModelConfig.from_dict(section))
    opts = {"vocab": _read_tokens, "check": _check_tokens, "what": "a logic classifier"}
    hint = "train one with `onlstm logic train`"
    run = load_run(checkpoint, KIND, build, tag=tag, device=device, dtype=dtype, **opts, hint=hint)
    return run.model, run.config


def _read_tokens(path: Path) -> list | None:
    return read_json(path) if path.exists() else None  # runs written before the vocabulary file existed have none


def _check_tokens(run: LoadedRun) -> None:
    if run.vocab is not None and tuple(run.vocab) != TOKENS:
        raise CheckpointError(
            f"{RunFiles(run.run_dir).vocab_path} differs from this version's token list {list(TOKENS)}"
        )


Encoded = tuple[list[int], list[int], int]


def encode_examples(examples: list[Example]) -> list[Encoded]:
    """``(ids of A, ids of B, class index)`` per example."""
    return [(token_ids(ex.a), token_ids(ex.b), RELATIONS.index(ex.label)) for ex in examples]


def encode_pairs(pairs) -> list[Encoded]:
    """``(ids of A, ids of B, 0)`` for each pair ``(A, B)`` of formulas (texts or :class:`Formula` objects), each
    text read by :func:`~onlstm.logic.formulas.parse` (a ``FormulaSyntaxError`` names the pair and the side)."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise InputError(f"pairs must be a list of (A, B) formula pairs, got {type(pairs).__name__}")
    if not pairs:
        raise InputError("pairs is empty: give at least one (A, B) pair of formulas")
    out = []
    for k, pair in enumerate(pairs):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise InputError(f"pair {k} must be two formulas (A, B), got {pair!r}")
        sides = []
        for which, f in zip(("first", "second"), pair):
            if isinstance(f, str):
                try:
                    f = parse(f)
                except FormulaSyntaxError as exc:
                    raise FormulaSyntaxError(f"pair {k}, {which} formula: {exc}") from None
            elif not isinstance(f, (Var, Not, Binary)):
                raise InputError(f"pair {k}, {which} formula: a text or a Formula, got {type(f).__name__}")
            sides.append(token_ids(f))
        out.append((sides[0], sides[1], 0))
    return out


def collate(batch: list[Encoded]):
    """``(a_tokens, a_lengths, b_tokens, b_lengths, labels)`` tensors for a list of encoded pairs."""
    a, al = pad_batch([e[0] for e in batch])
    b, bl = pad_batch([e[1] for e in batch])
    return a, al, b, bl, torch.tensor([e[2] for e in batch], dtype=torch.int64)


_OPERATOR_IDS = frozenset(TOKEN_IDS[t] for t in ("not", "and", "or"))


def operator_count(pair: Encoded) -> int:
    """The larger operator count of an encoded pair (each operator is one token), as in the file numbers."""
    return max(sum(t in _OPERATOR_IDS for t in pair[0]), sum(t in _OPERATOR_IDS for t in pair[1]))


@torch.no_grad()
def encoded_logits(model: LogicClassifier, data: list[Encoded], batch_size: int = 512) -> torch.Tensor:
    """``(N, 7)`` logits of the encoded pairs, on the CPU, in eval mode (the model's mode given back): float64 for a
    float64 model (a float32 copy would drop what it was asked for), else float32 (a half-precision model's too)."""
    # Sorted by length, a batch's formulas are similar in length (faster; results do not change).
    order = sorted(range(len(data)), key=lambda i: len(data[i][0]) + len(data[i][1]))
    weight = next(model.parameters())
    dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
    out, device = torch.empty(len(data), len(RELATIONS), dtype=dtype), weight.device
    with evaluating(model):
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            a, al, b, bl, _ = (t.to(device) for t in collate([data[j] for j in idx]))
            out[idx] = model(a, al, b, bl).to(dtype).cpu()
    return out


def predict_encoded(model: LogicClassifier, data: list[Encoded], batch_size: int = 512) -> list[int]:
    """Class index (into :data:`RELATIONS`) predicted for each encoded pair, in eval mode (mode restored)."""
    return encoded_logits(model, data, batch_size).argmax(-1).tolist()


def correct_flags(model: LogicClassifier, data: list[Encoded], batch_size: int = 512) -> list[bool]:
    """Per pair, whether its predicted class is the label."""
    return [p == e[2] for p, e in zip(predict_encoded(model, data, batch_size), data, strict=True)]


def accuracy_by_ops(flags: list[bool], ops: list[int]) -> dict[str, float]:
    """Accuracy per larger operator count (keys are the counts as strings, for JSON)."""
    total, right = Counter(ops), Counter(k for ok, k in zip(flags, ops, strict=True) if ok)
    return {str(k): right[k] / total[k] for k in sorted(total)}
