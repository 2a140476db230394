"""From a trained ON-LSTM language model to trees: batched per-word distances
(:func:`sentence_distances`) and the trees they induce, under the protocol of docs/design.md §2.2
(batched by length; a test checks batched == one by one)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import torch

from ..checkpoint import CheckpointError
from ..data.treebank import normalise_word
from ..data.vocab import EOS, Vocab
from ..models.language_model import LanguageModel, load_language_model_run
from ..runs import LoadedRun
from .trees import Tree, build_tree


def load_language_model(checkpoint: str | Path, tag: str = "best", device: str = "cpu") -> LoadedRun:
    """A language model run directory (or its ``.safetensors`` file) -> model in eval mode + vocabulary,
    refused when the model has no master gates to induce trees from."""
    run = load_language_model_run(
        checkpoint,
        tag,
        device,
        hint="parsing needs a language model: train one with `onlstm lm train` or `onlstm demo`",
    )
    if not run.model.has_distances:
        raise CheckpointError(
            f"{run.run_dir}: a {run.model.config.cell!r} model has no master gates, so it induces "
            "no trees; use an ON-LSTM model (or the baselines of eval-parse)"
        )
    return run


def text_normalisation(lm: LoadedRun) -> str:
    """How the training text was normalised: ``'ptb'`` (lower case, digits -> N, PTB tokens) or ``'lower'``."""
    return lm.config.get("text_normalisation", "ptb")


_PUNCT = re.compile(r"^[^\w]+$")


def normalise_words(words: Sequence[str], scheme: str) -> tuple[list[str], list[str]]:
    """Words as the model's training text had them, ``(kept, dropped)``: for ``'ptb'`` lower case, digit
    runs -> ``N``, punctuation-only tokens dropped (Mikolov's PTB text has none); else lower case only."""
    if scheme != "ptb":
        return [w.lower() for w in words], []
    return [normalise_word(w) for w in words if not _PUNCT.match(w)], [w for w in words if _PUNCT.match(w)]


def tokenize(line: str, scheme: str) -> list[str]:
    """Split raw text into tokens: Penn Treebank tokenisation for ``'ptb'``, white space otherwise."""
    if scheme == "ptb":
        from nltk.tokenize import TreebankWordTokenizer

        return TreebankWordTokenizer().tokenize(line)
    return line.split()


@torch.no_grad()
def sentence_distances(
    model: LanguageModel, vocab: Vocab, sentences: Sequence[Sequence[str]], batch_size: int = 128
) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
    """Master-forget and master-input distances of every word: ``(forget, input, n_unknown)``, for
    sentence ``k`` tensors of shape ``(layers, n_words)``, and how many words became ``<unk>``."""
    if EOS not in vocab:
        raise ValueError(f"the vocabulary has no {EOS} token, which the parsing protocol reads around each sentence")
    model.eval()
    eos = vocab.index[EOS]
    device = model.embedding.weight.device
    if any(len(s) == 0 for s in sentences):
        raise ValueError("cannot parse an empty sentence")
    pairs = [vocab.encode(s) for s in sentences]
    encoded, unknown = [ids for ids, _ in pairs], sum(n for _, n in pairs)
    order = sorted(range(len(encoded)), key=lambda k: -len(encoded[k]))
    forget: list = [None] * len(encoded)
    inputs: list = [None] * len(encoded)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        T = len(encoded[idx[0]]) + 2
        tokens = torch.full((T, len(idx)), eos, dtype=torch.long)
        for b, k in enumerate(idx):
            tokens[1 : len(encoded[k]) + 1, b] = torch.tensor(encoded[k])
        _, _, extras = model(tokens.to(device), return_distances=True)
        df, di = (torch.stack([getattr(d, g) for d in extras["distances"]]).cpu() for g in ("forget", "input"))
        for b, k in enumerate(idx):  # df, di: (layers, T, B)
            n = len(encoded[k])
            forget[k], inputs[k] = df[:, 1 : n + 1, b].clone(), di[:, 1 : n + 1, b].clone()
    return forget, inputs, unknown


def trees_from_distances(
    sentences: Sequence[Sequence[str]], distances: Sequence[torch.Tensor], layer: int
) -> list[Tree]:
    """Trees from the ``layer``-th (0-based) row of each sentence's distances."""
    return [build_tree(list(s), d[layer].tolist()) for s, d in zip(sentences, distances)]


def check_layer(layer: int, n_layers: int) -> int:
    """A 1-based layer number from the command line -> 0-based index, with a clear error."""
    if not 1 <= layer <= n_layers:
        raise ValueError(f"--layer must be between 1 and {n_layers} (the model has {n_layers} layers), got {layer}")
    return layer - 1
