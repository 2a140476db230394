"""The encoder registry: specs, option checking, validation, and an encoder registered from user code that
every experiment's command then trains, saves and loads back without any other change."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest
import torch
from torch import nn

from onlstm import encoders as E
from onlstm.checkpoint import CheckpointError
from onlstm.cli import main
from onlstm.lm import LMConfig
from onlstm.logic.config import LogicModelConfig
from onlstm.logic.generate import GenerateConfig, generate_dataset
from support import REPO, TINY_LM

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "big", "small", "red", "ran", "fast", "slow"]


pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------- the registry


def test_builtin_entries_declare_what_they_are():
    assert {"onlstm", "lstm", "gru"} <= set(E.names()) and E.names() == sorted(E.names())
    on, lstm = E.get("onlstm"), E.get("lstm")
    assert on.yields_distances and not lstm.yields_distances and not E.get("gru").yields_distances
    assert on.causal and on.stateful and lstm.causal and lstm.stateful
    assert set(on.option_names) == {"chunk_size", "master_input", "dropconnect"}
    assert lstm.option_names == ("dropconnect",)
    assert E.has_distances("onlstm") and not E.has_distances("gru")


def test_unknown_encoder_lists_the_known_ones():
    with pytest.raises(E.EncoderError, match=r"unknown encoder 'transformer-xl'; registered encoders: .*gru.*lstm"):
        E.get("transformer-xl")
    with pytest.raises(ValueError, match="cell must be one of"):  # configs say which field is wrong
        LMConfig(vocab_size=5, cell="nope")


def test_make_encoder_rejects_options_the_encoder_does_not_accept():
    with pytest.raises(E.EncoderError, match=r"encoder 'lstm' does not accept the option\(s\) chunk_size"):
        E.make_encoder("lstm", 3, 4, chunk_size=2)
    with pytest.raises(E.EncoderError, match="'onlstm' does not accept the option.* nonlinearity"):
        E.make_encoder("onlstm", 3, 4, nonlinearity="relu")
    with pytest.raises(E.EncoderError, match="onlstm option chunk_size must be an integer"):
        E.make_encoder("onlstm", 3, 4, chunk_size="two")


def test_onlstm_validation_says_what_to_change():
    with pytest.raises(E.EncoderError, match=r"hidden sizes \[30\] are not divisible by chunk_size=4.*change"):
        E.get("onlstm").validate([32, 30], {"chunk_size": 4})
    with pytest.raises(E.EncoderError, match="master_input must be one of paper, reverse"):
        E.make_encoder("onlstm", 3, 4, master_input="forward")
    with pytest.raises(E.EncoderError, match="dropconnect must be in"):
        E.make_encoder("gru", 3, 4, dropconnect=1.0)
    # the same check guards every experiment's config
    with pytest.raises(ValueError, match="not divisible by chunk_size"):
        LMConfig(vocab_size=5, emb_size=6, hidden_sizes=[8, 6], chunk_size=4)
    assert LMConfig(vocab_size=5, emb_size=6, hidden_sizes=[8, 6], chunk_size=4, cell="lstm").cell == "lstm"


def test_built_layers_get_their_options():
    layer = E.make_encoder("onlstm", 3, 8, chunk_size=4, master_input="reverse", dropconnect=0.25)
    assert (layer.rnn.chunk_size, layer.rnn.master_input) == (4, "reverse")
    lstm = E.make_encoder("lstm", 3, 8, dropconnect=0.25)
    assert isinstance(lstm.rnn, nn.LSTM) and lstm.dropconnect == 0.25
    # an experiment config passes each encoder only the options it declares
    cfg = LogicModelConfig(cell="lstm", hidden_size=30, chunk_size=4, dropconnect=0.1)
    assert cfg.layer_options() == {"dropconnect": 0.1}
    assert E.options_for("onlstm", cfg) == {"chunk_size": 4, "master_input": "paper", "dropconnect": 0.1}


def test_register_twice_is_an_error_unless_replaced():
    build = lambda i, h: E.TorchRNN(nn.RNN(i, h))
    try:
        E.register("twice", build)
        with pytest.raises(E.EncoderError, match="already registered; pass replace=True"):
            E.register("twice", build)
        spec = E.register("twice", build, causal=False, replace=True)
        assert E.get("twice") is spec and not spec.causal
        with pytest.raises(ValueError, match="not causal per step.*cannot be a language model"):
            LMConfig(vocab_size=5, emb_size=4, hidden_sizes=[4], cell="twice")
        with pytest.raises(E.EncoderError, match="already registered"):
            E.register("lstm", build)
        with pytest.raises(E.EncoderError, match="non-empty word"):
            E.register("bad name", build)
    finally:
        E.unregister("twice")
    assert "twice" not in E.names()


def test_register_refuses_an_entry_no_command_could_use():
    build = lambda i, h: E.TorchRNN(nn.RNN(i, h))
    refused = [
        (("bad", build), {"options": ("width",)}, r"encoder 'bad': options must be EncoderOption entries, got 'width'"),
        (("bad", 42), {}, r"encoder 'bad': build must be a class or function that returns the layer, got 42"),
        (("bad", build), {"options": (E.EncoderOption("width", int, 0, ge=1),)},
         r"encoder 'bad': the default of option width must be >= 1, got 0; change the default or the bounds"),
        (("bad", build), {"options": (E.EncoderOption("mode", str, "x", choices=("a", "b")),)}, "must be one of a, b"),
        (("-toy", build), {}, "not starting with -, got '-toy'"),
    ]  # fmt: skip
    for args, kw, message in refused:
        with pytest.raises(E.EncoderError, match=message):
            E.register(*args, **kw)
    assert "bad" not in E.names() and "-toy" not in E.names()


def test_a_build_refusing_its_settings_is_one_line_naming_the_encoder(tmp_path, capsys):
    def build(i, h):
        raise ValueError(f"widths must be even, got {h}")

    E.register("odd", build)
    try:
        with pytest.raises(E.EncoderError, match=r"encoder 'odd' could not be built .*ValueError: widths must be even"):
            E.make_encoder("odd", 4, 5)
        E.register("odd", lambda i, h: E.TorchRNN(nn.RNN(i, h, nonlinearity="sigmoid")), replace=True)
        with pytest.raises(E.EncoderError, match=r"encoder 'odd' could not be built .*ValueError: Unknown nonlin"):
            E.make_encoder("odd", 4, 5)
        E.register("odd", lambda i: None, replace=True)  # a build of the wrong call
        with pytest.raises(E.EncoderError, match=r"encoder 'odd' could not be built .*TypeError: "):
            E.make_encoder("odd", 4, 5)
        argv = ["logic", "train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--cell", "odd"]
        generate_dataset(tmp_path / "data", GenerateConfig(per_length=4, seed=3, max_ops=2, test_count=1))
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("onlstm logic train: encoder 'odd' could not be built") and "\n" not in err
        assert not (tmp_path / "run").exists()
    finally:
        E.unregister("odd")


def test_a_user_check_runs_for_every_experiment_config():
    def even_only(sizes, opts):
        if any(h % 2 for h in sizes):
            raise ValueError(f"widths must be even, got {sizes}")

    E.register("even", lambda i, h: E.TorchRNN(nn.GRU(i, h)), check=even_only)
    try:
        with pytest.raises(E.EncoderError, match=r"encoder 'even': widths must be even, got \[15\]"):
            LogicModelConfig(cell="even", hidden_size=15)
        with pytest.raises(E.EncoderError, match="widths must be even"):
            LMConfig(vocab_size=5, emb_size=4, hidden_sizes=[7, 4], cell="even")
        assert LogicModelConfig(cell="even", hidden_size=16).layer_options() == {}
    finally:
        E.unregister("even")


# --------------------------------------------------------------------------- a user's encoder, end to end


class ToyRNN(nn.Module):
    """What a user would write: a one-layer tanh RNN with the registry's call (tensor or packed input)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden_size, bias=bias)
        self.hidden_size = hidden_size

    def forward(self, x, hx=None, return_distances: bool = False):
        out, h = self.rnn(x, hx)
        return out, h, None


