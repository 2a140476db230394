"""Importing a checkpoint of the authors' code (yikangshen/Ordered-Neurons): their ``main.py`` saves
``torch.save([model, criterion, optimizer])`` and caches its vocabulary as a pickled ``data.Corpus``. Both are
read as data (:mod:`onlstm.models.torchfile`), their records mapped onto a :class:`LanguageModel` with the same
next-word probabilities (:func:`convert`), and saved in the shared-model layout (:func:`import_official`;
docs/sharing.md, "Importing a checkpoint of the authors' code")."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..checkpoint import CheckpointError
from ..data.reader import TextReader
from ..errors import first_line, quote
from ..files import sha256_file
from .language_model import LanguageModel, LMConfig
from .torchfile import Record, memory_budget, read_torch_file

SOURCE_REPO = "https://github.com/yikangshen/Ordered-Neurons"
#: What a layer takes besides its weights (modules, the kernel's buffers), charged to the checkpoint's budget
#: (:func:`onlstm.models.torchfile.memory_budget`): a small file may not ask for thousands of layers sharing a tensor.
LAYER_OVERHEAD = 64 << 10


class OfficialImportError(CheckpointError):
    """A file that is a readable pickle but not a checkpoint (or corpus) of the authors' code as this importer
    knows it; the message names the file and what is missing."""


def _attr(rec, name: str, source: str):
    """``rec``'s attribute ``name``: a submodule, a parameter, a buffer or a plain attribute, as nn.Module
    keeps them in its pickled ``__dict__``."""
    if not isinstance(rec, Record):
        raise OfficialImportError(f"{source}: expected an object with attribute {name!r}, found {type(rec).__name__}")
    state = rec.state
    for table in ("_modules", "_parameters", "_buffers"):
        if isinstance(state.get(table), dict) and name in state[table]:
            return state[table][name]
    if name in state:
        return state[name]
    raise OfficialImportError(f"{source}: {rec.global_name} has no attribute {name!r}; is it the authors' code?")


def _path(rec, dotted: str, source: str):
    for name in dotted.split("."):
        rec = _attr(rec, name, source)
    return rec


def _tensor(value, what: str, source: str) -> torch.Tensor:
    # the file's own view, nothing copied: the model copies it in once its size is known to fit (convert)
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        raise OfficialImportError(f"{source}: {what} is not a floating-point tensor")
    return value.detach()


def _number(value, what: str, source: str, kind: type = float):
    """A setting of the file as ``kind`` (int or float): a finite number below 2**31 (an int for ints); anything
    else, a 400-digit integer or an infinite chunk size among them, is named, shortened."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or isinstance(value, int))
    if not (ok and abs(value) < 2**31):  # False for NaN and infinities too; no float() of a huge int
        raise OfficialImportError(
            f"{source}: not a model of the authors' code as this importer knows ({what} is {quote(value, 60)}, not a "
            f"{'whole ' if kind is int else ''}number in range)"
        )
    return kind(value)


def _cells(rnn: Record, source: str) -> list[Record]:
    cells = _attr(rnn, "cells", source)
    modules = cells.state.get("_modules") if isinstance(cells, Record) else None
    if not isinstance(modules, dict) or not modules:
        raise OfficialImportError(f"{source}: the model's rnn has no cells")
    return [modules[k] for k in sorted(modules, key=int)]


