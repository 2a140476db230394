"""The paper's AWD-LSTM-style language model (:class:`LanguageModel`, :class:`LMConfig`) over any causal encoder
of :mod:`onlstm.encoders`; :func:`load_language_model_run` (docs/lm.md, "The recipe")."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .. import encoders
from ..config import Config, ConfigError, option
from ..data.reader import TextConventionNote, TextReader, reader_of
from ..data.vocab import EOS, Vocab
from ..device import evaluating
from ..encoders import make_encoder
from ..errors import InputError
from ..nn import ONLSTM, kernels
from ..nn.functional import MASTER_INPUT_MODES


@dataclass
class LMConfig(Config):
    """Architecture of :class:`LanguageModel` (saved as JSON next to every checkpoint). ``chunk_size``,
    ``master_input`` and ``dropconnect`` are encoder options: each layer receives those its encoder declares in
    :mod:`onlstm.encoders` (so one preset serves ON-LSTM and LSTM alike)."""

    section = "model"
    config_kind = "language-model config"

    vocab_size: int = option(help="vocabulary size", fixed="is taken from the training text", ge=1)
    emb_size: int = option(400, "embedding width (= last layer's width when tied)", ge=1)
    hidden_sizes: list[int] = option([1150, 1150, 400], "width of every recurrent layer, e.g. 1150 1150 400", ge=1)
    cell: str = option("onlstm", lambda: encoders.cell_help("recurrent layer"))
    chunk_size: int = option(
        10, encoders.option_help("chunk_size", "ON-LSTM chunk size (units per master-gate level)"), ge=1
    )
    master_input: str = option(
        "paper",
        encoders.option_help(
            "master_input",
            "ON-LSTM master input gate: paper (as published; its top chunk is never written) or "
            "reverse (no dead chunk)",
        ),
        choices=MASTER_INPUT_MODES,
    )
    dropout_emb: float = option(0.1, "embedding row dropout (AWD dropoute)", ge=0, lt=1)
    dropout_in: float = option(0.5, "locked dropout on the embedding output (dropouti)", ge=0, lt=1)
    dropout_hidden: float = option(0.3, "locked dropout between layers (dropouth)", ge=0, lt=1)
    dropout_out: float = option(0.45, "locked dropout on the last layer's output (dropout)", ge=0, lt=1)
    dropconnect: float = option(
        0.45, encoders.option_help("dropconnect", "DropConnect on hidden-to-hidden weights (wdrop)"), ge=0, lt=1
    )
    tie_weights: bool = option(True, "tie the decoder to the embedding")
    encoder_options: dict[str, Any] = option({}, encoders.ENCODER_OPTIONS_HELP, omit_default=True)

    def validate(self) -> None:
        check_architecture(vars(self))

    def layer_options(self, cell: str | None = None) -> dict:
        """The fields encoder ``cell`` (default: its own) declares, and ``encoder_options``."""
        return encoders.options_for(cell or self.cell, self, self.encoder_options)


def check_architecture(model: Mapping[str, Any]) -> None:
    """The checks across an :class:`LMConfig`'s checked fields ``model`` (a causal encoder taking its options and
    widths, tied widths); vocab_size plays no part, so they run before the text gives it (``lm.config.RunConfig``)."""
    cell, sizes = model["cell"], model["hidden_sizes"]
    spec = encoders.check_cell(cell, "cell")
    if not spec.causal:
        causal = ", ".join(n for n in encoders.names() if encoders.get(n).causal)
        raise ConfigError(
            f"encoder {cell!r} is not causal per step (its output at a step depends on later "
            f"tokens), so it cannot be a language model; choose a causal one: {causal}"
        )
    if not sizes:
        raise ConfigError("model.hidden_sizes must name at least one layer's width")
    if model["tie_weights"] and sizes[-1] != model["emb_size"]:
        raise ConfigError(
            f"tie_weights needs the last layer's width ({sizes[-1]}) to equal "
            f"emb_size ({model['emb_size']}); change one of them or set tie_weights: false"
        )
    spec.validate(sizes, encoders.options_for(cell, model, model["encoder_options"]))


def locked_dropout(x: torch.Tensor, p: float, training: bool, shard: tuple[int, int] | None = None) -> torch.Tensor:
    """Dropout with one mask per sequence, shared over time (``x`` is (T, B, F)). ``shard = (start, total)``: ``x``
    holds columns ``start:start+B`` of a batch of ``total``; the mask is drawn for all ``total`` columns and sliced,
    so that processes which each own a share of the batch (and share the random state) drop what one process would.
    """
    if not training or p == 0.0:
        return x
    start, total = shard or (0, x.shape[1])
    if not 0 <= start <= total - x.shape[1]:
        raise ValueError(f"shard {shard} does not hold the {x.shape[1]} columns of the input")
    mask = x.new_empty(1, total, x.shape[2]).bernoulli_(1 - p)[:, start : start + x.shape[1]]
    return x * (mask / (1 - p))


def embedding_dropout(weight: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Drop whole rows of the embedding matrix (every occurrence of a word), rescaling the rest."""
    if not training or p == 0.0:
        return weight
    return weight * (weight.new_empty(weight.shape[0], 1).bernoulli_(1 - p) / (1 - p))


