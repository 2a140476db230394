"""``onlstm import official``: checkpoints of the authors' code (made by stand-ins of their modules in a child
process, tests/official_standins.py) read as data, with the authors' next-word log-probabilities; hostile and
truncated files refused with one line; the output folder written all at once."""

from __future__ import annotations

import importlib.util
import math
import os
import pickle
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from official_standins import make_checkpoint, make_checkpoints
from onlstm.checkpoint import read_json
from onlstm.cli import main
from onlstm.data.reader import TextReader
from onlstm.models import LanguageModel
from onlstm.models.official import (
    OfficialImportError,
    convert,
    load_official,
    read_corpus_words,
    unpack_checkpoint,
)
from onlstm.models.torchfile import Record, TorchFileError, read_torch_file

AUTHORS_MODULES = ("model", "ON_LSTM", "splitcross", "data", "locked_dropout")


def test_the_authors_modules_are_not_importable_here():
    # the guarantee the other tests rest on: the files are read without the classes they name (tests/data is a
    # folder without code, which Python finds as an empty namespace package named data)
    loaded = [m for m in AUTHORS_MODULES if getattr(sys.modules.get(m), "__file__", None)]
    findable = [m for m in AUTHORS_MODULES if (spec := importlib.util.find_spec(m)) is not None and spec.has_location]
    assert loaded == findable == []


@pytest.fixture(scope="module", params=["zip", "legacy"])
def authors(request, tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp(request.param), request.param)


#: Checkpoints whose contents are wrong in one way each (a statement run on the model ``m`` and ``corpus`` before
#: saving, or a split softmax): made by one child process for the whole module.
ODD_CHECKPOINTS = {
    "split softmax": ("5", ""),
    "a hidden size 'twelve'": ("", "m.rnn.cells[0].hidden_size = 'twelve'"),
    "600 units declared": ("", "for c in m.rnn.cells[:-1]: c.hidden_size = 600"),
    "a 400-digit dropout": ("", "m.dropout = 10**400"),
    "an infinite chunk size": ("", "for c in m.rnn.cells: c.chunk_size = float('inf')"),
    "a NaN DropConnect": ("", "for c in m.rnn.cells: c.hh.dropout = float('nan')"),
    "a corpus with a word twice": ("", "corpus.dictionary.idx2word[1] = corpus.dictionary.idx2word[0]"),
}


