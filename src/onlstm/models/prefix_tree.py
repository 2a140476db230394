"""Scoring sentences through a prefix tree: every distinct prefix is run through the model once, one depth at a
time, and ``log p(token | prefix)`` of every child read off its parent's logits (docs/syneval.md, "Batching:
the prefix tree"; the decoder's blocks: "Speed")."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..device import evaluating
from ..errors import OnlstmError


class PrefixTreeError(OnlstmError, ValueError):
    """The prefix-tree scorer cannot be used as asked (an empty sequence, a state it cannot split)."""


@dataclass
class PrefixTree:
    """The fed nodes of a chunk of sequences, depth by depth, and where each target's log-probability lands.

    ``tokens[d]`` and ``parents[d]`` (int64, one entry per fed node at depth ``d``; ``parents[0]`` is empty)
    give each fed node's input token and its parent's index at depth ``d - 1``. ``target_parent[d]`` and
    ``target_token[d]`` list the distinct (fed node at depth ``d``, next token) pairs; ``paths[i]`` are the
    indices, in the concatenation over depths of those pairs, of sequence ``i``'s targets in order."""

    tokens: list[torch.Tensor] = field(default_factory=list)
    parents: list[torch.Tensor] = field(default_factory=list)
    target_parent: list[torch.Tensor] = field(default_factory=list)
    target_token: list[torch.Tensor] = field(default_factory=list)
    paths: list[list[int]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Fed nodes: the (position, sentence) steps the model runs for this chunk."""
        return sum(int(t.numel()) for t in self.tokens)


def build_tree(sequences: Sequence[Sequence[int]]) -> PrefixTree:
    """The prefix tree of ``sequences`` (each at least two ids long: an input and a target)."""
    fed: list[dict[tuple[int, int], int]] = []  # per depth: (parent index, token) -> index
    targets: list[dict[tuple[int, int], int]] = []  # per depth: (fed node, next token) -> index at that depth
    raw_paths = []
    for seq in sequences:
        if len(seq) < 2:
            raise PrefixTreeError(f"a sequence needs at least two tokens (an input and a target), got {list(seq)}")
        parent, path = -1, []
        for d in range(len(seq) - 1):
            if d == len(fed):
                fed.append({})
                targets.append({})
            parent = fed[d].setdefault((parent, int(seq[d])), len(fed[d]))
            path.append((d, targets[d].setdefault((parent, int(seq[d + 1])), len(targets[d]))))
        raw_paths.append(path)
    # per depth, column i of the (parent, token) keys; dicts keep insertion order, which is the index order
    column = lambda levels, i: [torch.tensor([key[i] for key in level], dtype=torch.long) for level in levels]
    tree = PrefixTree(column(fed, 1), column(fed, 0), column(targets, 0), column(targets, 1))
    offsets = list(itertools.accumulate((int(t.numel()) for t in tree.target_token), initial=0))
    tree.paths = [[offsets[d] + j for d, j in path] for path in raw_paths]
    return tree


def select_state(state, index: torch.Tensor, batch: int):
    """Rows ``index`` (on dimension 1, the batch) of a layer's carried state: a tensor or nested tuples."""
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return type(state)(select_state(s, index, batch) for s in state)
    if isinstance(state, torch.Tensor) and state.dim() >= 2 and state.shape[1] == batch:
        return state.index_select(1, index)
    why = f"is a {type(state).__name__}, not tensors"
    if isinstance(state, torch.Tensor):
        why = f"has shape {tuple(state.shape)}, not the batch ({batch}) on dimension 1 as nn.LSTM's"
    raise PrefixTreeError(
        f"the encoder's state {why}; the prefix-tree scorer cannot split it (use share_prefixes=False, "
        "--no-share-prefixes on the command line)"
    )


def target_logprobs(decoder: Decoder, output: torch.Tensor, parent: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """``log p(token[j] | prefix of parent[j])`` from the fed nodes' outputs ``output`` (M, H), decoded
    ``decoder.rows`` nodes at a time as ``logit[token] - logsumexp(logits)`` in float32."""
    rows = decoder.rows
    lse = torch.empty(output.shape[0], device=output.device)
    picked = torch.empty(parent.numel(), device=output.device)
    order = torch.argsort(parent, stable=True)  # targets grouped by parent: each slice of nodes finds its own
    bounds = torch.searchsorted(parent[order], torch.arange(0, output.shape[0] + rows, rows, device=parent.device))
    for k, start in enumerate(range(0, output.shape[0], rows)):
        logits = decoder(output[start : start + rows])
        sel = order[int(bounds[k]) : int(bounds[k + 1])]
        picked[sel] = logits[parent[sel] - start, token[sel]]  # read before the block is overwritten below
        lse[start : start + rows] = _logsumexp_(logits)
    return picked - lse[parent]


#: The oneDNN decoder's blocks have a multiple of this many rows (see :meth:`Decoder._onednn`).
ROW_STEP = 32


class Decoder:
    """The model's output layer applied to blocks of at most ``rows`` prefixes, as float32 logits: oneDNN's
    linear on a weight packed once for a float32 ``nn.Linear`` on the CPU, else ``addmm`` into one reused
    buffer; any other decoder through ``model.logits`` (docs/syneval.md, "Speed")."""

    def __init__(self, model, rows: int | None = None):
        self.model, self.rows = model, rows or decoder_rows(model)
        dec = getattr(model, "decoder", None)
        self.linear = dec if isinstance(dec, torch.nn.Linear) and dec.weight.dtype == torch.float32 else None
        self.packed = None
        if self.linear is not None and self.linear.weight.device.type == "cpu" and _onednn_linear():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(self.linear.weight.detach(), self.rows)
        self.buf: torch.Tensor | None = None
        self.rows_in: torch.Tensor | None = None

    def _onednn(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        # a short block padded to a multiple of ROW_STEP rows: oneDNN caches a primitive per row count (issue #25)
        n = x.shape[0]
        m = min(self.rows, -(-n // ROW_STEP) * ROW_STEP)
        if m != n:
            if self.rows_in is None or self.rows_in.shape[1] != x.shape[1]:
                self.rows_in = x.new_zeros(self.rows, x.shape[1])
            self.rows_in[:n] = x
            x = self.rows_in[:m]
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, bias, "none", [], "")[:n]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.linear is None or x.dtype != torch.float32:
            return self.model.logits(x).float()
        bias = None if self.linear.bias is None else self.linear.bias.detach()
        if self.packed is not None:
            return self._onednn(x, bias)
        if self.buf is None:
            self.buf = torch.empty(self.rows, self.linear.out_features, device=x.device)
        out = self.buf[: x.shape[0]]
        weight = self.linear.weight.detach()
        return torch.mm(x, weight.t(), out=out) if bias is None else torch.addmm(bias, x, weight.t(), out=out)


def _onednn_linear() -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


def _logsumexp_(logits: torch.Tensor) -> torch.Tensor:
    """Row-wise logsumexp of ``logits`` (r, V), computed in place (destroying it) with the row maximum ``m``."""
    m = logits.amax(dim=1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a row of -inf: log(0) = -inf, as logsumexp
    return logits.sub_(m).exp_().sum(dim=1).log_().add_(m.squeeze(1))


def decoder_rows(model) -> int:
    """Prefixes decoded at a time: a float32 ``(rows, V)`` buffer of about 16 MiB, 16 to 1,024 rows."""
    dec, config = getattr(model, "decoder", None), getattr(model, "config", None)
    vocab = dec.out_features if isinstance(dec, torch.nn.Linear) else getattr(config, "vocab_size", 0)
    return max(16, min(1024, (1 << 22) // vocab)) if vocab else 256


@torch.no_grad()
def tree_logprobs(model, tree: PrefixTree, device, decoder: Decoder) -> torch.Tensor:
    """Every target of ``tree`` (concatenated over depths, as ``tree.paths`` index them), float32; ``decoder``:
    one made for ``model``, reused across trees (it holds the packed weight)."""
    state, out, prev = None, [], 0
    for d, (tokens, parents) in enumerate(zip(tree.tokens, tree.parents)):
        if d > 0 and state is not None:  # None: a model that carries no state (e.g. a bigram table)
            state = [select_state(s, parents.to(device), prev) for s in state]
        output, state, _ = model(tokens.to(device).unsqueeze(0), state)  # (1, M, H)
        prev = tokens.numel()
        out.append(
            target_logprobs(decoder, output[0], tree.target_parent[d].to(device), tree.target_token[d].to(device))
        )
    return torch.cat(out)


@torch.no_grad()
def prefix_token_logprobs(
    model, sequences: Sequence[Sequence[int]], chunk_size: int = 4096, progress: Callable[[int], None] | None = None
) -> list[torch.Tensor]:
    """The same result as :func:`padded_token_logprobs` (per sequence, the float64 log-probabilities of ``s[1:]``
    from a zero state), computed through prefix trees of ``chunk_size`` sequences; sequences are sorted so that
    those sharing a prefix fall in the same chunk. A model that carries no state from one call to the next
    (``model.stateful`` False: the Transformer) has no prefix state to continue from: it is scored padded."""
    if chunk_size <= 0:
        raise PrefixTreeError(f"chunk size must be positive, got {chunk_size}")
    if not getattr(model, "stateful", True):
        return padded_token_logprobs(model, sequences, chunk_size, progress)
    device = next(model.parameters()).device
    decoder = Decoder(model)

    def score(chunk: list[int]) -> list[torch.Tensor]:
        tree = build_tree([sequences[i] for i in chunk])
        flat = tree_logprobs(model, tree, device, decoder).double().cpu()
        return [flat[path] for path in tree.paths]

    return scored_in_chunks(model, sequences, chunk_size, lambda i: list(sequences[i]), score, progress)


@torch.no_grad()
def padded_token_logprobs(
    model, sequences: Sequence[Sequence[int]], batch_size: int = 512, progress: Callable[[int], None] | None = None
) -> list[torch.Tensor]:
    """For each id sequence ``s`` (starting with ``<eos>``), the float64 log-probabilities of ``s[1:]`` from a zero
    state, read ``batch_size`` at a time sorted by length and right-padded; ``progress(n)`` after each batch."""
    if batch_size <= 0:
        raise PrefixTreeError(f"batch size must be positive, got {batch_size}")
    device = next(model.parameters()).device

    def score(chunk: list[int]) -> list[torch.Tensor]:
        lengths = [len(sequences[i]) for i in chunk]
        batch = torch.full((max(lengths), len(chunk)), int(sequences[chunk[0]][0]), dtype=torch.long)  # (T, B)
        for j, i in enumerate(chunk):
            batch[: lengths[j], j] = torch.as_tensor(sequences[i], dtype=torch.long)
        lp = _next_token_logprobs(model, batch.to(device)).double().cpu()  # (T-1, B)
        return [lp[: n - 1, j].clone() for j, n in enumerate(lengths)]

    return scored_in_chunks(model, sequences, batch_size, lambda i: len(sequences[i]), score, progress)


def _next_token_logprobs(model, batch: torch.Tensor) -> torch.Tensor:
    """(T, B) ids -> (T-1, B): log p(batch[t+1] | batch[:t+1]); the decoder runs a step at a time (memory holds
    (B, V) logits, not (T, B, V))."""
    output, _, _ = model(batch[:-1])  # (T-1, B, H)
    out = torch.empty(output.shape[:2], device=output.device)  # (T-1, B)
    for t in range(output.shape[0]):
        logits = model.logits(output[t]).float()  # (B, V)
        out[t] = logits.gather(1, batch[t + 1].unsqueeze(1)).squeeze(1) - torch.logsumexp(logits, dim=1)
    return out


def scored_in_chunks(
    model, sequences: Sequence, size: int, key: Callable, score: Callable, progress: Callable[[int], None] | None
) -> list[torch.Tensor]:
    """Both scorers' loop: indices sorted by ``key``, ``score(indices)`` (a tensor each) on ``size`` at a time in
    eval mode (the caller's mode given back), then ``progress(n)``; returns the tensors in the sequences' own order."""
    order = sorted(range(len(sequences)), key=key)
    out: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
    with evaluating(model):
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            for i, logprobs in zip(chunk, score(chunk)):
                out[i] = logprobs
            if progress:
                progress(len(chunk))
    return out