class LanguageModel(nn.Module):
    def __init__(self, config: LMConfig):
        super().__init__()
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.emb_size)
        sizes = [c.emb_size] + c.hidden_sizes
        self.layers = nn.ModuleList(make_encoder(c.cell, a, b, **c.layer_options()) for a, b in zip(sizes, sizes[1:]))
        self.decoder = nn.Linear(c.hidden_sizes[-1], c.vocab_size)
        # as the reference: a small uniform embedding (an N(0, 1) one makes CPU steps slow: docs/design.md §3.3)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if c.tie_weights:
            self.decoder.weight = self.embedding.weight

    @property
    def has_distances(self) -> bool:
        return encoders.has_distances(self.config.cell)

    @property
    def stateful(self) -> bool:  # whether the layers carry state from one call (BPTT segment) to the next
        return encoders.get(self.config.cell).stateful

    @property
    def max_length(self) -> int | None:
        """The longest segment the layers accept (a layer with a limit exposes ``max_length``), or None."""
        limits = [n for layer in self.layers if (n := getattr(layer, "max_length", None)) is not None]
        return min(limits) if limits else None

    def forward(
        self, tokens: torch.Tensor, state=None, return_distances: bool = False, *, shard: tuple[int, int] | None = None
    ):
        """``tokens`` (T, B) -> ``output`` (T, B, last width), the new ``state`` (one per layer; None when the
        encoder has ``stateful=False``, e.g. the Transformer: every call starts afresh) and a dict: ``raw`` (last
        layer's output before dropout, for TAR), ``dropped`` (after, for AR) and, when asked, ``distances`` (per
        layer, :class:`onlstm.Distances` of (T, B) tensors). ``shard``: as :func:`locked_dropout`'s."""
        c = self.config
        if not self.stateful and state is not None:
            raise ValueError(f"a {c.cell!r} language model carries no state across calls; pass state=None")
        w = embedding_dropout(self.embedding.weight, c.dropout_emb, self.training)
        x = locked_dropout(F.embedding(tokens, w), c.dropout_in, self.training, shard)
        state, new_state, dists = state or [None] * len(self.layers), [], []
        for i, layer in enumerate(self.layers):
            raw, s, d = layer(x, state[i], return_distances=return_distances and self.has_distances)
            new_state.append(s)
            if d is not None:
                dists.append(type(d)(d.forget[..., 0], d.input[..., 0]))
            p = c.dropout_out if i == len(self.layers) - 1 else c.dropout_hidden
            x = locked_dropout(raw, p, self.training, shard)
        extras = {"raw": raw, "dropped": x, **({"distances": dists} if return_distances else {})}
        return x, (new_state if self.stateful else None), extras

    def logits(self, output: torch.Tensor) -> torch.Tensor:
        return self.decoder(output)

    # ------------------------------------------------------------------ the Python API (docs/sharing.md)

    def parse(self, sentences, layer: int | None = None, batch_size: int = 128) -> list[ParsedSentence]:
        """Trees induced from the master-forget distances (ON-LSTM models), as ``onlstm parsing parse`` induces them:
        one :class:`ParsedSentence` per sentence (``.tree``, ``.brackets``, ``.nltk()``, ``.drawing()``,
        ``.distances``).
        ``sentences``: as :meth:`words` reads them; ``layer`` (1-based): by default the run's ``parse_layer`` (the
        demo's choice) or the paper's layer 2."""
        from ..data.trees import build_tree

        if not self.has_distances:
            raise InputError(f"a {self.config.cell!r} model has no master gates, so it induces no trees")
        check_batch_size(batch_size)
        words = self.words(sentences)
        index = default_parse_layer(getattr(self, "run_config", {}), len(self.layers), layer)
        forget, _, _ = sentence_distances(self, self._vocab(), words, batch_size)
        return [ParsedSentence(w, build_tree(w, d[index].tolist()), d, index + 1) for w, d in zip(words, forget)]

    def score(self, sentences, batch_size: int = 64) -> list[float]:
        """The log-probability (natural log) of each sentence: of its words and the end of sentence after them,
        read from a fresh state after an end-of-sentence token (as parsing reads sentences). ``sentences``: as
        :meth:`words` reads them; unknown words count as ``<unk>``."""
        from .prefix_tree import padded_token_logprobs

        check_batch_size(batch_size)
        vocab, words = self._vocab(), self.words(sentences)
        ids = [vocab.encode([EOS, *w, EOS])[0] for w in words]
        return [float(lp.sum()) for lp in padded_token_logprobs(self, ids, batch_size)]

    def perplexity(self, sentences, batch_size: int = 64) -> float:
        """exp of the mean negative log-probability per token (each sentence's words and its end) of
        :meth:`score`: every sentence read on its own, unlike ``onlstm lm eval``, which reads a corpus as one
        stream (the paper's protocol)."""
        words = self.words(sentences)
        if not words:
            raise InputError("sentences is empty: perplexity needs at least one sentence")
        total = sum(self.score(words, batch_size))
        return math.exp(-total / sum(len(w) + 1 for w in words))

    @property
    def reader(self) -> TextReader:
        """How this model reads English (:class:`~onlstm.data.reader.TextReader`): the one its run saved, else,
        for a model that does not say, Mikolov's PTB convention (with a :class:`TextConventionNote`, once)."""
        reader = getattr(self, "_reader", None)
        if reader is None:
            reader, note = reader_of(getattr(self, "run_config", {}))
            if note is not None:
                warnings.warn(TextConventionNote(note), stacklevel=2)
            self._reader = reader
        return reader

    @reader.setter
    def reader(self, reader: TextReader) -> None:
        if not isinstance(reader, TextReader):
            raise InputError(f"reader must be an onlstm.data.reader.TextReader, got {type(reader).__name__}")
        self._reader = reader

    def words(self, sentences, allow_empty: bool = False) -> list[list[str]]:
        """``sentences`` as the model reads them (:attr:`reader`): a string is one sentence of raw English
        (split, lower-cased, numbers as ``N`` and punctuation dropped for a PTB model); a list holds sentences,
        each a string or a list of words (each word normalised, none split). A sentence left with no word
        raises ``ValueError`` unless ``allow_empty``."""
        items = self._sentences(sentences)
        vocab = getattr(self, "vocab", None) or ()
        out = [self.reader.read(s, vocab)[0] for s in items]
        empty = [k for k, w in enumerate(out) if not w]
        if empty and not allow_empty:
            raise InputError(f"sentence {empty[0]} has no word to read (after normalisation): {items[empty[0]]!r}")
        return out

    @staticmethod
    def _sentences(sentences) -> list:
        if isinstance(sentences, str):
            return [sentences]
        if isinstance(sentences, (bytes, dict)) or not isinstance(sentences, Iterable):
            raise InputError(f"sentences must be a string or a list of sentences, got {type(sentences).__name__}")
        items = list(sentences)
        bad = [s for s in items if isinstance(s, bytes) or not isinstance(s, (str, Sequence))]
        if bad:
            raise InputError(f"each sentence must be a string or a list of words, got {type(bad[0]).__name__}")
        for k, s in enumerate(items):  # a list's words are read as they are: an empty one would become <unk>
            if not isinstance(s, str) and not all(isinstance(w, str) and w.strip() for w in s):
                word = next(w for w in s if not (isinstance(w, str) and w.strip()))
                raise InputError(f"sentence {k}: each word of a list must be a non-empty string, got {word!r}")
        return items

    def _vocab(self) -> Vocab:
        """The vocabulary the scorers and the parser read with: they frame every sentence with ``<eos>``."""
        vocab = getattr(self, "vocab", None)
        if vocab is None:
            raise InputError("the model has no vocabulary: load it with from_pretrained, or set model.vocab")
        if not isinstance(vocab, Vocab):  # a list of words, as save_pretrained takes
            if isinstance(vocab, (str, bytes)) or not isinstance(vocab, Sequence):
                raise InputError(f"model.vocab must be a Vocab or a list of words, got {type(vocab).__name__}")
            vocab = Vocab(check_words(list(vocab)))
        if len(vocab) != self.config.vocab_size:
            raise InputError(
                f"model.vocab has {len(vocab)} words but the model expects {self.config.vocab_size} (its "
                "vocab_size); set the vocabulary it was trained with"
            )
        if EOS not in vocab:
            raise InputError(
                f"the model's vocabulary has no {EOS}, which scoring and parsing read around every sentence (its "
                f"end would be read as <unk>); use a model whose vocabulary holds {EOS}"
            )
        return vocab

    def surprisals(
        self, sentences, batch_size: int = 2048, progress=None, *, pretokenized: bool = False
    ) -> list[torch.Tensor]:
        """Per-token surprisal in bits (``-log2 p``) of each sentence, read as ``<eos> w1 ... wn <eos>`` from a zero
        state in eval mode: a float64 tensor of ``n + 1`` values (``.numpy()`` for NumPy), the words then the end
        of the sentence. ``sentences``: as :meth:`words` reads them (a string is one sentence; a sentence may be
        empty); ``pretokenized``: every sentence already in the model's convention, split on spaces only. The
        words read are ``model.words(sentences, allow_empty=True)``; those outside ``self.vocab`` are read as
        ``<unk>``. Scored through prefix trees of ``batch_size`` sentences (docs/lm.md, "Surprisal");
        ``progress(n)`` after each batch."""
        from .prefix_tree import prefix_token_logprobs

        check_batch_size(batch_size)
        vocab = self._vocab()
        if pretokenized:
            words = [s.split() if isinstance(s, str) else list(s) for s in self._sentences(sentences)]
        else:
            words = self.words(sentences, allow_empty=True)
        ids = [vocab.encode([EOS, *w, EOS])[0] for w in words]
        logprobs = prefix_token_logprobs(self, ids, batch_size, progress)
        return [-lp / math.log(2) for lp in logprobs]

    def save_pretrained(
        self,
        directory,
        vocab=None,
        *,
        run_config: dict | None = None,
        command: str | None = None,
        results: dict | None = None,
        overwrite: bool = False,
    ):
        """Save this model and its vocabulary (a :class:`~onlstm.data.vocab.Vocab` or a list of words; by default
        ``model.vocab``, which :meth:`from_pretrained` sets) in Hugging Face's layout (docs/sharing.md).
        ``run_config`` (a dict; by default ``model.run_config``, which :meth:`from_pretrained` sets): the training
        run's header (its settings travel with the model: text normalisation, training recipe, ...); ``command`` (a string) and ``results`` (a dict) go into the model card. ``directory``: new,
        empty or an earlier export (replaced as a whole); anything else only with ``overwrite=True``."""
        from ..sharing import save_pretrained

        config, card, words = self._shared_files(vocab, run_config, command, results)
        return save_pretrained(directory, self, config, card, words, overwrite=overwrite)

    def _shared_files(self, vocab, run_config: dict | None, command: str | None, results: dict | None):
        """:meth:`save_pretrained`'s header, card and words (the import of the authors' models adds to the card)."""
        from ..checkpoint import config_header
        from ..sharing import model_card

        vocab = getattr(self, "vocab", None) if vocab is None else vocab
        if vocab is None:
            raise InputError("no vocabulary: pass the model's vocabulary (a Vocab or a list of words)")
        words = check_words(list(getattr(vocab, "words", vocab)))
        if len(words) != self.config.vocab_size:
            raise InputError(f"the vocabulary has {len(words)} words but the model expects {self.config.vocab_size}")
        from ..sharing import check_run_config

        run_config = check_run_config(getattr(self, "run_config", None) if run_config is None else run_config)
        config, c = {**run_config, **config_header(KIND, self.config.to_dict())}, self.config
        title = f"{c.cell} language model ({len(c.hidden_sizes)} layers, {c.vocab_size:,} words)"
        usage = LM_USAGE + (LM_PARSE_USAGE if self.has_distances else "")
        return config, model_card(title, config, usage, command, results, results_headline(results)), words

    @classmethod
    def from_pretrained(
        cls, name_or_path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
    ) -> LanguageModel:
        """A model saved by :meth:`save_pretrained` (a local directory, or a Hugging Face Hub id when
        ``huggingface_hub`` is installed) or a training run directory, in eval mode on ``device``, in ``dtype``
        (by default the one it was saved in). Its vocabulary is ``model.vocab``, the saved header
        ``model.run_config``."""
        from ..device import as_device
        from ..sharing import pretrained_path

        path = pretrained_path(name_or_path)
        return load_language_model_run(path, device=as_device(device), dtype=dtype).model