@pytest.fixture
def toy():
    spec = E.register(
        "toy", ToyRNN, description="one-layer tanh RNN", options=(E.EncoderOption("bias", bool, True, "add biases"),)
    )
    yield spec
    if "toy" in E.names():
        E.unregister("toy")


def _lm_corpus(dir: Path) -> Path:
    r = random.Random(0)
    dir.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", 110), ("valid", 16), ("test", 16)):
        lines = [" " + " ".join(r.choice(WORDS) for _ in range(r.randint(3, 9))) + " " for _ in range(n)]
        (dir / f"ptb.{name}.txt").write_text("\n".join(lines) + "\n")
    return dir


def test_registered_encoder_shows_in_the_help(toy, capsys):
    for argv in (["lm", "train", "--help"], ["logic", "train", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        out = " ".join(capsys.readouterr().out.split())
        cell_help = out.split("--cell NAME ")[-1].split(" --")[0]
        # every registered name, sorted, the user's among them (the list grows with the built-in encoders)
        assert "toy" in E.names() and f"one of {', '.join(E.names())} " in cell_help, argv


def test_user_encoder_trains_as_a_language_model(toy, tmp_path, capsys):
    from onlstm.models.language_model import load_language_model_run
    from onlstm.parsing.induce import load_language_model

    corpus, run = _lm_corpus(tmp_path / "corpus"), tmp_path / "lm-toy"
    # tiny.yaml sets chunk_size and dropconnect: options the toy does not declare, so it does not get them
    # its own option comes through encoder_options
    assert (
        main(
            [
                "lm",
                "train",
                "--config",
                str(TINY_LM),
                "--data-dir",
                str(corpus),
                "--out",
                str(run),
                "--epochs",
                "1",
                "--cell",
                "toy",
                "--encoder-options",
                "bias=false",
            ]
        )
        == 0
    )
    saved = json.loads((run / "config.json").read_text())
    assert saved["model"]["cell"] == "toy" and saved["model"]["encoder_options"] == {"bias": False}
    with open(run / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(math.isfinite(float(r["train_loss"])) and math.isfinite(float(r["valid_loss"])) for r in rows)
    loaded = load_language_model_run(run)
    model, vocab = loaded.model, loaded.vocab
    assert isinstance(model.layers[0], ToyRNN) and len(vocab) == saved["model"]["vocab_size"]
    assert not model.layers[0].rnn.bias and not any("bias" in k for k in model.state_dict() if k.startswith("layers"))
    # parsing needs distances: the toy's spec says it yields none
    with pytest.raises(CheckpointError, match="'toy' model has no master gates"):
        load_language_model(run)
    E.unregister("toy")
    with pytest.raises(CheckpointError, match=r"got 'toy'.*must be registered \(onlstm.encoders.register\)"):
        load_language_model_run(run)
    assert main(["lm", "eval", "--checkpoint", str(run), "--data-dir", str(corpus)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("onlstm lm eval:") and "must be registered" in err and "\n" not in err


def test_user_encoder_trains_on_the_logic_task(toy, tmp_path, capsys):
    from onlstm.logic.model import load_classifier

    data, run = tmp_path / "data", tmp_path / "logic-toy"
    generate_dataset(data, GenerateConfig(per_length=24, seed=3, max_ops=9, test_count=6))
    assert (
        main(
            [
                "logic",
                "train",
                "--data",
                str(data),
                "--out",
                str(run),
                "--cell",
                "toy",
                "--emb-size",
                "8",
                "--hidden-size",
                "16",
                "--mlp-hidden",
                "16",
                "--epochs",
                "2",
                "--batch-size",
                "16",
                "--no-progress",
            ]
        )
        == 0
    )
    saved = json.loads((run / "config.json").read_text())
    assert saved["model"]["cell"] == "toy" and json.loads((run / "results.json").read_text())["status"] == "finished"
    assert "encoder_options" not in saved["model"]  # unused: config.json as before the field existed
    history = json.loads((run / "history.json").read_text())
    assert history and all(math.isfinite(h["train_loss"]) for h in history)
    model, _ = load_classifier(run)
    assert isinstance(model.encoder, ToyRNN)
    assert main(["logic", "eval", "--checkpoint", str(run), "--data", str(data), "--lengths", "1-9"]) == 0
    assert "toy" in capsys.readouterr().out
    # an option the chosen encoder does not accept is an error naming both
    assert (
        main(
            [
                "logic",
                "train",
                "--data",
                str(data),
                "--out",
                str(tmp_path / "x"),
                "--cell",
                "lstm",
                "--encoder-options",
                "bias=false",
            ]
        )
        == 2
    )
    assert "encoder 'lstm' does not accept the option(s) bias" in capsys.readouterr().err
    E.unregister("toy")
    with pytest.raises(CheckpointError, match="must be registered"):
        load_classifier(run)
    assert main(["logic", "train", "--data", str(data), "--out", str(tmp_path / "again"), "--cell", "toy"]) == 2
    assert "cell must be one of" in capsys.readouterr().err


def test_user_encoder_in_a_logic_comparison(toy, tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "cmp"
    generate_dataset(data, GenerateConfig(per_length=12, seed=4, max_ops=8, test_count=4))
    assert (
        main(
            [
                "logic",
                "compare",
                "--data",
                str(data),
                "--out",
                str(out),
                "--cells",
                "toy",
                "lstm",
                "--emb-size",
                "8",
                "--hidden-size",
                "16",
                "--mlp-hidden",
                "8",
                "--epochs",
                "1",
                "--batch-size",
                "32",
                "--no-progress",
                "--lengths",
                "1-8",
            ]
        )
        == 0
    )
    assert json.loads((out / "compare.json").read_text())["cells"] == ["toy", "lstm"]
    # --jobs trains each run in a new process, which does not run the code that registered the toy: refused first
    other = tmp_path / "cmp-jobs"
    assert (
        main(["logic", "compare", "--data", str(data), "--out", str(other), "--cells", "lstm", "toy", "--jobs", "2"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("onlstm logic compare: encoder 'toy' is registered by your own code") and "\n" not in err
    assert "--jobs 1" in err and not other.exists()
    assert main(["logic", "compare", "--data", str(data), "--out", str(out), "--cells", "toy", "nope"]) == 2
    assert "unknown cells ['nope']" in capsys.readouterr().err


def test_lm_compare_refuses_an_encoder_of_the_users_code(toy, tmp_path, capsys, monkeypatch):
    out = tmp_path / "study"
    argv = ["lm", "compare", "--config", str(TINY_LM), "--data-dir", str(_lm_corpus(tmp_path / "corpus"))]
    assert main([*argv, "--out", str(out), "--cells", "lstm", "toy"]) == 2  # every run is a new process
    err = capsys.readouterr().err.strip()
    assert err.startswith("onlstm lm compare: encoder 'toy' is registered by your own code") and "\n" not in err
    assert "lm train" in err and not out.exists()
    # a built-in name replaced by the user's code is theirs too: a new process would build the package's own
    monkeypatch.setitem(E._REGISTRY, "lstm", E.EncoderSpec("lstm", ToyRNN))
    assert not E.built_in("lstm") and E.built_in("gru") and not E.built_in("toy")
    assert main([*argv, "--out", str(out), "--cells", "lstm"]) == 2
    assert "encoder 'lstm' is registered by your own code" in capsys.readouterr().err


def test_a_typed_flag_the_encoder_does_not_use_is_an_error(tmp_path, capsys):
    """--dropconnect typed for SRU (no hidden-to-hidden weights) would be silently ignored: refused, before any
    work, naming the encoders that use it. The same field in a preset is passed over (one preset, many cells)."""
    corpus = _lm_corpus(tmp_path / "corpus")
    base = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--epochs", "1"]
    assert main([*base, "--out", str(tmp_path / "a"), "--cell", "sru", "--dropconnect", "0.3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("onlstm lm train:") and "--dropconnect does not apply to encoder 'sru'" in err
    assert "used by" in err and "lstm" in err and "\n" not in err
    assert not (tmp_path / "a").exists()
    # docs/encoders.md quotes the message whole: held equal to it (it left out lstm-std once)
    docs = " ".join((REPO / "docs" / "encoders.md").read_text(encoding="utf-8").split())
    assert f"`{err.removeprefix('onlstm lm train: ')}`" in docs
    # tiny.yaml sets dropconnect: not typed, so SRU trains
    assert main([*base, "--out", str(tmp_path / "b"), "--cell", "sru"]) == 0
    capsys.readouterr()


def test_a_typed_flag_in_a_logic_comparison_must_reach_one_compared_encoder(tmp_path, capsys):
    data = tmp_path / "data"
    generate_dataset(data, GenerateConfig(per_length=24, seed=3, max_ops=9, test_count=6))
    argv = ["logic", "compare", "--data", str(data), "--out", str(tmp_path / "c"), "--hidden-size", "8"]
    assert main([*argv, "--cells", "sru", "qrnn", "--chunk-size", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--chunk-size does not apply to encoder 'sru', 'qrnn'" in err and "onlstm" in err
    with pytest.raises(E.EncoderError, match="dropconnect"):
        E.check_typed_options(["sru"], {"dropconnect": 0.1})
    E.check_typed_options(["sru", "lstm"], {"dropconnect": 0.1, "hidden_size": 8})  # lstm uses it: fine
    E.check_typed_options(["nope"], {"dropconnect": 0.1})  # unknown: left to the config's own message


@pytest.mark.parametrize("impl", ["reference", "fused", "cpp"])
def test_lstm_std_is_an_lstm_in_the_authors_layout(impl):
    """The authors' --std cell (encoder lstm-std) computes what nn.LSTM computes with the same weights (ours:
    rows [2 master, out, cell, in, forget]; nn.LSTM's: [in, forget, cell, out]), on packed input, through each
    kernel, forward and backward."""
    torch.manual_seed(0)
    std, lstm = E.make_encoder("lstm-std", 5, 8).double(), nn.LSTM(5, 8).double()
    std.rnn.impl = impl
    if std.rnn.resolved_impl(torch.device("cpu"), torch.float64) != impl:
        pytest.skip(f"kernel {impl} not available here")
    with torch.no_grad():
        for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            i, f, g, o = getattr(lstm, f"{kind}_l0").chunk(4)
            getattr(std.rnn, f"{kind}_l0")[2:] = torch.cat([o, g, i, f])
    seqs = [torch.randn(n, 5, dtype=torch.float64, requires_grad=True) for n in (7, 3, 5)]
    packed = torch.nn.utils.rnn.pack_sequence(seqs, enforce_sorted=False)
    out_a, (h_a, c_a), _ = std(packed)
    out_b, (h_b, c_b) = lstm(packed)
    assert torch.allclose(out_a.data, out_b.data, atol=1e-12) and torch.allclose(c_a, c_b, atol=1e-12)
    grads = [
        torch.autograd.grad(h.sum() + out.data.pow(2).sum(), seqs, retain_graph=True)
        for h, out in ((h_a, out_a), (h_b, out_b))
    ]
    assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(*grads))


def test_an_option_set_as_a_field_and_in_encoder_options_is_refused(tmp_path, capsys):
    """--chunk-size 4 with --encoder-options chunk_size=8 built the layer with 8 while config.json said 4."""
    corpus = _lm_corpus(tmp_path / "corpus")
    base = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--epochs", "1"]
    assert main([*base, "--out", str(tmp_path / "a"), "--chunk-size", "4", "--encoder-options", "chunk_size=8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "chunk_size is set twice" in err and "\n" not in err and not (tmp_path / "a").exists()
    logic = ["logic", "train", "--data", str(tmp_path), "--out", str(tmp_path / "b")]
    assert main([*logic, "--chunk-size", "4", "--encoder-options", "chunk_size=8"]) == 2
    assert "chunk_size is set twice" in capsys.readouterr().err