def _linear(rec: Record, source: str, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of an ``nn.Linear`` record, or of an ``nn.Sequential`` holding one (their ``ih``)."""
    if rec.class_name == "Sequential":
        rec = _attr(rec, "0", source)
    return _tensor(_attr(rec, "weight", source), f"{what}.weight", source), _tensor(
        _attr(rec, "bias", source), f"{what}.bias", source
    )


def _criterion_splits(criterion, source: str) -> None:
    """Refuse a split softmax: its probabilities are not one softmax of the decoder (docs/sharing.md)."""
    if not isinstance(criterion, Record):
        return
    nsplits = criterion.state.get("nsplits", 1)
    if nsplits != 1:
        splits = quote(criterion.state.get("splits"), 80)
        raise OfficialImportError(
            f"{source}: the model uses the authors' split softmax (splits {splits}, their setting for vocabularies "
            "over 75,000 words), which onlstm's language model does not have; only single-softmax models "
            "(vocabularies up to 75,000 words, e.g. PTB) can be imported"
        )


def unpack_checkpoint(obj, source: str) -> tuple[Record, Record | None]:
    """(model, criterion) of what ``main.py``'s ``model_save`` wrote (a bare model is accepted too)."""
    items = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    model = items[0] if items else None
    if isinstance(obj, dict) and all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise OfficialImportError(
            f"{source} holds a state_dict (weights by name) without the model's settings; give the file the authors' "
            "main.py saves with model_save ([model, criterion, optimizer])"
        )
    if not (isinstance(model, Record) and model.class_name == "RNNModel"):
        found = getattr(model, "global_name", type(model).__name__)
        raise OfficialImportError(
            f"{source}: expected [model.RNNModel, criterion, optimizer] as the authors' main.py saves, found {found}"
        )
    criterion = items[1] if len(items) > 1 else None
    return model, criterion


def convert(
    model: Record, criterion: Record | None, vocab_size: int, source: str, budget: int | None = None
) -> LanguageModel:
    """A :class:`LanguageModel` (eval mode) with the record's weights and the authors' eval-time behaviour: the
    ``paper`` master input gate and DropConnect's ``1 - p`` scaling of the hidden-to-hidden weights. The model is
    built only once its size fits ``budget`` bytes (the checkpoint's, :func:`~onlstm.models.torchfile.memory_budget`)
    and the shapes its settings imply are the file's tensors' (:func:`_check_shapes`)."""
    _criterion_splits(criterion, source)
    if (rnn_type := _attr(model, "rnn_type", source)) != "LSTM":
        raise OfficialImportError(f"{source}: rnn_type is {quote(rnn_type, 60)}, not 'LSTM'")
    cells = _cells(_attr(model, "rnn", source), source)
    tensors = {
        "embedding.weight": _tensor(_path(model, "encoder.weight", source), "encoder.weight", source),
        "decoder.weight": _tensor(_path(model, "decoder.weight", source), "decoder.weight", source),
        "decoder.bias": _tensor(_path(model, "decoder.bias", source), "decoder.bias", source),
    }
    for i, cell in enumerate(cells):
        for part in ("ih", "hh"):
            weight, bias = _linear(_attr(cell, part, source), source, f"cell {i} {part}")
            tensors[f"layers.{i}.rnn.weight_{part}_l0"], tensors[f"layers.{i}.rnn.bias_{part}_l0"] = weight, bias
    need = sum(t.numel() for t in tensors.values()) * 4 + len(cells) * LAYER_OVERHEAD  # as float32
    if budget is not None and need > budget:
        raise OfficialImportError(
            f"{source}: the model would take {need:,} bytes, more than the {budget:,} a file of this size may "
            "take; the file is corrupt or hostile"
        )
    config = _config(model, cells, tensors, vocab_size, source)
    _check_shapes(config, tensors, source)
    lm = LanguageModel(config)
    lm.load_state_dict(tensors, strict=True)
    return lm.eval()


def _config(model: Record, cells: list[Record], tensors: dict[str, torch.Tensor], vocab_size: int, source: str):
    emb, dec_w = tensors["embedding.weight"], tensors["decoder.weight"]
    if emb.dim() != 2 or emb.shape[0] != vocab_size or dec_w.shape[0] != vocab_size:
        raise OfficialImportError(
            f"{source} has {emb.shape[0]} words but the corpus has {vocab_size}; is it the corpus of this model?"
        )
    drops = {_number(_path(c, "hh.dropout", source), "DropConnect", source) for c in cells}
    chunks = {_number(_attr(c, "chunk_size", source), "chunk_size", source, int) for c in cells}
    if len(drops) != 1 or len(chunks) != 1:
        raise OfficialImportError(f"{source}: the layers differ in DropConnect {drops} or chunk size {chunks}")
    number = lambda name: _number(_attr(model, name, source), name, source)
    config = LMConfig(
        vocab_size=vocab_size,
        emb_size=emb.shape[1],
        hidden_sizes=[_number(_attr(c, "hidden_size", source), "hidden_size", source, int) for c in cells],
        cell="onlstm",
        chunk_size=chunks.pop(),
        master_input="paper",
        dropout_emb=number("dropoute"),
        dropout_in=number("dropouti"),
        dropout_hidden=number("dropouth"),
        dropout_out=number("dropout"),
        dropconnect=drops.pop(),
        tie_weights=_path(model, "decoder.weight", source) is _path(model, "encoder.weight", source),
    )
    config.validate()
    return config


def _check_shapes(config: LMConfig, tensors: dict[str, torch.Tensor], source: str) -> None:
    """The file's tensors against the shapes ``config`` implies, read from a model on the meta device (nothing
    allocated): a small file whose settings declare a large model is refused before that model exists."""
    with torch.device("meta"):
        expected = LanguageModel(config).state_dict()
    wrong = [f"{k} {tuple(v.shape)} (expected {tuple(expected[k].shape)})" for k, v in tensors.items()
             if k in expected and tuple(v.shape) != tuple(expected[k].shape)]  # fmt: skip
    wrong += [f"{k} missing" for k in expected if k not in tensors] + [
        f"{k} unexpected" for k in tensors if k not in expected
    ]
    if wrong:
        raise OfficialImportError(f"{source}: weights of unexpected shapes: {'; '.join(wrong[:3])}")


def read_corpus_words(path: str | Path) -> list[str]:
    """The vocabulary (``corpus.dictionary.idx2word``) of the authors' cached ``data.Corpus``."""
    corpus = read_torch_file(path, "the corpus.<hash>.data file the authors' code cached its vocabulary in")
    if not (isinstance(corpus, Record) and corpus.class_name == "Corpus"):
        found = getattr(corpus, "global_name", type(corpus).__name__)
        raise OfficialImportError(f"{path}: expected the authors' data.Corpus (corpus.<hash>.data), found {found}")
    words = _path(corpus, "dictionary.idx2word", str(path))
    if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
        raise OfficialImportError(f"{path}: dictionary.idx2word is not a list of words")
    return words


def load_official(checkpoint: str | Path, corpus: str | Path) -> tuple[LanguageModel, list[str]]:
    """The authors' checkpoint and corpus as a :class:`LanguageModel` (eval mode, ``model.vocab`` set) and its
    words."""
    from ..data.vocab import Vocab

    words = read_corpus_words(corpus)
    try:
        vocab = Vocab(words)
    except ValueError as exc:  # a word twice
        raise OfficialImportError(f"{corpus}: {exc}; the corpus file is corrupt") from None
    model, criterion = unpack_checkpoint(read_torch_file(checkpoint), str(checkpoint))
    budget = memory_budget(os.stat(checkpoint).st_size)
    try:
        lm = convert(model, criterion, len(words), str(checkpoint), budget)
    except OfficialImportError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError) as exc:  # an odd record
        raise OfficialImportError(
            f"{checkpoint}: not a model of the authors' code as this importer knows ({first_line(exc)})"
        ) from None
    lm.vocab = vocab
    return lm, words


