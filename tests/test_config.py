"""The one config system: typed coercion, to_dict/from_dict, YAML sections, generated flags, precedence
defaults < --config < flags, and the LM, logic and demo commands on top of it."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from onlstm.cli import build_parser, main
from onlstm.config import Config, ConfigError, Settings, check_section, coerce, flags_given, option, read_yaml
from onlstm.errors import OnlstmError
from onlstm.flags import add_flags
from onlstm.lm import LMConfig
from onlstm.lm.config import TrainConfig, explicit_settings, load_config, run_config
from onlstm.logic.cli import resolve_settings
from onlstm.logic.config import LogicModelConfig, LogicTrainConfig


@dataclass
class Recipe(Config):
    section = "train"

    lr: float = option(1e-3, "learning rate")
    steps: int = option(10, "updates")
    sizes: list[int] = option([4, 2], "widths")
    limit: float | None = option(None, "minutes", default_text="no limit")
    fast: bool = option(True, "go fast")
    mode: str = option("a", "mode", choices=("a", "b"))

    def validate(self) -> None:
        if self.lr <= 0:
            raise ConfigError(f"train.lr must be positive, got {self.lr}")


# --------------------------------------------------------------------------- coercion


@pytest.mark.parametrize("text", ["1e-3", "1.0e-3", "0.001", "1E-3", 0.001])
def test_every_spelling_of_a_float_is_a_float(text):
    value = coerce(text, float, "train.lr")
    assert type(value) is float and value == 0.001


def test_coercion_follows_the_declared_type():
    assert coerce(3, float, "x") == 3.0 and type(coerce(3, float, "x")) is float
    assert coerce(4.0, int, "x") == 4 and type(coerce(4.0, int, "x")) is int
    assert coerce("1e3", int, "x") == 1000  # YAML 1.1 reads 1e3 as a string
    assert coerce(None, int | None, "x") is None and coerce("2.5", float | None, "x") == 2.5
    assert coerce((1, 2.0), list[int], "x") == [1, 2]
    for value, tp, message in [
        ("fast", float, "x must be a number, got 'fast'"),
        (2.5, int, "x must be an integer, got 2.5"),
        (True, int, "x must be an integer, got True"),
        ("yes", bool, "x must be true or false"),
        (3, str, "x must be a string"),
        ("1 2", list[int], "x must be a list"),
        ([1, "b"], list[int], r"x\[1\] must be an integer"),
    ]:
        with pytest.raises(ConfigError, match=message):
            coerce(value, tp, "x")


def test_construction_coerces_and_checks_choices():
    r = Recipe(lr="2e-3", steps=5.0, sizes=(3,))
    assert (r.lr, r.steps, r.sizes) == (0.002, 5, [3]) and type(r.steps) is int
    with pytest.raises(ConfigError, match="train.mode must be one of a, b, got 'c'"):
        Recipe(mode="c")
    with pytest.raises(ConfigError, match="train.lr must be positive"):
        Recipe(lr=0.0)
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, OnlstmError)


def test_to_dict_from_dict_round_trip_and_unknown_fields():
    r = Recipe(lr=0.5, sizes=[1, 2, 3], limit=2.0, fast=False, mode="b")
    assert Recipe.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    with pytest.raises(ConfigError, match=r"unknown train fields \['learning_rate', 'zz'\]"):
        Recipe.from_dict({"learning_rate": 1, "zz": 2})
    assert Recipe().sizes is not Recipe().sizes  # a list default is copied


# --------------------------------------------------------------------------- bounds


@dataclass
class Bounded(Config):
    """One field per kind of bound, one with both ends, a list."""

    section = "train"

    rate: float = option(1.0, "a rate", gt=0)
    warmup: int = option(0, "steps", ge=0)
    share: float = option(0.5, "a share", lt=1)
    cap: float = option(1.0, "a cap", le=1)
    keep: float = option(0.5, "a probability", ge=0, lt=1)
    decay: float = option(0.5, "a factor", gt=0, le=1)
    sizes: list[int] = option([4], "widths", ge=1)


@pytest.mark.parametrize(
    "field, inside, outside, message",
    [
        ("rate", 1e-9, 0, "train.rate must be > 0, got 0.0"),  # gt: the bound itself is out
        ("warmup", 0, -1, "train.warmup must be >= 0, got -1"),  # ge: the bound itself is in
        ("share", 0.999, 1, "train.share must be < 1, got 1.0"),
        ("cap", 1, 1.001, "train.cap must be <= 1, got 1.001"),
        ("keep", 0, 1, "train.keep must be in [0, 1), got 1.0"),
        ("keep", 0.999, -0.001, "train.keep must be in [0, 1), got -0.001"),
        ("decay", 1, 0, "train.decay must be in (0, 1], got 0.0"),
        ("decay", 1e-9, 1.001, "train.decay must be in (0, 1], got 1.001"),
        ("sizes", [1, 8], [8, 0], "train.sizes must be >= 1, got 0"),  # every item of a list
    ],
)
def test_each_bound_admits_its_side_and_refuses_the_other_in_one_line(field, inside, outside, message):
    assert getattr(Bounded(**{field: inside}), field) == inside
    with pytest.raises(ConfigError) as info:
        Bounded(**{field: outside})
    assert str(info.value) == message
    with pytest.raises(ConfigError, match=re.escape(message)):  # a file's or a flag's value: the same check
        check_section(Bounded, {field: outside}, "train")


def test_an_option_takes_one_bound_at_each_end_and_help_shows_them():
    with pytest.raises(TypeError, match="one lower bound"):
        option(1.0, gt=0, ge=0)
    with pytest.raises(TypeError, match="one upper bound"):
        option(1.0, lt=1, le=1)
    p = argparse.ArgumentParser()
    add_flags(p, Bounded, "train")
    text = " ".join(p.format_help().split())
    assert "--rate X a rate (default: 1.0; > 0)" in text and "--keep X a probability (default: 0.5; in [0, 1))" in text
    assert "--decay X a factor (default: 0.5; in (0, 1])" in text and "(default: 4; >= 1)" in text


@pytest.mark.parametrize(
    "flag, inside, outside, message",
    [
        ("--lr", "1e-9", "0", "train.lr must be > 0, got 0.0"),  # gt
        ("--asgd-start-epoch", "0", "-1", "train.asgd_start_epoch must be >= 0, got -1"),  # ge
        ("--momentum", "0", "1", "train.momentum must be in [0, 1), got 1.0"),  # lt
        ("--bptt-short-prob", "1", "1.5", "train.bptt_short_prob must be in [0, 1], got 1.5"),  # le
        ("--chunk-size", "1", "0", "model.chunk_size must be >= 1, got 0"),
        ("--hidden-sizes", "10", "0", "model.hidden_sizes must be >= 1, got 0"),
    ],
)
def test_a_bound_on_the_command_line_is_one_line_and_exit_2(tmp_path, capsys, flag, inside, outside, message):
    argv = ["lm", "train", "--data-dir", str(tmp_path), "--out", str(tmp_path / "run"), "--no-tie-weights"]
    assert main([*argv, flag, outside]) == 2
    err = capsys.readouterr().err
    assert err == f"onlstm lm train: {message}\n" and not (tmp_path / "run").exists()
    load_config(None, build_parser().parse_args([*argv, flag, inside]))  # the bound's own side is taken


# --------------------------------------------------------------------------- files


def test_yaml_sections_are_checked_against_their_dataclass(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  lr: 1e-3\n  sizes: [8, 4]\nnote: hi\n")
    doc = read_yaml(f, {"train": Recipe}, keys=("note",))
    assert doc == {"note": "hi", "train": {"lr": 0.001, "sizes": [8, 4]}}
    for text, message in [
        ("train:\n  lr: fast\n", "train.lr must be a number, got 'fast'"),
        ("train:\n  step: 3\n", r"unknown train fields \['step'\]"),
        ("trian: {}\n", r"unknown keys \['trian'\]; allowed: note, train"),
        ("train: [1]\n", "section 'train' must be a mapping"),
        ("train: {lr: [\n", "is not valid YAML"),
        ("train: " + "[" * 5000 + "]" * 5000 + "\n", "nests too deep"),  # the parser recursed into a traceback
    ]:
        f.write_text(text)
        with pytest.raises(ConfigError, match=message) as info:
            read_yaml(f, {"train": Recipe}, keys=("note",))
        assert str(f) in str(info.value)
    with pytest.raises(ConfigError, match="does not exist"):
        read_yaml(tmp_path / "none.yaml", {"train": Recipe})


def test_mapping_fields_from_files_and_flags():
    @dataclass
    class Model(Config):
        section = "model"
        extra: dict[str, float] = option({}, "extras", omit_default=True)

    assert Model(extra={"a": "1e-3"}).extra == {"a": 0.001}
    with pytest.raises(ConfigError, match="model.extra.b must be a number"):
        Model(extra={"b": "x"})
    with pytest.raises(ConfigError, match="model.extra must be a mapping"):
        Model(extra=[1])
    assert Model().to_dict() == {} and Model(extra={"a": 1}).to_dict() == {"extra": {"a": 1.0}}
    p = argparse.ArgumentParser()
    add_flags(p, Model, "model")
    assert flags_given(p.parse_args(["--extra", "a=1", "b=2e-3", "--extra", "a=3"]), "model") == {
        "extra": {"a": 3, "b": "2e-3"}
    }  # read as YAML scalars, coerced when built
    with pytest.raises(SystemExit):
        p.parse_args(["--extra", "novalue"])
    deep = "[" * 5000 + "]" * 5000  # not a scalar YAML can read: kept as text (then refused as a number)
    assert flags_given(p.parse_args(["--extra", f"a={deep}"]), "model") == {"extra": {"a": deep}}


def test_fixed_fields_are_neither_in_files_nor_flags():
    with pytest.raises(ConfigError, match="model.vocab_size is taken from the training text"):
        check_section(LMConfig, {"vocab_size": 3}, "model")
    p = argparse.ArgumentParser()
    add_flags(p, LMConfig, "model")
    with pytest.raises(SystemExit):
        p.parse_args(["--vocab-size", "3"])


# --------------------------------------------------------------------------- flags


def test_flags_come_from_the_fields_with_help_and_default():
    p = argparse.ArgumentParser()
    add_flags(p, Recipe, "train")
    text = " ".join(p.format_help().split())
    assert "--lr X learning rate (default: 0.001)" in text and "--sizes N [N ...] widths (default: 4 2)" in text
    assert "--fast, --no-fast go fast (default: yes)" in text and "(default: no limit)" in text
    assert "--mode {a,b}" in text
    assert flags_given(p.parse_args([]), "train") == {}
    given = flags_given(p.parse_args(["--lr", "1e-2", "--no-fast", "--sizes", "3", "1", "--limit", "5"]), "train")
    assert given == {"lr": 0.01, "fast": False, "sizes": [3, 1], "limit": 5.0}


def test_precedence_defaults_then_file_then_flags(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  lr: 0.5\n  steps: 7\n")
    p = argparse.ArgumentParser()
    add_flags(p, Recipe, "train")
    args = p.parse_args(["--steps", "9"])
    settings = Settings.resolve({"train": Recipe}, f, args)
    assert settings.given == {"train": {"lr": 0.5, "steps": 9}}  # what the user set, flag over file
    r = settings.build("train")
    assert (r.lr, r.steps, r.mode) == (0.5, 9, "a")  # file over default, flag over file
    assert Settings.resolve({"train": Recipe}, None, {"train": {"steps": "3"}}).build("train", mode="b").steps == 3
    with pytest.raises(ConfigError, match=r"unknown train fields \['stp'\]"):
        Settings.resolve({"train": Recipe}, f, {"train": {"stp": 1}})


# --------------------------------------------------------------------------- the logic command (issue #9's bug)


def _logic_settings(tmp_path: Path, yaml_text: str, *flags: str):
    f = tmp_path / "logic.yaml"
    f.write_text(f"data: {tmp_path}\nout: {tmp_path / 'out'}\n" + yaml_text)
    args = build_parser().parse_args(["logic", "train", "--config", str(f), *flags])
    return resolve_settings(args)


@pytest.mark.parametrize("text", ["1e-3", "1.0e-3", "0.001"])
def test_logic_yaml_learning_rate_in_any_spelling(tmp_path, text):
    _, train, _, _, _ = _logic_settings(tmp_path, f"train:\n  lr: {text}\n  min_lr: 1e-5\n  time_limit: 50\n")
    assert train.lr == 0.001 and train.min_lr == 1e-5 and train.time_limit == 50.0


def test_logic_yaml_errors_name_the_field(tmp_path, capsys):
    with pytest.raises(ConfigError, match="train.lr must be a number, got 'fast'"):
        _logic_settings(tmp_path, "train:\n  lr: fast\n")
    with pytest.raises(ConfigError, match=r"model.hidden_size must be an integer, got 'big'"):
        _logic_settings(tmp_path, "model:\n  hidden_size: big\n")
    f = tmp_path / "bad.yaml"
    f.write_text("train:\n  lr: fast\n")
    assert main(["logic", "train", "--config", str(f), "--data", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onlstm logic train: config file") and "train.lr" in err and err.count("\n") == 1


def test_logic_compare_section_is_typed(tmp_path):
    from onlstm.logic.config import SECTIONS, CompareSettings

    def load_yaml(path):
        return Settings.resolve(SECTIONS, path, experiment="logic").given

    f = tmp_path / "c.yaml"
    f.write_text("compare:\n  cells: [lstm, gru]\n  seeds: [0, 1.0]\n  lengths: [7, 8]\n")
    what = CompareSettings.from_dict(load_yaml(f)["compare"])
    assert (what.cells, what.seeds, what.lengths) == (["lstm", "gru"], [0, 1], [7, 8])
    f.write_text("compare:\n  seeds: [zero]\n")
    with pytest.raises(ConfigError, match=r"compare.seeds\[0\] must be an integer"):
        load_yaml(f)
    f.write_text("compare:\n  cells: [lstm, elman]\n")
    with pytest.raises(ConfigError, match=r"unknown cells \['elman'\]"):
        CompareSettings.from_dict(load_yaml(f)["compare"])
    assert CompareSettings().cells == ["onlstm", "lstm"]


def test_logic_flags_win_over_the_file(tmp_path):
    model, train, _, _, _ = _logic_settings(
        tmp_path,
        "model:\n  hidden_size: 40\n  chunk_size: 4\ntrain:\n  lr: 0.01\n  epochs: 3\n",
        "--lr",
        "2e-3",
        "--no-progress",
        "--cell",
        "gru",
    )
    assert (model.hidden_size, model.chunk_size, model.cell) == (40, 4, "gru")
    assert (train.lr, train.epochs, train.progress, train.batch_size) == (0.002, 3, False, 128)


def test_logic_generate_flags(tmp_path, capsys):
    from onlstm.logic.generate import GenerateConfig

    args = build_parser().parse_args(
        ["logic", "generate", "--out", str(tmp_path), "--per-length", "30", "--test-count", "5", "--balance-labels"]
    )
    cfg = GenerateConfig.from_dict(flags_given(args, "generate"))
    assert (cfg.per_length, cfg.test_count, cfg.balance_labels, cfg.test_fraction) == (30, 5, True, 0.2)
    assert main(["logic", "generate", "--out", str(tmp_path), "--test-fraction", "0.5", "--test-count", "3"]) == 2
    assert "--test-fraction or --test-count, not both" in capsys.readouterr().err
    assert main(["logic", "generate", "--out", str(tmp_path), "--per-length", "0"]) == 2
    assert "per_length must be in [1, 10000000], got 0" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written on bad input


def test_logic_runs_saved_before_the_change_still_load():
    # config.json sections as the hand-written settings code saved them (ints where floats belong included)
    old_model = {
        "cell": "onlstm",
        "emb_size": 128,
        "hidden_size": 400,
        "chunk_size": 10,
        "master_input": "paper",
        "dropout": 0.2,
        "dropconnect": 0,
        "mlp_hidden": 400,
        "mlp_activation": "relu",
        "n_classes": 7,
        "vocab_size": 12,
    }
    old_train = {
        "max_train_ops": 6,
        "valid_fraction": 0.1,
        "max_train_examples": None,
        "seed": 0,
        "epochs": 30,
        "batch_size": 128,
        "lr": 0.001,
        "lr_decay": 0.5,
        "lr_patience": 3,
        "min_lr": 1e-05,
        "weight_decay": 0,
        "adam_eps": 1e-08,
        "clip": 1,
        "patience": 8,
        "valid_every": 0,
        "time_limit": 50,
        "eval_batch_size": 512,
        "device": "auto",
        "threads": 1,
        "progress": True,
    }
    assert LogicModelConfig.from_dict(old_model) == LogicModelConfig()
    train = LogicTrainConfig.from_dict(old_train)
    assert train.time_limit == 50.0 and train.clip == 1.0 and train.threads == 1
    with pytest.raises(ConfigError, match=r"unknown logic model config fields \['hiden_size'\]"):
        LogicModelConfig.from_dict({"hiden_size": 3})


# --------------------------------------------------------------------------- LM and demo


def test_lm_yaml_float_spellings_and_errors(tmp_path):
    f = tmp_path / "c.yaml"
    for text in ("1e-6", "1.0e-6", "0.000001"):
        f.write_text(f"train:\n  weight_decay: {text}\n")
        assert load_config(f).train.weight_decay == pytest.approx(1e-6, rel=0, abs=1e-18)
    f.write_text("train:\n  lr: fast\n")
    with pytest.raises(ConfigError, match="train.lr must be a number"):
        load_config(f)
    assert TrainConfig.from_dict(TrainConfig().to_dict()) == TrainConfig()


def test_lm_runs_saved_before_the_change_still_load():
    # a config.json model section as LMConfig wrote it before (ints where floats belong, as JSON may have them)
    old = {
        "vocab_size": 50,
        "emb_size": 16,
        "hidden_sizes": [24, 16],
        "cell": "onlstm",
        "chunk_size": 4,
        "master_input": "paper",
        "dropout_emb": 0.1,
        "dropout_in": 0.3,
        "dropout_hidden": 0.2,
        "dropout_out": 0,
        "dropconnect": 0.3,
        "tie_weights": True,
    }
    cfg = LMConfig.from_dict(old)
    assert cfg.to_dict() == old and type(cfg.dropout_out) is float
    with pytest.raises(ConfigError, match=r"unknown language-model config fields \['dropout'\]"):
        LMConfig.from_dict({**old, "dropout": 0.1})


def test_the_lm_model_section_is_checked_whole_when_resolved_without_a_vocabulary():
    """chunk_size has its bound on LMConfig, and the model section's checks across fields (the encoder's divisibility,
    tied widths) run when the settings are resolved, with no vocabulary size yet and no LMConfig built for it."""
    with pytest.raises(ConfigError, match=re.escape("model.chunk_size must be >= 1, got 0")):
        LMConfig(vocab_size=5, chunk_size=0)
    with pytest.raises(ConfigError, match=re.escape("model.vocab_size must be >= 1, got 0")):
        LMConfig(vocab_size=0)
    with pytest.raises(ConfigError, match="model.hidden_sizes must name at least one layer's width"):
        run_config({"model": {"hidden_sizes": []}})
    with pytest.raises(ConfigError, match=re.escape("not divisible by chunk_size=7")):
        run_config({"model": {"chunk_size": 7}})  # 1150 and 400 units
    with pytest.raises(ConfigError, match="tie_weights needs the last layer's width"):
        run_config({"model": {"emb_size": 300}})
    cfg = run_config({"model": {"hidden_sizes": [14, 7], "emb_size": 7, "chunk_size": 7}})
    assert cfg.model_config(5) == LMConfig(vocab_size=5, hidden_sizes=[14, 7], emb_size=7, chunk_size=7)


@pytest.mark.parametrize("experiment", ["lm", "logic"])
def test_the_encoder_checks_run_when_settings_are_resolved_from_python(experiment):
    """A typed encoder field that the cell does not declare, and an option set both as a field and in
    encoder_options, are refused by load_config as by the commands (they were checked in the CLI only)."""
    from onlstm.logic.config import load_config as logic_config

    load = load_config if experiment == "lm" else logic_config
    with pytest.raises(ConfigError, match="--dropconnect does not apply to encoder 'sru'"):
        load(None, {"model": {"cell": "sru", "dropconnect": 0.3}})
    with pytest.raises(ConfigError, match="chunk_size is set twice"):
        load(None, {"model": {"chunk_size": 4, "encoder_options": {"chunk_size": 8}}})
    load(None, {"model": {"cell": "lstm", "dropconnect": 0.3}})  # lstm declares dropconnect


def test_lm_compare_checks_a_typed_encoder_field_against_the_compared_cells():
    with pytest.raises(ConfigError, match="--chunk-size does not apply to encoder 'sru', 'lstm'"):
        explicit_settings(None, {"model": {"chunk_size": 5}}, cells=["sru", "lstm"])
    assert explicit_settings(None, {"model": {"chunk_size": 5}}, cells=["lstm", "onlstm"])["model"] == {"chunk_size": 5}


def test_lm_flags_are_generated_with_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["lm", "train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--averaging, --no-averaging" in text and "--hidden-sizes N [N ...]" in text
    assert "(default: 1150 1150 400; >= 1)" in text and "--optimizer {sgd,adam}" in text and "--vocab-size" not in text


def test_demo_settings_from_flags_and_file(tmp_path, capsys):
    from onlstm.demo import DemoConfig

    args = build_parser().parse_args(["demo", "--seconds", "2", "--out", "x", "--hidden-sizes", "16", "8"])
    cfg = DemoConfig.from_dict(flags_given(args, "demo"))
    assert (cfg.seconds, cfg.out, cfg.hidden_sizes, cfg.threads) == (2.0, "x", [16, 8], 1)
    f = tmp_path / "demo.yaml"
    f.write_text("demo:\n  seconds: soon\n")
    assert main(["demo", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onlstm demo: config file") and "demo.seconds must be a number" in err