LM_USAGE = """
```python
from onlstm.models import LanguageModel

model = LanguageModel.from_pretrained("THIS_DIRECTORY")   # model.vocab: its words
```

Score sentences with it, read as its training text was written: `onlstm lm surprisal --checkpoint THIS_DIRECTORY
sentences.txt` (a surprisal per word), `onlstm syneval --checkpoint THIS_DIRECTORY --suite SUITE.json` (SyntaxGym).
"""
LM_PARSE_USAGE = """
Parse sentences with it (trees from its master forget gates): `onlstm parsing parse --checkpoint THIS_DIRECTORY
sentences.txt`.
"""


def stream_words(batch_size: int) -> str:
    """How an evaluation of ``batch_size`` columns reads its text (lm/evaluate.py's protocols), in words."""
    return "one stream, batch 1" if batch_size == 1 else f"{batch_size} columns, each from a zero state"


def results_headline(results: dict | None) -> str:
    """A language-model run's perplexities in ``results.json``, with their protocols, in words for its card ("" where
    it holds none, as for weights other than the ones it measured)."""
    said = []
    for split, name in (("valid", "Validation"), ("test", "Test")):
        r = results.get(split) if isinstance(results, dict) else None
        if not isinstance(r, dict) or not isinstance(r.get("ppl"), (int, float)):
            continue
        rows, bptt = r.get("batch_size"), r.get("bptt")
        how = ""
        if isinstance(rows, int) and isinstance(bptt, int):  # a results.json of this version says how it read
            how = f" (protocol {r.get('protocol', '?')}: {stream_words(rows)}, segments of {bptt})"
        said.append(f"{name} perplexity **{r['ppl']:.2f}**{how}.")
    return " ".join(said)