@pytest.fixture(scope="module")
def odd(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("odd")
    folders = {name: root / f"case{k}" for k, name in enumerate(ODD_CHECKPOINTS)}
    make_checkpoints(root, {folders[name]: ("zip", *case) for name, case in ODD_CHECKPOINTS.items()})
    return folders


def _our_logprobs(lm: LanguageModel, ids: torch.Tensor) -> torch.Tensor:
    out, _, _ = lm(ids[:-1].unsqueeze(1))
    return torch.log_softmax(lm.logits(out[:, 0]), -1)


def test_imported_model_gives_the_authors_log_probabilities(authors, tmp_path, capsys):
    to = tmp_path / "imported"
    assert main(["import", "official", "--checkpoint", str(authors / "model.pt"), "--corpus",
                 str(authors / "corpus.data"), "--to", str(to)]) == 0  # fmt: skip
    assert sorted(p.name for p in to.iterdir()) == [
        ".onlstm-output.json",
        "README.md",
        "config.json",
        "model.safetensors",
        "vocab.json",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["imported"]  # no temporary sibling left
    assert "yikangshen/Ordered-Neurons" in (to / "README.md").read_text()
    lm = LanguageModel.from_pretrained(to)
    assert lm.config.master_input == "paper" and lm.config.dropconnect == pytest.approx(0.45)
    assert lm.decoder.weight is lm.embedding.weight  # tied as theirs
    ref = load_file(str(authors / "reference.safetensors"))
    for k in range(4):
        ours = _our_logprobs(lm, ref[f"ids{k}"])
        assert torch.allclose(ours, ref[f"logprobs{k}"], atol=1e-5, rtol=0)
    assert lm.vocab.words[ref["ids0"][0]] == "<eos>" and "<unk>" in lm.vocab
    # how it reads English is saved with it: the convention its vocabulary shows (PTB's for their PTB models)
    assert read_json(to / "config.json")["text"] == TextReader.detect(lm.vocab.words).to_dict()
    assert lm.reader == TextReader.detect(lm.vocab.words)


def test_the_check_can_fail_without_the_dropconnect_scaling(authors):
    # the eval-time (1 - p) scaling of the hidden-to-hidden weights matters: without it the numbers differ
    lm, _ = load_official(authors / "model.pt", authors / "corpus.data")
    for layer in lm.layers:
        layer.rnn.dropconnect = 0.0
    ref = load_file(str(authors / "reference.safetensors"))
    assert not torch.allclose(_our_logprobs(lm, ref["ids0"]), ref["logprobs0"], atol=1e-5, rtol=0)


class Hostile:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("position", ["model", "criterion", "corpus"])
def test_a_hostile_pickle_is_refused_and_nothing_runs(authors, tmp_path, capsys, position):
    marker = tmp_path / "ran"
    model, corpus = authors / "model.pt", authors / "corpus.data"
    bad = tmp_path / "bad.pt"
    if position == "corpus":
        torch.save(Hostile(marker), bad)
        corpus = bad
    else:
        torch.save([Hostile(marker), None, None] if position == "model" else [None, Hostile(marker), None], bad)
        model = bad
    to = tmp_path / "out"
    code = main(["import", "official", "--checkpoint", str(model), "--corpus", str(corpus), "--to", str(to)])
    err = capsys.readouterr().err
    assert code == 2 and not marker.exists() and not to.exists()
    assert err.count("\n") == 1 and "refused" in err and f"{os.system.__module__}.system" in err, err


@pytest.mark.parametrize(
    "module, name",
    [("builtins", "eval"), ("torch", "load"), ("subprocess", "Popen"), ("builtins", "getattr"), ("os", "system")],
)
def test_every_other_global_is_refused_by_name(tmp_path, module, name):
    # a protocol-2 pickle that only names the global (GLOBAL opcode) and stops
    path = tmp_path / "x.pt"
    path.write_bytes(b"\x80\x02c" + f"{module}\n{name}\n".encode() + b".")
    with pytest.raises(TorchFileError, match=rf"asks for {module}\.{name}"):
        read_torch_file(path)


def test_the_authors_classes_become_inert_records(authors):
    model, criterion, optimizer = read_torch_file(authors / "model.pt")
    assert isinstance(model, Record) and model.global_name == "model.RNNModel"
    assert (
        criterion.global_name == "splitcross.SplitCrossEntropyLoss" and optimizer.global_name == "torch.optim.sgd.SGD"
    )
    assert not hasattr(model, "forward") and not callable(model)


def test_truncated_files_are_refused(authors, tmp_path):
    data = (authors / "model.pt").read_bytes()
    cut = tmp_path / "cut.pt"
    for n in sorted({0, 1, 2, 10, 100, len(data) // 3, len(data) // 2, len(data) - 100, len(data) - 1}):
        cut.write_bytes(data[:n])
        with pytest.raises(TorchFileError):
            read_torch_file(cut)


def test_a_file_that_is_not_a_torch_save_file_is_named_as_such(tmp_path):
    """A text file (a corpus given as the checkpoint) is neither of torch.save's formats: said so, not "truncated"."""
    wrong = tmp_path / "corpus.txt"
    wrong.write_text("the cat sat on the mat\n")
    with pytest.raises(TorchFileError, match=r"is not a torch\.save file \(it starts with b'the cat sat '"):
        read_torch_file(wrong)


def test_a_truncated_file_is_one_line_and_exit_2(authors, tmp_path, capsys):
    cut = tmp_path / "cut.pt"
    cut.write_bytes((authors / "model.pt").read_bytes()[:-50])
    code = main(["import", "official", "--checkpoint", str(cut), "--corpus", str(authors / "corpus.data"),
                 "--to", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(cut) in err and "Traceback" not in err


def test_the_output_folder_is_new_empty_or_overwritten(authors, tmp_path, capsys):
    args = ["import", "official", "--checkpoint", str(authors / "model.pt"), "--corpus", str(authors / "corpus.data")]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*args, "--to", str(empty)]) == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main([*args, "--to", str(mine)]) == 2
    assert "--overwrite" in capsys.readouterr().err and (mine / "notes.txt").read_text() == "keep me"
    assert main([*args, "--to", str(mine), "--overwrite"]) == 0
    assert not (mine / "notes.txt").exists() and (mine / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "mine"]


def test_a_split_softmax_is_refused_with_its_reason(odd):
    folder = odd["split softmax"]
    with pytest.raises(OfficialImportError, match="split softmax"):
        load_official(folder / "model.pt", folder / "corpus.data")


def test_a_corpus_that_does_not_fit_the_model(authors, tmp_path):
    small = tmp_path / "corpus.data"
    # the corpus pickle is read as data; a different vocabulary size is named
    torch.save(pickle.loads(pickle.dumps(["not", "a", "corpus"])), small)
    with pytest.raises(OfficialImportError, match="data.Corpus"):
        load_official(authors / "model.pt", small)


def test_surprisal_of_an_imported_model_is_the_authors_next_word_probability(authors):
    # the sentence is read after <eos>, every word and the final <eos> predicted as the authors' LM does
    lm, words = load_official(authors / "model.pt", authors / "corpus.data")
    ref = load_file(str(authors / "reference.safetensors"))
    ids = ref["ids1"].tolist()
    (bits,) = lm.surprisals([" ".join(words[i] for i in ids[1:-1])])
    expected = [-float(ref["logprobs1"][t, ids[t + 1]]) / math.log(2) for t in range(len(ids) - 1)]
    assert bits.tolist() == pytest.approx(expected, abs=1e-4)


def _legacy_file(path, payload: bytes) -> None:
    """A legacy-format torch file around ``payload`` (one pickle), with no storages."""
    head = [0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}]
    path.write_bytes(b"".join(pickle.dumps(x, protocol=2) for x in head) + payload + pickle.dumps([], protocol=2))


def test_an_old_torch_modules_backend_is_an_inert_record(tmp_path):
    # torch < 1.2 pickled every module's _backend as a call of torch.nn.backends.thnn._get_thnn_function_backend
    path = tmp_path / "old.pt"
    _legacy_file(path, b"\x80\x02ctorch.nn.backends.thnn\n_get_thnn_function_backend\n)R.")
    backend = read_torch_file(path)
    assert isinstance(backend, Record) and backend.global_name.endswith("_get_thnn_function_backend")


def test_a_model_saved_on_a_gpu_in_the_legacy_format_reads_on_the_cpu(authors, tmp_path):
    # the legacy format names a GPU storage torch.cuda.FloatStorage (the authors' main.py saves from CUDA)
    data = (authors / "model.pt").read_bytes()
    if data.startswith(b"PK"):
        pytest.skip("the zip format names a storage by its dtype, whatever the device")
    assert b"ctorch\nFloatStorage\n" in data
    cuda = tmp_path / "cuda.pt"
    cuda.write_bytes(data.replace(b"ctorch\nFloatStorage\n", b"ctorch.cuda\nFloatStorage\n"))
    lm, _ = load_official(cuda, authors / "corpus.data")
    ref = load_file(str(authors / "reference.safetensors"))
    assert torch.allclose(_our_logprobs(lm, ref["ids2"]), ref["logprobs2"], atol=1e-5, rtol=0)


def test_a_model_with_odd_contents_is_one_error(odd, tmp_path, capsys):
    # the right class names with a hidden size that is not a number: one line naming the file, exit 2
    folder = odd["a hidden size 'twelve'"]
    args = ["--checkpoint", str(folder / "model.pt"), "--corpus", str(folder / "corpus.data")]
    assert main(["import", "official", *args, "--to", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.pt: not a model of the authors' code" in err and "twelve" in err


# -- issue 48: --to checked as export checks it, before any work; odd values one line; shapes before the model ---


def _never_read(*args, **kwargs):
    raise AssertionError("the checkpoint was read before --to was checked")


def _snapshot(folder) -> dict:
    return {str(p): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("where", ["home", "working folder", "above the working folder", "inputs' folder", "."])
def test_overwrite_never_replaces_a_folder_that_holds_more_than_an_output(
    authors, tmp_path, monkeypatch, capsys, where
):
    home = tmp_path / "home"
    work, inputs = home / "projects" / "work", tmp_path / "inputs"
    work.mkdir(parents=True)
    inputs.mkdir()
    for name in ("model.pt", "corpus.data"):
        shutil.copy(authors / name, inputs / name)
    (home / "notes.txt").write_text("keep me")
    monkeypatch.setenv("HOME", str(home))  # never the real home
    monkeypatch.chdir(work)
    monkeypatch.setattr("onlstm.models.official.read_torch_file", _never_read)
    to = {"home": home, "working folder": work, "above the working folder": work.parent, "inputs' folder": inputs}
    before = _snapshot(tmp_path)
    code = main(["import", "official", "--checkpoint", str(inputs / "model.pt"), "--corpus",
                 str(inputs / "corpus.data"), "--to", str(to.get(where, where)), "--overwrite"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert _snapshot(tmp_path) == before  # nothing deleted, nothing left beside


@pytest.mark.parametrize("where", ["a dangling link", "inside a file", "an unwritable place"])
def test_a_to_that_cannot_be_written_is_refused_before_the_work(authors, tmp_path, monkeypatch, capsys, where):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    # /proc refuses new files even to root (a chmod'ed folder would not stop root)
    to = {"a dangling link": tmp_path / "link", "inside a file": tmp_path / "file.txt" / "out"}.get(
        where, "/proc/onlstm-import-test"
    )
    monkeypatch.setattr("onlstm.models.official.read_torch_file", _never_read)
    code = main(["import", "official", "--checkpoint", str(authors / "model.pt"), "--corpus",
                 str(authors / "corpus.data"), "--to", str(to)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--to" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "link"]


#: The word each odd value's message must hold.
ODD_VALUES = {
    "a 400-digit dropout": "dropout",
    "an infinite chunk size": "chunk_size",
    "a NaN DropConnect": "DropConnect",
    "a corpus with a word twice": "duplicate",
}


@pytest.mark.parametrize("case", ODD_VALUES)
def test_odd_values_in_the_files_are_one_line(odd, tmp_path, capsys, case):
    folder, word = odd[case], ODD_VALUES[case]
    to = tmp_path / "out"
    code = main(["import", "official", "--checkpoint", str(folder / "model.pt"), "--corpus",
                 str(folder / "corpus.data"), "--to", str(to)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and word in err and "Traceback" not in err, err
    assert not to.exists()


def test_a_small_file_declaring_a_large_model_is_refused_before_the_model_exists(odd, monkeypatch):
    """The file's settings say 600 units, its tensors hold 12: the shapes are compared on a model of the meta device
    (nothing allocated) and no model is built on the CPU."""
    import onlstm.models.official as official

    folder = odd["600 units declared"]
    built = []
    real = official.LanguageModel

    def spy(config):
        built.append(torch.empty(0).device.type)  # the default device the model is built on
        return real(config)

    monkeypatch.setattr(official, "LanguageModel", spy)
    with pytest.raises(OfficialImportError, match="unexpected shapes"):
        load_official(folder / "model.pt", folder / "corpus.data")
    assert built == ["meta"]


def test_a_model_larger_than_its_file_allows_is_refused(authors):
    # the budget comes from the file's size: a model that would take more than that is refused before it is built
    model, criterion = unpack_checkpoint(read_torch_file(authors / "model.pt"), "model.pt")
    words = read_corpus_words(authors / "corpus.data")
    with pytest.raises(OfficialImportError, match="more than the 1,000 a file of this size may take"):
        convert(model, criterion, len(words), "model.pt", budget=1000)
    assert convert(model, criterion, len(words), "model.pt", budget=10**9).config.hidden_sizes[0] == 12


def test_a_state_dict_and_a_wrong_corpus_are_named_for_what_they_are(authors, tmp_path, capsys):
    """A state_dict used to be refused as a hostile file ("sets the state of a OrderedDict object"); a text given
    as --corpus was told to "give the .pt file the model was saved to"."""
    torch.save(torch.nn.Linear(2, 2).state_dict(), tmp_path / "sd.pt")
    (tmp_path / "train.txt").write_text("the cat sat\n")
    corpus = str(authors / "corpus.data")
    assert main(["import", "official", "--checkpoint", str(tmp_path / "sd.pt"), "--corpus", corpus,
                 "--to", str(tmp_path / "o")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "holds a state_dict" in err and "[model, criterion, optimizer]" in err and "hostile" not in err
    assert main(["import", "official", "--checkpoint", str(authors / "model.pt"), "--corpus",
                 str(tmp_path / "train.txt"), "--to", str(tmp_path / "o")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "give the corpus.<hash>.data file" in err and ".pt file" not in err
    assert not (tmp_path / "o").exists()
