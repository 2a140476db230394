"""Importing a checkpoint of the authors' code (yikangshen/Ordered-Neurons): their ``main.py`` saves
``torch.save([model, criterion, optimizer])`` and caches its vocabulary as a pickled ``data.Corpus``. Both are
read as data (:mod:`onlstm.models.torchfile`), their records mapped onto a :class:`LanguageModel` with the same
next-word probabilities (:func:`convert`), and saved in the shared-model layout (:func:`import_official`;
docs/sharing.md, "Importing a checkpoint of the authors' code")."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from pathlib import Path

import torch

from ..checkpoint import CheckpointError
from ..data.reader import TextReader
from .language_model import LanguageModel, LMConfig
from .torchfile import Record, read_torch_file

SOURCE_REPO = "https://github.com/yikangshen/Ordered-Neurons"


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
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        raise OfficialImportError(f"{source}: {what} is not a floating-point tensor")
    return value.detach().float().contiguous().clone()


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
        splits = criterion.state.get("splits")
        raise OfficialImportError(
            f"{source}: the model uses the authors' split softmax (splits {splits}, their setting for vocabularies "
            "over 75,000 words), which onlstm's language model does not have; only single-softmax models "
            "(vocabularies up to 75,000 words, e.g. PTB) can be imported"
        )


def unpack_checkpoint(obj, source: str) -> tuple[Record, Record | None]:
    """(model, criterion) of what ``main.py``'s ``model_save`` wrote (a bare model is accepted too)."""
    items = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    model = items[0] if items else None
    if not (isinstance(model, Record) and model.class_name == "RNNModel"):
        found = getattr(model, "global_name", type(model).__name__)
        raise OfficialImportError(
            f"{source}: expected [model.RNNModel, criterion, optimizer] as the authors' main.py saves, found {found}"
        )
    criterion = items[1] if len(items) > 1 else None
    return model, criterion


def convert(model: Record, criterion: Record | None, vocab_size: int, source: str) -> LanguageModel:
    """A :class:`LanguageModel` (eval mode) with the record's weights and the authors' eval-time behaviour: the
    ``paper`` master input gate and DropConnect's ``1 - p`` scaling of the hidden-to-hidden weights."""
    _criterion_splits(criterion, source)
    if _attr(model, "rnn_type", source) != "LSTM":
        raise OfficialImportError(f"{source}: rnn_type is {_attr(model, 'rnn_type', source)!r}, not 'LSTM'")
    cells = _cells(_attr(model, "rnn", source), source)
    emb = _tensor(_path(model, "encoder.weight", source), "encoder.weight", source)
    dec_w = _tensor(_path(model, "decoder.weight", source), "decoder.weight", source)
    dec_b = _tensor(_path(model, "decoder.bias", source), "decoder.bias", source)
    tied = _path(model, "decoder.weight", source) is _path(model, "encoder.weight", source)
    drops = {float(_path(c, "hh.dropout", source)) for c in cells}
    chunks = {int(_attr(c, "chunk_size", source)) for c in cells}
    if len(drops) != 1 or len(chunks) != 1:
        raise OfficialImportError(f"{source}: the layers differ in DropConnect {drops} or chunk size {chunks}")
    if emb.shape[0] != vocab_size or dec_w.shape[0] != vocab_size:
        raise OfficialImportError(
            f"{source} has {emb.shape[0]} words but the corpus has {vocab_size}; is it the corpus of this model?"
        )
    config = LMConfig(
        vocab_size=vocab_size,
        emb_size=emb.shape[1],
        hidden_sizes=[int(_attr(c, "hidden_size", source)) for c in cells],
        cell="onlstm",
        chunk_size=chunks.pop(),
        master_input="paper",
        dropout_emb=float(_attr(model, "dropoute", source)),
        dropout_in=float(_attr(model, "dropouti", source)),
        dropout_hidden=float(_attr(model, "dropouth", source)),
        dropout_out=float(_attr(model, "dropout", source)),
        dropconnect=drops.pop(),
        tie_weights=tied,
    )
    config.validate()
    lm = LanguageModel(config)
    tensors = {"embedding.weight": emb, "decoder.weight": dec_w, "decoder.bias": dec_b}
    for i, cell in enumerate(cells):
        for part in ("ih", "hh"):
            weight, bias = _linear(_attr(cell, part, source), source, f"cell {i} {part}")
            tensors[f"layers.{i}.rnn.weight_{part}_l0"], tensors[f"layers.{i}.rnn.bias_{part}_l0"] = weight, bias
    _load(lm, tensors, source)
    return lm.eval()