KIND = "lm"  # the kind of a language-model run (`onlstm lm train`, `onlstm demo`; registered by onlstm.lm)


@dataclass
class ParsedSentence:
    """One sentence parsed by :meth:`LanguageModel.parse`: its ``words`` as the model read them, the ``tree``
    (nested tuples of words), every layer's master-forget ``distances`` (a (layers, words) tensor) and the
    ``layer`` (1-based) whose row built the tree."""

    words: list[str]
    tree: Any
    distances: torch.Tensor
    layer: int

    @property
    def brackets(self) -> str:
        """The tree as one bracket string: ``((the cat) (sat down))``."""
        from ..data.trees import to_brackets

        return to_brackets(self.tree)

    def nltk(self):
        """The tree as an ``nltk.Tree`` (blank labels)."""
        from ..data.trees import to_nltk

        return to_nltk(self.tree)

    def drawing(self) -> str:
        """The tree drawn in text, as ``onlstm parsing parse --format pretty`` draws it."""
        from ..data.trees import draw_tree

        return draw_tree(self.tree)


def check_words(words: list) -> list[str]:
    """A vocabulary to save: distinct non-empty strings (what :meth:`LanguageModel.from_pretrained` reads back)."""
    bad = [w for w in words if not isinstance(w, str) or not w]
    if bad:
        raise InputError(f"the vocabulary's words must be non-empty strings, got {bad[0]!r}")
    try:
        Vocab(words)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return words