def import_official(checkpoint: str | Path, corpus: str | Path, to: str | Path, overwrite: bool = False) -> Path:
    """Read the authors' files and write the shared-model folder ``to`` all at once
    (:func:`onlstm.sharing.save_pretrained`). ``to`` is checked before any work, as ``export`` checks it: new, empty
    or an earlier export unless ``overwrite``, and never a folder that holds more than an output or the files read."""
    from ..sharing import check_share_target, save_pretrained

    checkpoint, corpus, to = Path(checkpoint), Path(corpus), Path(to)
    check_share_target(to, overwrite, reads=(checkpoint, corpus))
    lm, words = load_official(checkpoint, corpus)
    source = {"repository": SOURCE_REPO, "checkpoint": checkpoint.name, "checkpoint_sha256": sha256_file(checkpoint),
              "corpus": corpus.name, "corpus_sha256": sha256_file(corpus)}  # fmt: skip
    text = TextReader.detect(words).to_dict()  # the authors' PTB models: Mikolov's convention
    config, card, words = lm._shared_files(words, {"imported_from": source, "text": text}, None, None)
    return save_pretrained(to, lm, config, card + _card_source(source), words, overwrite=overwrite)


def _card_source(source: dict) -> str:
    return (
        "\n## Source\n\nImported with `onlstm import official` from a checkpoint of the authors' code "
        f"({source['repository']}): `{source['checkpoint']}` (sha256 {source['checkpoint_sha256']}) and its "
        f"vocabulary `{source['corpus']}` (sha256 {source['corpus_sha256']}). It gives the same next-word "
        "probabilities as the authors' model (their master input gate, DropConnect scaled by 1 - p at eval).\n"
    )