def _load(lm: LanguageModel, tensors: dict[str, torch.Tensor], source: str) -> None:
    expected = lm.state_dict()
    wrong = [f"{k} {tuple(v.shape)} (expected {tuple(expected[k].shape)})" for k, v in tensors.items()
             if tuple(v.shape) != tuple(expected[k].shape)]  # fmt: skip
    if wrong:
        raise OfficialImportError(f"{source}: weights of unexpected shapes: {'; '.join(wrong[:3])}")
    lm.load_state_dict(tensors, strict=True)


def read_corpus_words(path: str | Path) -> list[str]:
    """The vocabulary (``corpus.dictionary.idx2word``) of the authors' cached ``data.Corpus``."""
    corpus = read_torch_file(path)
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
    model, criterion = unpack_checkpoint(read_torch_file(checkpoint), str(checkpoint))
    try:
        lm = convert(model, criterion, len(words), str(checkpoint))
    except OfficialImportError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a record of an unexpected shape or type
        raise OfficialImportError(
            f"{checkpoint}: not a model of the authors' code as this importer knows ({exc})"
        ) from None
    lm.vocab = Vocab(words)
    return lm, words


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def import_official(checkpoint: str | Path, corpus: str | Path, to: str | Path, overwrite: bool = False) -> Path:
    """Read the authors' files and write the shared-model folder ``to`` all at once: written in a temporary
    sibling, then renamed into place. ``to`` must be new or empty unless ``overwrite``."""
    from ..errors import InputError
    from ..files import write_text
    from ..runs import RunDir

    checkpoint, corpus, to = Path(checkpoint), Path(corpus), Path(to)
    if to.exists() and not to.is_dir():
        raise InputError(f"{to} is a file; --to needs a folder (new or empty)")
    if to.is_dir() and any(to.iterdir()) and not overwrite:
        raise InputError(f"{to} is not empty; choose a new folder or pass --overwrite to replace it")
    lm, words = load_official(checkpoint, corpus)
    source = {"repository": SOURCE_REPO, "checkpoint": checkpoint.name, "checkpoint_sha256": _sha256(checkpoint),
              "corpus": corpus.name, "corpus_sha256": _sha256(corpus)}  # fmt: skip
    to.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_sibling(to, "new")
    try:
        text = TextReader.detect(words).to_dict()  # the authors' PTB models: Mikolov's convention
        lm.save_pretrained(tmp, words, run_config={"imported_from": source, "text": text})
        card = RunDir(tmp).card_path
        write_text(card, card.read_text(encoding="utf-8") + _card_source(source))
        _replace(tmp, to)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return to


def _card_source(source: dict) -> str:
    return (
        "\n## Source\n\nImported with `onlstm import official` from a checkpoint of the authors' code "
        f"({source['repository']}): `{source['checkpoint']}` (sha256 {source['checkpoint_sha256']}) and its "
        f"vocabulary `{source['corpus']}` (sha256 {source['corpus_sha256']}). It gives the same next-word "
        "probabilities as the authors' model (their master input gate, DropConnect scaled by 1 - p at eval).\n"
    )


def _fresh_sibling(to: Path, what: str) -> Path:
    """A new hidden folder beside ``to`` (same file system, so renames are atomic), made with the umask's mode."""
    for _ in range(100):
        path = to.parent / f".{to.name}.{what}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot make a temporary folder beside {to}")


def _replace(tmp: Path, to: Path) -> None:
    """Move the finished folder ``tmp`` to ``to``; an existing ``to`` (empty, or replaced with --overwrite) is
    moved aside first and removed only once the new one is in place."""
    old = None
    if to.exists():
        old = _fresh_sibling(to, "old")
        os.rename(to, old / to.name)
    try:
        os.rename(tmp, to)
    except OSError:
        if old is not None:
            os.rename(old / to.name, to)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