def default_parse_layer(run_config: dict, n_layers: int, given: int | None = None) -> int:
    """The 0-based layer to build trees from: ``given`` (1-based; checked), else the run's ``parse_layer`` (saved
    by ``onlstm demo``: the layer it chose on dev), else the paper's layer 2 (the last of a one-layer model)."""
    if given is not None:
        return check_layer(given, n_layers)
    saved = run_config.get("parse_layer")
    if saved is None:
        return min(n_layers, 2) - 1
    if isinstance(saved, int) and not isinstance(saved, bool) and 1 <= saved <= n_layers:
        return saved - 1
    raise InputError(  # an edited or damaged header: the paper's layer instead would be a silent other result
        f"the model's config.json has parse_layer={saved!r}, not one of its {n_layers} layers; choose the layer "
        "(layer=, --layer) or mend the file"
    )


def check_layer(layer: int, n_layers: int) -> int:
    """A 1-based layer number -> 0-based index; :class:`~onlstm.errors.InputError` naming the argument ``layer``
    (a command prefixes its flag's dashes)."""
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise InputError(f"layer must be a whole number (1 to {n_layers}), got {layer!r}")
    if not 1 <= layer <= n_layers:
        raise InputError(f"layer must be between 1 and {n_layers} (the model has {n_layers} layers), got {layer}")
    return layer - 1


def check_batch_size(batch_size: int) -> None:
    """``batch_size`` of the Python API: a whole number of at least 1 (-1 or 0 would score nothing)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")


@torch.no_grad()
def sentence_distances(
    model: LanguageModel, vocab: Vocab, sentences: Sequence[Sequence[str]], batch_size: int = 128
) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
    """Master-forget and master-input distances of every word: ``(forget, input, n_unknown)``, for
    sentence ``k`` tensors of shape ``(layers, n_words)``, and how many words became ``<unk>``."""
    if EOS not in vocab:
        raise ValueError(f"the vocabulary has no {EOS} token, which the parsing protocol reads around each sentence")
    eos = vocab.index[EOS]
    device = model.embedding.weight.device
    if any(len(s) == 0 for s in sentences):
        raise ValueError("cannot parse an empty sentence")
    pairs = [vocab.encode(s) for s in sentences]
    encoded, unknown = [ids for ids, _ in pairs], sum(n for _, n in pairs)
    order = sorted(range(len(encoded)), key=lambda k: -len(encoded[k]))
    forget: list = [None] * len(encoded)
    inputs: list = [None] * len(encoded)
    with evaluating(model):
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


def load_language_model_run(
    checkpoint,
    tag: str = "best",
    device="cpu",
    hint: str = "train one with `onlstm lm train` or `onlstm demo`",
    reads_sentences: bool = False,
    dtype: torch.dtype | None = None,
):
    """A language-model run directory (or a ``.safetensors`` file in one) as a
    :class:`~onlstm.saved.LoadedRun`: the model in eval mode on ``device``, its :class:`~onlstm.data.vocab.Vocab`
    and header. Every problem is a :class:`~onlstm.checkpoint.CheckpointError` naming the file.
    ``reads_sentences``: the caller frames sentences with ``<eos>`` (parsing, surprisal, syneval, perplexity), so a
    vocabulary without it is refused (every sentence end would be read as ``<unk>``, or fail)."""
    from ..checkpoint import CheckpointError
    from ..data.vocab import Vocab
    from ..saved import RunFiles, load_run

    def check(run) -> None:
        if len(run.vocab) != run.model.config.vocab_size:
            raise CheckpointError(
                f"{RunFiles(run.run_dir).vocab_path} has {len(run.vocab)} words but the model expects "
                f"{run.model.config.vocab_size}; the run directory is inconsistent"
            )
        if reads_sentences and EOS not in run.vocab:
            raise CheckpointError(
                f"{RunFiles(run.run_dir).vocab_path} has no {EOS}, which the model reads around every sentence "
                f"(its end would be read as <unk>); use a model whose vocabulary holds {EOS}"
            )

    build = lambda section: LanguageModel(LMConfig.from_dict(section))
    opts = {"vocab": Vocab.load, "check": check, "what": "a language model", "hint": hint}
    run = load_run(checkpoint, KIND, build, tag=tag, device=device, dtype=dtype, **opts)
    run.model.vocab, run.model.run_config = run.vocab, run.config  # what the Python API reads text with
    return run


def use_onlstm_impl(model: nn.Module, impl: str, device: torch.device) -> None:
    """Make every ON-LSTM layer of ``model`` run ``impl`` (a runtime choice, never saved with the weights); a
    kernel that cannot run on ``device`` is an error here, before the first step, not a silent fallback. The kernel
    is loaded now (a first use builds it), before a training's clock starts."""
    layers = [m for m in model.modules() if isinstance(m, ONLSTM)]
    chosen = impl
    if impl != "reference" and (layers or impl != "auto"):
        try:
            chosen = kernels.resolve_impl(impl, device, torch.float32)
        except RuntimeError as exc:
            raise ConfigError(f"train.onlstm_impl={impl}: {exc}; use auto or reference") from None
    if impl not in ("auto", chosen):
        why = f"that kernel does not run on {device.type} float32 tensors; use auto (the fastest one that does)"
        raise ConfigError(f"train.onlstm_impl={impl}: {why} or reference")
    for m in layers:
        m.impl = impl
