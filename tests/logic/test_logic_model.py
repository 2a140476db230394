"""Logic classifier: features, padding invariance, evaluation by length, training/eval/compare smoke
runs on tiny generated data, checkpoints, interruption and errors."""

from __future__ import annotations

import csv
import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from onlstm.checkpoint import CheckpointError, load_weights
from onlstm.cli import main
from onlstm.config import ConfigError
from onlstm.errors import RunDirError
from onlstm.files import write_json
from onlstm.logic import data as D
from onlstm.logic import evaluate as E
from onlstm.logic import model as M
from onlstm.logic import train as T
from onlstm.logic.cli import parse_buckets
from onlstm.logic.formulas import parse
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.logic.model import (
    KIND,
    TOKENS,
    LogicClassifier,
    LogicModelConfig,
    load_classifier,
    pad_batch,
    pair_features,
    token_ids,
)
from onlstm.logic.relations import RELATIONS
from onlstm.runs import RunDir
from support import CONFIGS, SHARED_DATA

TINY = dict(emb_size=8, hidden_size=16, chunk_size=4, mlp_hidden=16)
TINY_FLAGS = ["--emb-size", "8", "--hidden-size", "16", "--chunk-size", "4", "--mlp-hidden", "16"]
CELLS = ("onlstm", "lstm", "gru")

FORMULAS = [
    "a",
    "( not b )",
    "( a ( and b ) )",
    "( ( not f ) ( and ( ( not c ) ( and b ) ) ) )",
    "( ( a ( or ( not ( c ( and d ) ) ) ) ) ( and ( not e ) ) )",
]


def tiny_model(cell: str, seed: int = 0) -> LogicClassifier:
    torch.manual_seed(seed)
    return LogicClassifier(LogicModelConfig(cell=cell, **TINY)).eval()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run far faster on one thread, above all on a CPU shared with other jobs."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    """Generated files train0..train9 / test0..test9, 24 pairs per length (6 of them in test)."""
    out = tmp_path_factory.mktemp("logic-data")
    generate_dataset(out, GenerateConfig(per_length=24, seed=3, max_ops=9, test_count=6))
    return out


# --------------------------------------------------------------------------- tokens and features


def test_vocabulary_has_brackets_and_padding_first():
    assert TOKENS[0] == "<pad>"
    assert set(TOKENS[1:]) == set("abcdef") | {"not", "and", "or", "(", ")"}
    assert token_ids("( not a )") == [TOKENS.index(t) for t in ("(", "not", "a", ")")]
    assert token_ids(parse("( a ( and b ) )")) == token_ids("( a ( and b ) )")
    with pytest.raises(ValueError, match="unknown token 'x'"):
        token_ids("( not x )")


def test_pad_batch_shapes_and_lengths():
    tokens, lengths = pad_batch([[1, 2, 3], [4], [5, 6]])
    assert tokens.shape == (3, 3) and lengths.tolist() == [3, 1, 2]
    assert tokens[:, 1].tolist() == [4, 0, 0] and tokens[:, 2].tolist() == [5, 6, 0]


def test_pair_features_are_exactly_h1_h2_product_absdiff():
    h1, h2 = torch.randn(3, 5), torch.randn(3, 5)
    f = pair_features(h1, h2)
    assert f.shape == (3, 20)
    assert torch.equal(f[:, 0:5], h1)
    assert torch.equal(f[:, 5:10], h2)
    assert torch.equal(f[:, 10:15], h1 * h2)
    assert torch.equal(f[:, 15:20], (h1 - h2).abs())


@pytest.mark.parametrize("cell", CELLS)
def test_model_features_use_each_formulas_own_encoding(cell):
    model = tiny_model(cell)
    a, al = pad_batch([token_ids(f) for f in FORMULAS[:3]])
    b, bl = pad_batch([token_ids(f) for f in FORMULAS[2:]])
    with torch.no_grad():
        feats = model.features(a, al, b, bl)
        expected = pair_features(model.encode(a, al), model.encode(b, bl))
        logits = model(a, al, b, bl)
    torch.testing.assert_close(feats, expected)
    assert feats.shape == (3, 4 * 16) and logits.shape == (3, len(RELATIONS))
    torch.testing.assert_close(logits, model.mlp(feats))


@pytest.mark.parametrize("cell", CELLS)
def test_padding_does_not_change_a_formulas_encoding(cell):
    """Each formula's encoding in a padded batch equals the encoder's last output on it alone."""
    model = tiny_model(cell)
    tokens, lengths = pad_batch([token_ids(f) for f in FORMULAS])
    with torch.no_grad():
        batch = model.encode(tokens, lengths)
        for j, f in enumerate(FORMULAS):
            ids = torch.tensor(token_ids(f)).unsqueeze(1)  # (T, 1)
            alone = model.encode(ids, torch.tensor([ids.shape[0]]))
            # independent route: run the encoder on the unpadded sequence, take its last output
            out, _, _ = model.encoder(model.embedding(ids))
            torch.testing.assert_close(batch[j], alone[0], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(batch[j], out[-1, 0], rtol=1e-5, atol=1e-6)


def test_embedding_dropout_covers_real_tokens_only(monkeypatch):
    """In training the embedding dropout sees one row per real token, none for padding (the speed reason is in
    LogicClassifier.encode), and training outputs still have the pairs' shape."""
    from onlstm.logic import model as logic_model

    seen = []
    real_dropout = logic_model.F.dropout

    def spy(x, p, training):
        seen.append(tuple(x.shape))
        return real_dropout(x, p, training)

    model = tiny_model("onlstm")
    model.train()
    monkeypatch.setattr(logic_model.F, "dropout", spy)
    tokens, lengths = pad_batch([token_ids(f) for f in FORMULAS])
    h = model.encode(tokens, lengths)
    assert seen[0] == (int(lengths.sum()), model.config.emb_size)
    assert int(lengths.sum()) < tokens.numel()  # the batch has padding, so the check can fail
    assert h.shape == (len(FORMULAS), model.config.hidden_size)


def test_pair_prediction_does_not_depend_on_the_batch():
    model = tiny_model("onlstm")
    pairs = [(FORMULAS[i], FORMULAS[-1 - i]) for i in range(len(FORMULAS))]
    a, al = pad_batch([token_ids(p[0]) for p in pairs])
    b, bl = pad_batch([token_ids(p[1]) for p in pairs])
    with torch.no_grad():
        together = model(a, al, b, bl)
        for j, (x, y) in enumerate(pairs):
            xa, xl = pad_batch([token_ids(x)])
            ya, yl = pad_batch([token_ids(y)])
            torch.testing.assert_close(together[j], model(xa, xl, ya, yl)[0], rtol=1e-5, atol=1e-6)


def test_config_validation_messages():
    with pytest.raises(ValueError, match="cell must be one of"):
        LogicModelConfig(cell="transformer-xl")
    with pytest.raises(ValueError, match="not divisible by chunk_size"):
        LogicModelConfig(hidden_size=30, chunk_size=4)
    with pytest.raises(ValueError, match="unknown logic model config fields"):
        LogicModelConfig.from_dict({"hiden_size": 3})
    with pytest.raises(ValueError, match="valid_fraction"):
        T.LogicTrainConfig(valid_fraction=1.0)
    with pytest.raises(ValueError, match="min_lr"):
        T.LogicTrainConfig(lr=1e-3, min_lr=1e-2)
    with pytest.raises(ValueError, match="lr_patience must be >= 1"):
        T.LogicTrainConfig(lr_patience=0)
    assert LogicModelConfig(cell="lstm", hidden_size=30, chunk_size=4).hidden_size == 30  # chunk ignored
    with pytest.raises(ValueError, match=r"adam_beta1 must be in \[0, 1\)"):
        T.LogicTrainConfig(adam_beta1=1.0)


def test_adam_beta1_reaches_the_optimizer(tmp_path):
    """The authors' logic script runs Adam without momentum (betas (0, 0.999)); the option must reach Adam."""
    run = T.LogicTask(LogicModelConfig(**TINY), T.LogicTrainConfig(adam_beta1=0.0), tmp_path, [], [], log=print)
    assert run.opt.param_groups[0]["betas"] == (0.0, 0.999)
    run = T.LogicTask(LogicModelConfig(**TINY), T.LogicTrainConfig(), tmp_path, [], [], log=print)
    assert run.opt.param_groups[0]["betas"] == (0.9, 0.999)  # torch's default stays the default


def test_plateau_schedule_decays_only_after_lr_patience_bad_checks():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=0.008)
    sched = T.PlateauSchedule(opt, factor=0.5, patience=3, min_lr=0.0015)
    lrs = []
    # bad, bad, better (resets), bad, bad, bad (decay), bad, bad, bad (decay), 3 more bad (decay to the floor),
    # 3 more bad (already at the floor: no change reported)
    for improved in [
        False,
        False,
        True,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
    ]:
        decayed = sched.step(improved)
        lrs.append((opt.param_groups[0]["lr"], decayed))
    assert [lr for lr, _ in lrs] == [0.008] * 5 + [0.004] * 3 + [0.002] * 3 + [0.0015] * 4
    assert [i for i, (_, d) in enumerate(lrs) if d] == [5, 8, 11]
    constant = T.PlateauSchedule(opt, factor=1.0, patience=1)
    assert not any(constant.step(False) for _ in range(5)) and opt.param_groups[0]["lr"] == 0.0015


# --------------------------------------------------------------------------- evaluation by length


def _example(label, a, b, number):
    fa, fb = parse(a), parse(b)
    from onlstm.logic.formulas import count_operators

    return D.Example(label, fa, fb, count_operators(fa), count_operators(fb), "mem", 1, "test", number)


def test_count_by_length_agrees_with_a_hand_count():
    exs = [
        _example("#", "a", "b", 1),
        _example("=", "a", "a", 1),
        _example("<", "a", "b", 1),
        _example("|", "a", "b", 7),
        _example("v", "a", "b", 7),
        _example("^", "a", "b", 12),
    ]
    preds = ["#", "=", "#", "|", "|", "#"]  # right: 2 of 3 at length 1, 1 of 2 at 7, 0 of 1 at 12
    r = E.count_by_length(exs, [RELATIONS.index(p) for p in preds])
    assert r.lengths == [1, 7, 12]
    assert (r.correct, r.total) == ({1: 2, 7: 1, 12: 0}, {1: 3, 7: 2, 12: 1})
    assert r.accuracy(1) == pytest.approx(2 / 3) and r.accuracy(12) == 0.0 and math.isnan(r.accuracy(5))
    s = r.summary()
    assert s["<=6"] == pytest.approx(2 / 3) and s["7-12"] == pytest.approx(1 / 3) and s["all"] == pytest.approx(3 / 6)
    assert E.count_by_length(exs, preds).correct == r.correct  # labels work as well as indices
    base = E.majority_baseline(exs)
    assert base.correct == {1: 1, 7: 1, 12: 1}
    table = E.format_table([("m", [r]), ("m2", [r, E.count_by_length(exs, ["#"] * 6)])], [1, 7, 12], counts=r)
    lines = table.splitlines()
    assert lines[0].split("|")[1].strip() == "model" and "<=6" in lines[0] and "7-12" in lines[0]
    assert lines[2].split("|")[2].strip() == "66.7"
    assert "±" in lines[3] and lines[4].split("|")[2].strip() == "3"


def test_evaluate_on_files_matches_predictions_one_by_one(tiny_data):
    model = tiny_model("onlstm", seed=1)
    exs = E.read_test_examples(tiny_data, "test", range(1, 10))
    result = E.evaluate_examples(model, exs, batch_size=7)  # batches cut across lengths
    correct: dict[int, int] = {}
    total: dict[int, int] = {}
    with torch.no_grad():
        for ex in exs:
            a, al = pad_batch([token_ids(ex.a)])
            b, bl = pad_batch([token_ids(ex.b)])
            hit = RELATIONS[int(model(a, al, b, bl).argmax())] == ex.label
            k = ex.file_number
            total[k] = total.get(k, 0) + 1
            correct[k] = correct.get(k, 0) + int(hit)
    assert result.total == total and result.correct == correct
    assert sum(total.values()) == sum(1 for k in range(1, 10) for _ in open(tiny_data / f"test{k}"))


# --------------------------------------------------------------------------- train / eval / compare


def _flags_for(cells) -> list[str]:
    """TINY_FLAGS, without --chunk-size when no ON-LSTM is trained (typed for other encoders it is refused)."""
    if "onlstm" in cells:
        return TINY_FLAGS
    i = TINY_FLAGS.index("--chunk-size")
    return TINY_FLAGS[:i] + TINY_FLAGS[i + 2 :]


def _train_args(data, out, *extra):
    cell = extra[extra.index("--cell") + 1] if "--cell" in extra else "onlstm"
    return [
        "logic",
        "train",
        "--data",
        str(data),
        "--out",
        str(out),
        *_flags_for([cell]),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--valid-every",
        "3",
        "--patience",
        "50",
        "--no-progress",
        *extra,
    ]


def test_train_then_eval_smoke(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(_train_args(tiny_data, run, "--cell", "lstm", "--seed", "5")) == 0
    assert {p.name for p in run.iterdir()} == {
        "config.json",
        "vocab.json",
        "history.json",
        "model.best.safetensors",
        "model.last.safetensors",
        "resume.safetensors",  # kept: a larger --epochs trains it further
        "steps.csv",  # the figures between validation checks
        "results.json",  # the run's result record
    }
    cfg, result = json.loads((run / "config.json").read_text()), json.loads((run / "results.json").read_text())
    assert cfg["kind"] == result["kind"] == KIND and result["status"] == "finished" and cfg["model"]["cell"] == "lstm"
    assert "status" not in cfg and "result" not in cfg  # one place for the result
    assert cfg["train"]["seed"] == 5 and cfg["train"]["max_train_ops"] == 6
    n_pool = sum(1 for k in range(7) for _ in open(tiny_data / f"train{k}"))
    assert cfg["data"]["n_train"] + cfg["data"]["n_valid"] == n_pool
    assert cfg["data"]["n_valid"] == round(0.1 * n_pool) and cfg["data"]["max_ops"] == 6
    hist = json.loads((run / "history.json").read_text())
    steps_per_epoch = math.ceil(cfg["data"]["n_train"] / 16)
    assert result["steps"] == 2 * steps_per_epoch and result["stopped_by"] == "epochs"
    assert [h["step"] for h in hist][-1] == 2 * steps_per_epoch  # a check after the last step
    best = max(hist, key=lambda h: (h["valid_accuracy"], -h["step"]))
    assert result["best_valid_accuracy"] == result["best"] == best["valid_accuracy"]
    assert result["best_step"] == best["step"]
    assert json.loads((run / "vocab.json").read_text()) == list(TOKENS)

    # the best checkpoint reproduces the recorded validation accuracy
    model, _ = load_classifier(run)
    tcfg = T.LogicTrainConfig.from_dict(cfg["train"])
    _, valid = D.split_train_valid(D.load_training_examples(tiny_data, tcfg), tcfg)
    # batched as the training's checks were: the same products, so a near tie cannot flip between the two
    flags = M.correct_flags(model, M.encode_examples(valid), tcfg.eval_batch_size)
    assert sum(flags) / len(flags) == pytest.approx(best["valid_accuracy"])

    capsys.readouterr()
    assert (
        main(["logic", "eval", "--checkpoint", str(run), "--data", str(tiny_data), "--lengths", "1-9", "--json"]) == 0
    )
    rep = json.loads(capsys.readouterr().out)
    assert rep["cell"] == "lstm" and sorted(rep["by_length"], key=int) == [str(k) for k in range(1, 10)]
    for v in rep["by_length"].values():
        assert v["total"] == 6 and v["accuracy"] == pytest.approx(v["correct"] / v["total"])
    seen = [rep["by_length"][str(k)] for k in range(1, 7)]
    assert rep["<=6"] == pytest.approx(sum(v["correct"] for v in seen) / 36)
    assert rep["all"] == pytest.approx(sum(v["correct"] for v in rep["by_length"].values()) / 54)
    direct = E.evaluate_examples(model, E.read_test_examples(tiny_data, "test", range(1, 10)))
    assert {int(k): v["correct"] for k, v in rep["by_length"].items()} == direct.correct

    assert main(["logic", "eval", "--checkpoint", str(run), "--data", str(tiny_data)]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[2].startswith("| lstm") and "majority label" in table and "pairs" in table

    # --split valid: the run's own hold-out, by length; pooled it is the recorded best validation accuracy
    capsys.readouterr()
    argv = ["logic", "eval", "--checkpoint", str(run), "--data", str(tiny_data), "--split", "valid", "--json"]
    assert main([*argv, "--lengths", "0-6"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert sum(v["total"] for v in rep["by_length"].values()) == len(valid) == cfg["data"]["n_valid"]
    assert sum(v["correct"] for v in rep["by_length"].values()) / len(valid) == pytest.approx(best["valid_accuracy"])
    assert main([*argv, "--lengths", "1-3"]) == 0
    short = json.loads(capsys.readouterr().out)["by_length"]
    assert short == {k: v for k, v in rep["by_length"].items() if k in ("1", "2", "3")}


def test_same_seed_same_training(tiny_data, tmp_path):
    cfg = T.LogicTrainConfig(epochs=1, batch_size=32, valid_every=2, progress=False, seed=2)
    r1 = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "a", log=None)
    r2 = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "b", log=None)
    strip = lambda h: [{k: v for k, v in x.items() if k != "seconds"} for x in h]
    assert strip(r1.history) == strip(r2.history)


def test_ctrl_c_keeps_the_best_checkpoint(tiny_data, tmp_path, monkeypatch):
    real_collate, calls = M.collate, {"n": 0}

    def interrupting_collate(batch):
        calls["n"] += 1
        if calls["n"] == 6:  # steps 1-3, one validation batch, step 4, then Ctrl-C in step 5
            raise KeyboardInterrupt
        return real_collate(batch)

    monkeypatch.setattr(M, "collate", interrupting_collate)
    run = tmp_path / "run"
    logs = []
    cfg = T.LogicTrainConfig(epochs=5, batch_size=16, valid_every=3, eval_batch_size=1000, progress=False)
    res = T.train(LogicModelConfig(**TINY), cfg, tiny_data, run, log=logs.append)
    assert res.interrupted and res.steps == 4 and res.best_step == 3
    result = json.loads((run / "results.json").read_text())
    assert result["status"] == "interrupted" and result["stopped_by"] == "interrupted"
    assert "aborted at step 4" in logs[-1] and "best checkpoint kept" in logs[-1]  # a KeyboardInterrupt in a step
    assert (
        f"continue with: onlstm logic train --out {tmp_path / 'run'} --resume" in logs[-1]
    )  # from the check at step 3
    best, last = LogicClassifier(LogicModelConfig(**TINY)), LogicClassifier(LogicModelConfig(**TINY))
    load_weights(run / "model.best.safetensors", best)
    load_weights(run / "model.last.safetensors", last)
    assert not torch.equal(best.mlp[-1].weight, last.mlp[-1].weight)  # last = after step 4, best = step 3
    monkeypatch.setattr(M, "collate", real_collate)
    model, _ = load_classifier(run)
    assert torch.equal(model.mlp[-1].weight, best.mlp[-1].weight)


def test_compare_smoke_and_reuse(tiny_data, tmp_path, capsys):
    out = tmp_path / "cmp"
    args = [
        "logic",
        "compare",
        "--data",
        str(tiny_data),
        "--out",
        str(out),
        *TINY_FLAGS,
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--no-progress",
        "--seeds",
        "0",
        "1",
        "--lengths",
        "1-9",
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    rep = json.loads((out / "compare.json").read_text())
    assert [(r["cell"], r["seed"]) for r in rep["runs"]] == [("onlstm", 0), ("lstm", 0), ("onlstm", 1), ("lstm", 1)]
    for r in rep["runs"]:
        run_cfg = json.loads((Path(r["run_dir"]) / "config.json").read_text())
        assert run_cfg["model"]["cell"] == r["cell"] and run_cfg["train"]["seed"] == r["seed"]
        assert {k: v for k, v in run_cfg["train"].items() if k != "seed"} == {
            k: v for k, v in rep["train"].items() if k != "seed"
        }  # same budget
        assert sum(v["total"] for v in r["test"]["by_length"].values()) == 54
    assert (out / "accuracy_by_length.png").stat().st_size > 1000
    assert (out / "training_curves.png").stat().st_size > 1000
    assert (out / "curves_by_ops.png").stat().st_size > 1000
    table = (out / "table.md").read_text()
    assert table.splitlines()[-1] == "Budget of every run: 1 epochs, patience 8 checks, whichever ends first"
    assert rep["budget"] == table.splitlines()[-1].split(": ", 1)[1]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:] if line.startswith("|")}
    assert set(rows) == {"onlstm", "lstm", "majority label", "pairs"}
    assert "±" in rows["onlstm"] and table.split("\n\nBudget")[0].strip() in text
    # second call: the finished runs are reused, not retrained -- also when a run was written before a
    # config field existed (its default applies) and when only display settings differ
    cfg_path = out / "lstm-seed1" / "config.json"
    old_cfg = json.loads(cfg_path.read_text())
    del old_cfg["model"]["mlp_activation"], old_cfg["train"]["adam_eps"]
    old_cfg["train"]["progress"] = True
    cfg_path.write_text(json.dumps(old_cfg))
    assert main(args) == 0
    assert capsys.readouterr().out.count("reusing the finished run") == 4
    # --split valid: the same runs scored on their own validation hold-outs (seed-specific), by length
    assert main([*args[:-2], "--lengths", "0-6", "--split", "valid"]) == 0
    assert capsys.readouterr().out.count("reusing the finished run") == 4
    rep = json.loads((out / "compare.json").read_text())
    assert rep["split"] == "valid"
    for r in rep["runs"]:
        run_cfg = json.loads((Path(r["run_dir"]) / "config.json").read_text())
        scored = r["test"]["by_length"].values()
        assert sum(v["total"] for v in scored) == run_cfg["data"]["n_valid"]
        assert sum(v["correct"] for v in scored) / run_cfg["data"]["n_valid"] == pytest.approx(
            json.loads((Path(r["run_dir"]) / "results.json").read_text())["best_valid_accuracy"]
        )
    # a setting that changes training: refused, the finished runs never trained over
    assert main([*args[:-4], "1", "--lengths", "1-9", "--lr", "0.0005"]) == 2  # seed 1 only
    err = capsys.readouterr().err
    assert "holds a run trained with other settings (cannot change train.lr (run: 0.001, given: 0.0005))" in err
    # a larger budget extends the finished runs (their first epoch is not trained again)
    assert main([*args[:-4], "0", "--lengths", "1-9", "--epochs", "2"]) == 0  # seed 0 only
    text = capsys.readouterr().out
    assert "reusing" not in text and text.count("extending the finished run in") == 2
    for r in json.loads((out / "compare.json").read_text())["runs"]:
        assert r["train"]["stopped_by"] == "epochs" and r["train"]["epochs"] == 2.0
    # a budget the runs never reached stops them where they stopped: reused
    assert main([*args[:-4], "0", "--lengths", "1-9", "--epochs", "2", "--max-steps", "1000"]) == 0
    assert capsys.readouterr().out.count("reusing the finished run") == 2


# --------------------------------------------------------------------------- settings and errors


def test_yaml_config_and_flag_priority(tiny_data, tmp_path, capsys):
    conf = tmp_path / "c.yaml"
    conf.write_text(
        f"data: {tiny_data}\nout: {tmp_path / 'y'}\nmodel: {{hidden_size: 16, chunk_size: 4, "
        f"emb_size: 8, mlp_hidden: 8}}\ntrain: {{epochs: 1, batch_size: 64, lr: 0.01}}\n"
    )
    assert main(["logic", "train", "--config", str(conf), "--lr", "0.002", "--no-progress"]) == 0
    cfg = json.loads((tmp_path / "y" / "config.json").read_text())
    assert cfg["model"]["mlp_hidden"] == 8 and cfg["train"]["batch_size"] == 64 and cfg["train"]["lr"] == 0.002
    conf.write_text("modle: {}\n")
    assert main(["logic", "train", "--config", str(conf)]) == 2
    assert "unknown keys ['modle']" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(p.name for p in (CONFIGS / "logic").glob("*.yaml")))
def test_shipped_configs_are_valid(name, tmp_path):
    from onlstm.config import Settings
    from onlstm.logic.config import CONFIG_KEYS, SECTIONS

    doc = Settings.resolve(SECTIONS, CONFIGS / "logic" / name, experiment="logic", keys=CONFIG_KEYS).given
    LogicModelConfig.from_dict(doc.get("model") or {})
    T.LogicTrainConfig.from_dict(doc.get("train") or {})
    assert set(doc.get("compare") or {}) <= {"cells", "seeds", "lengths"}


def test_shipped_configs_exist():
    assert (CONFIGS / "logic").is_dir() and list((CONFIGS / "logic").glob("*.yaml"))


def test_parse_buckets():
    assert parse_buckets("1-12") == list(range(1, 13))
    assert parse_buckets("0-2,7") == [0, 1, 2, 7]
    assert parse_buckets([7, 8]) == [7, 8]
    with pytest.raises(ConfigError):
        parse_buckets("a-b")


def test_clear_errors(tiny_data, tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main(_train_args(missing, tmp_path / "r")) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "onlstm logic generate" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(_train_args(empty, tmp_path / "r")) == 2
    assert "no train{k}/test{k} files" in capsys.readouterr().err
    assert main(["logic", "train", "--out", str(tmp_path / "r")]) == 2
    assert "no data directory" in capsys.readouterr().err

    # a run directory of another kind
    other = tmp_path / "lm"
    write_json(other / "config.json", {"kind": "language-model", "model": {}})
    (other / "model.best.safetensors").write_bytes(b"")
    assert main(["logic", "eval", "--checkpoint", str(other), "--data", str(tiny_data)]) == 2
    assert "kind 'language-model', not a logic classifier" in capsys.readouterr().err
    assert main(["logic", "eval", "--checkpoint", str(tmp_path / "none"), "--data", str(tiny_data)]) == 2
    assert "neither a run directory nor a .safetensors file" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match="no model.best.safetensors"):
        load_classifier(empty)

    # a checkpoint is fine but the data directory is missing
    run = tmp_path / "ok"
    T.train(
        LogicModelConfig(**TINY), T.LogicTrainConfig(epochs=1, batch_size=64, progress=False), tiny_data, run, log=None
    )
    assert main(["logic", "eval", "--checkpoint", str(run), "--data", str(missing)]) == 2
    assert "data directory" in capsys.readouterr().err
    assert main(["logic", "eval", "--checkpoint", str(run), "--data", str(tiny_data), "--lengths", "13-14"]) == 2
    assert "no file matches" in capsys.readouterr().err


SAMPLE_DIR = SHARED_DATA / "logic-sample"


@pytest.mark.skipif(not SAMPLE_DIR.is_dir(), reason="shared logic sample not present")
def test_trains_and_evaluates_on_the_original_layout(tmp_path, capsys):
    """The 200-line samples of the original train1/train4 files (names with a suffix) are read as they are."""
    run = tmp_path / "orig"
    assert (
        main(
            [
                "logic",
                "train",
                "--data",
                str(SAMPLE_DIR),
                "--out",
                str(run),
                *TINY_FLAGS,
                "--epochs",
                "1",
                "--batch-size",
                "64",
                "--no-progress",
            ]
        )
        == 0
    )
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["data"]["n_train"] + cfg["data"]["n_valid"] == 400 and cfg["data"]["max_ops"] == 4
    capsys.readouterr()
    assert (
        main(["logic", "eval", "--checkpoint", str(run), "--data", str(SAMPLE_DIR), "--split", "train", "--json"]) == 0
    )
    rep = json.loads(capsys.readouterr().out)
    assert {k: v["total"] for k, v in rep["by_length"].items()} == {"1": 200, "4": 200}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_asked_for_without_cuda_is_a_clear_error(tiny_data, tmp_path, capsys):
    assert main(_train_args(tiny_data, tmp_path / "r") + ["--device", "cuda"]) == 2
    assert "CUDA is not available; use --device cpu" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before any work
    with pytest.raises(ValueError, match="device must be auto, cpu, cuda or cuda:N"):
        T.LogicTrainConfig(device="gpu")


@pytest.mark.cuda
def test_train_and_eval_on_cuda_match_cpu(tiny_data, tmp_path):
    """The same seeded run without dropout (the CPU and CUDA generators differ) on CUDA and on CPU gives the
    same weights up to rounding, and evaluation on CUDA gives the CPU's predictions."""
    models = {}
    for dev in ("cpu", "cuda"):
        run = tmp_path / dev
        T.train(
            LogicModelConfig(**{**TINY, "dropout": 0.0}),
            T.LogicTrainConfig(epochs=1, batch_size=32, progress=False, device=dev),
            tiny_data,
            run,
            log=None,
        )
        models[dev], _ = load_classifier(run, "last", dev)
        assert next(models[dev].parameters()).device.type == dev
    for (name, p_cpu), p_gpu in zip(models["cpu"].named_parameters(), models["cuda"].parameters()):
        torch.testing.assert_close(p_gpu.cpu(), p_cpu, rtol=1e-3, atol=1e-4, msg=name)
    test = E.read_test_examples(tiny_data, "test", range(1, 10))
    cuda_on_cpu, _ = load_classifier(tmp_path / "cuda", "last", "cpu")
    assert E.predict(models["cuda"], test) == E.predict(cuda_on_cpu, test)


# --------------------------------------------------------------------------- resume


def _weights(path):
    from onlstm.checkpoint import read_safetensors

    return read_safetensors(path)[0]


def _interrupt_at(monkeypatch, n_collate_calls, how):
    """Make the n-th batch collation (training and validation batches count) send a real SIGINT (``signal``:
    handled, the step completes) or raise KeyboardInterrupt (``abort``: as a second Ctrl-C)."""
    import signal

    real, calls = M.collate, {"n": 0}

    def patched(batch):
        calls["n"] += 1
        if calls["n"] == n_collate_calls:
            if how == "signal":
                signal.raise_signal(signal.SIGINT)
            else:
                raise KeyboardInterrupt
        return real(batch)

    monkeypatch.setattr(M, "collate", patched)
    return lambda: monkeypatch.setattr(M, "collate", real)


# 24 pairs per length x 7 files (0-6), 6 of each in test, fewer for tiny buckets; batch 16, checks every 5 steps.
RESUME_CFG = dict(epochs=3, batch_size=16, valid_every=5, eval_batch_size=1000, progress=False, seed=4)


@pytest.mark.parametrize("how,call", [("signal", 4), ("signal", 9), ("abort", 9)])
def test_interrupted_then_resumed_equals_uninterrupted(tiny_data, tmp_path, monkeypatch, how, call):
    """Ctrl-C mid-epoch (or a hard abort, which resumes from the last check) then --resume gives the same
    weights, bit for bit, and the same validation history as a run that was never interrupted."""
    cfg = T.LogicTrainConfig(**RESUME_CFG)
    whole = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "whole", log=None)
    assert whole.stopped_by == "epochs" and whole.steps > 10

    restore = _interrupt_at(monkeypatch, call, how)
    run = tmp_path / "cut"
    first = T.train(LogicModelConfig(**TINY), cfg, tiny_data, run, log=None)
    restore()
    assert first.interrupted and 0 < first.steps < whole.steps
    assert json.loads((run / "results.json").read_text())["status"] == "interrupted"
    logs = []
    second = T.train(LogicModelConfig(**TINY), cfg, tiny_data, run, log=logs.append, resume=True)
    assert second.stopped_by == "epochs" and second.steps == whole.steps
    assert "resuming" in logs[1]  # after the run's summary
    strip = lambda h: [{k: v for k, v in x.items() if k != "seconds"} for x in h]
    assert strip(second.history) == strip(whole.history)
    for tag in ("best", "last"):
        a, b = _weights(tmp_path / "whole" / f"model.{tag}.safetensors"), _weights(run / f"model.{tag}.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), tag
    assert (run / RunDir.RESUME).exists()  # stopped by its epochs: kept, a larger --epochs trains it further


def test_resume_at_an_epoch_boundary(tiny_data, tmp_path, monkeypatch):
    """Stopped right after the last step of an epoch: the next epoch's shuffle must still be the one an
    uninterrupted run draws."""
    cfg = T.LogicTrainConfig(**{**RESUME_CFG, "valid_every": 1000})  # one check per epoch
    whole = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "whole", log=None)
    per_epoch = whole.steps // cfg.epochs
    restore = _interrupt_at(monkeypatch, per_epoch, "signal")  # the epoch's last training batch
    run = tmp_path / "cut"
    first = T.train(LogicModelConfig(**TINY), cfg, tiny_data, run, log=None)
    restore()
    assert first.interrupted and first.steps == per_epoch
    T.train(LogicModelConfig(**TINY), cfg, tiny_data, run, log=None, resume=True)
    a, b = _weights(tmp_path / "whole" / "model.last.safetensors"), _weights(run / "model.last.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_errors_and_cli(tiny_data, tmp_path, monkeypatch, capsys):
    cfg = T.LogicTrainConfig(**RESUME_CFG)
    run = tmp_path / "run"
    with pytest.raises(RunDirError, match="holds no config.json; it is not a run directory"):  # lm's, one resolver
        T.train(LogicModelConfig(**TINY), cfg, tiny_data, run, log=None, resume=True)
    restore = _interrupt_at(monkeypatch, 9, "signal")
    assert main(_train_args(tiny_data, run, "--seed", "4")) == 130  # Ctrl-C: exit status 130
    restore()
    assert (run / RunDir.RESUME).exists()
    with pytest.raises(RunDirError, match=r"cannot change .*train\.lr \(run: 0\.001, given: 0\.01\)"):
        T.train(LogicModelConfig(**TINY), replace(cfg, lr=0.01), tiny_data, run, log=None, resume=True)
    assert main(_train_args(tiny_data, run, "--seed", "4", "--resume")) == 0
    assert "resuming" in capsys.readouterr().out
    assert main(_train_args(tiny_data, run, "--seed", "4", "--resume")) == 2  # the same budget: nothing left
    assert "used up its budget (its 2 epochs reach epochs 2; pass a larger --epochs" in capsys.readouterr().err


def test_compare_plot_marks_the_trained_lengths_of_the_runs(tiny_data, tmp_path, monkeypatch):
    """The dashed 'unseen lengths' line of accuracy_by_length.png follows max_train_ops, not a fixed 6."""
    from onlstm.logic import compare as C
    from onlstm.logic import plots

    marks, real_plot = [], plots.plot_accuracy_by_length
    monkeypatch.setattr(plots, "plot_accuracy_by_length", lambda *a: marks.append(a[2]) or real_plot(*a))
    cfg = T.LogicTrainConfig(epochs=1, batch_size=32, max_train_ops=4, progress=False)
    res = C.compare(LogicModelConfig(**TINY, cell="lstm"), cfg, tiny_data, tmp_path, ["lstm"], log=None)
    assert marks == [4] and res.plot.stat().st_size > 1000


def test_compare_resumes_an_interrupted_run(tiny_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "cmp"
    args = [
        "logic",
        "compare",
        "--data",
        str(tiny_data),
        "--out",
        str(out),
        *_flags_for(["lstm"]),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--valid-every",
        "5",
        "--no-progress",
        "--cells",
        "lstm",
        "--lengths",
        "1-9",
    ]
    restore = _interrupt_at(monkeypatch, 9, "signal")
    assert main(args) == 130
    restore()
    capsys.readouterr()
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "resuming the interrupted run in" in text and "resuming " + str(out / "lstm-seed0") in text


def test_each_epoch_draws_a_new_batch_order(tiny_data, tmp_path, monkeypatch):
    """Epochs are reshuffled (the resume file replays an epoch's order; it must not freeze it)."""
    real, seen = M.collate, []

    def recording(batch):
        seen.append([(tuple(e[0]), tuple(e[1]), e[2]) for e in batch])
        return real(batch)

    monkeypatch.setattr(M, "collate", recording)
    cfg = T.LogicTrainConfig(**{**RESUME_CFG, "valid_every": 10_000, "eval_batch_size": 10_000})
    res = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "r", log=None)
    per_epoch = res.steps // cfg.epochs
    epochs = [
        [pair for batch in seen[e * per_epoch : (e + 1) * per_epoch] for pair in batch] for e in range(cfg.epochs)
    ]
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(epochs[2])  # every pair once per epoch
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2]  # in a new order


# --------------------------------------------------------------------------- curriculum and validation by length


def test_operator_count_of_an_encoded_pair_is_the_file_number_rule(tiny_data):
    exs = D.read_examples(tiny_data, split="train")
    assert {ex.max_ops for ex in exs} == set(range(10))
    assert [M.operator_count(e) for e in M.encode_examples(exs)] == [ex.max_ops for ex in exs]


def test_curriculum_bound_schedule():
    cfg = T.LogicTrainConfig(max_train_ops=6, curriculum_start=2, curriculum_steps=3)
    assert [T.curriculum_bound(cfg, s) for s in range(16)] == [2] * 3 + [3] * 3 + [4] * 3 + [5] * 3 + [6] * 4
    assert {T.curriculum_bound(T.LogicTrainConfig(max_train_ops=4), s) for s in range(50)} == {4}  # off
    with pytest.raises(ValueError, match=r"curriculum_start must be in \[0, max_train_ops=6\]"):
        T.LogicTrainConfig(max_train_ops=6, curriculum_start=7)
    off = T.LogicTrainConfig(max_train_ops=6, curriculum_start=2, curriculum_steps=0)  # 0 steps: off
    assert {T.curriculum_bound(off, s) for s in range(50)} == {6}
    with pytest.raises(ValueError, match=r"train.curriculum_steps must be >= 0, got -1"):
        T.LogicTrainConfig(curriculum_start=1, curriculum_steps=-1)


CURRICULUM_CFG = dict(
    RESUME_CFG, max_train_ops=6, curriculum_start=1, curriculum_steps=4, epochs=2, valid_every=3, batch_size=8
)


def _recorded_batches(monkeypatch) -> list[list[int]]:
    """Record the operator counts of every collated batch (training and validation)."""
    real, seen = M.collate, []

    def recording(batch):
        seen.append([M.operator_count(e) for e in batch])
        return real(batch)

    monkeypatch.setattr(M, "collate", recording)
    return seen


def test_curriculum_trains_on_short_pairs_first_then_every_pair_each_epoch(tiny_data, tmp_path, monkeypatch):
    cfg = T.LogicTrainConfig(**{**CURRICULUM_CFG, "valid_every": 10_000, "eval_batch_size": 10_000})
    seen = _recorded_batches(monkeypatch)
    res = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "r", log=None)
    train_batches = seen[:-1]  # the last collation is the final validation (one batch of every pair)
    bounds = [T.curriculum_bound(cfg, s) for s in range(res.steps)]
    assert len(train_batches) == res.steps
    assert all(max(b) <= k for b, k in zip(train_batches, bounds, strict=True))  # never longer than the stage
    assert max(train_batches[0] + train_batches[3]) == 1 and max(train_batches[4] + train_batches[7]) == 2
    # each stage's passes over its pairs draw every pair of the stage (4 steps of 8 cover ~the <=1 pairs)
    n_train = res.figures["n_train"]
    after = [k for b in train_batches[4 * 5 :] for k in b]  # from step 20 on: every length, whole epochs
    assert len(after) == cfg.epochs * n_train
    per_epoch = math.ceil(n_train / cfg.batch_size)
    assert res.epochs == round(res.steps / per_epoch, 3)
    # steps.csv counts epochs as the history and the result do (it counted the curriculum's short passes as epochs)
    with open(tmp_path / "r" / "steps.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert table and all(float(r["epoch"]) == pytest.approx(int(r["step"]) / per_epoch, abs=1e-3) for r in table)


def test_validation_is_recorded_by_operator_count(tiny_data, tmp_path):
    cfg = T.LogicTrainConfig(**CURRICULUM_CFG)
    res = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "r", log=None)
    run = T.LogicTask(LogicModelConfig(**TINY), cfg, tmp_path / "x", [], [], log=print)
    _, valid = D.split_train_valid(D.load_training_examples(tiny_data, cfg), cfg)
    counts = {str(k): sum(ex.max_ops == k for ex in valid) for k in range(7)}
    for rec in res.history:
        by_ops = rec["valid_by_ops"]
        assert set(by_ops) == {k for k, n in counts.items() if n}
        pooled = sum(by_ops[k] * counts[k] for k in by_ops) / len(valid)
        assert pooled == pytest.approx(rec["valid_accuracy"], abs=1e-12)
        assert rec["train_ops"] == T.curriculum_bound(cfg, rec["step"] - 1)
    # and the per-length numbers are those of the saved weights, pair by pair
    load_weights(tmp_path / "r" / "model.last.safetensors", run.model)
    # batched as the checks were (cfg.eval_batch_size): a near tie decided by other products could flip a pair
    flags = M.correct_flags(run.model, M.encode_examples(valid), batch_size=cfg.eval_batch_size)
    by_hand = {
        str(k): sum(f for f, ex in zip(flags, valid) if ex.max_ops == k) / counts[str(k)]
        for k in range(7)
        if counts[str(k)]
    }
    assert by_hand == res.history[-1]["valid_by_ops"]


# Collations: 3 training steps, then a validation batch, and so on; stages of 4 steps. Call 3 = step 3 (inside the
# first stage), 5 = step 4 (its last: the stage changes right after it), 7 = step 6, 12 = step 9 (third stage).
@pytest.mark.parametrize("call", [3, 5, 7, 12])
def test_interrupted_in_the_curriculum_then_resumed_equals_uninterrupted(tiny_data, tmp_path, monkeypatch, call):
    """Stopped inside a stage, at a stage change or after it: --resume replays the same passes, bit for bit."""
    cfg = T.LogicTrainConfig(**CURRICULUM_CFG)
    whole = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "whole", log=None)
    restore = _interrupt_at(monkeypatch, call, "signal")
    run = tmp_path / "cut"
    first = T.train(LogicModelConfig(**TINY), cfg, tiny_data, run, log=None)
    restore()
    assert first.interrupted
    second = T.train(LogicModelConfig(**TINY), cfg, tiny_data, run, log=None, resume=True)
    assert second.steps == whole.steps
    strip = lambda h: [{k: v for k, v in x.items() if k != "seconds"} for x in h]
    assert strip(second.history) == strip(whole.history)
    a, b = _weights(tmp_path / "whole" / "model.last.safetensors"), _weights(run / "model.last.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_curves_command_plots_runs_and_refuses_what_is_not_a_run(tiny_data, tmp_path, capsys):
    cfg = T.LogicTrainConfig(**CURRICULUM_CFG)
    for cell in ("onlstm", "lstm"):
        T.train(LogicModelConfig(cell=cell, **TINY), cfg, tiny_data, tmp_path / cell, log=None)
    assert (
        main(["logic", "curves", str(tmp_path / "onlstm"), str(tmp_path / "lstm"), "--out", str(tmp_path / "p")]) == 0
    )
    assert "curves_by_ops.png" in capsys.readouterr().out
    # again into the same folder: its figures are replaced only when asked
    args = [
        "logic",
        "curves",
        str(tmp_path / "lstm"),
        "--out",
        str(tmp_path / "p"),
        "--overwrite",
        "--at-steps",
        "7,1000",
    ]
    assert main(args) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| lstm seed 4")]
    history = json.loads((tmp_path / "lstm" / "history.json").read_text())
    at7 = [r for r in history if r["step"] <= 7][-1]  # checks every 3 steps: the one at step 6
    cells = rows[0].strip("| ").split(" | ")
    assert cells[:3] == ["lstm seed 4", "7", f"{at7['step']:,}"] and at7["step"] == 6
    assert cells[3:] == [f"{100 * at7['valid_by_ops'][str(k)]:.1f}" for k in range(7)] + [
        f"{100 * at7['valid_accuracy']:.1f}"
    ]
    assert rows[1].split(" | ")[2] == f"{history[-1]['step']:,}"  # past the end: the last check
    shutil.copytree(tmp_path / "lstm", tmp_path / "lstm-again")  # same cell and seed twice: named by folder
    assert main(["logic", "curves", str(tmp_path / "lstm"), str(tmp_path / "lstm-again"), *args[3:]]) == 0
    names = [r.split(" | ")[0].strip("| ") for r in capsys.readouterr().out.splitlines() if r.startswith("| lstm")]
    assert names == ["lstm", "lstm", "lstm-again", "lstm-again"]
    assert main([*args[:-1], "7,x"]) == 2 and "--at-steps" in capsys.readouterr().err
    for name in ("training_curves.png", "curves_by_ops.png"):
        assert (tmp_path / "p" / name).read_bytes()[:4] == b"\x89PNG"
    assert main(["logic", "curves", str(tmp_path / "nothing"), "--out", str(tmp_path / "q")]) == 2
    assert "nothing" in capsys.readouterr().err
    old = tmp_path / "onlstm" / "history.json"  # a run from before the records by length: said, not drawn empty
    write_json(old, [{k: v for k, v in r.items() if k != "valid_by_ops"} for r in json.loads(old.read_text())])
    assert main(["logic", "curves", str(tmp_path / "onlstm"), "--out", str(tmp_path / "r")]) == 2
    assert "by operator count" in capsys.readouterr().err


@pytest.mark.parametrize("max_steps", [7, 10, 15])
def test_max_steps_stops_after_exactly_that_many_updates(tiny_data, tmp_path, max_steps):
    """``max_steps`` ends the run after exactly N updates (checks every 5: N on a check, between two, and one
    more than a check), validates the last one, and trains what an unlimited run trains up to there."""
    cfg = T.LogicTrainConfig(**{**RESUME_CFG, "max_steps": max_steps})
    res = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "cut", log=None)
    assert res.stopped_by == "max_steps" and res.steps == max_steps
    assert res.history[-1]["step"] == max_steps
    assert [h["step"] for h in res.history] == sorted({*range(5, max_steps + 1, 5), max_steps})
    whole = T.train(LogicModelConfig(**TINY), T.LogicTrainConfig(**RESUME_CFG), tiny_data, tmp_path / "w", log=None)
    assert whole.steps > max_steps
    strip = lambda h: [{k: v for k, v in x.items() if k not in ("seconds", "best")} for x in h]
    assert strip(res.history[: max_steps // 5]) == strip(whole.history[: max_steps // 5])
    assert (tmp_path / "cut" / RunDir.RESUME).exists()  # stopped by its budget: a larger one trains it further


@pytest.mark.parametrize("call", [4, 9])
def test_max_steps_run_interrupted_then_resumed_equals_uninterrupted(tiny_data, tmp_path, monkeypatch, call):
    cfg = T.LogicTrainConfig(**{**RESUME_CFG, "max_steps": 12})
    whole = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "whole", log=None)
    restore = _interrupt_at(monkeypatch, call, "signal")
    first = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "cut", log=None)
    restore()
    assert first.interrupted
    second = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "cut", log=None, resume=True)
    assert second.stopped_by == whole.stopped_by == "max_steps" and second.steps == 12
    for tag in ("best", "last"):
        a, b = (
            _weights(tmp_path / "whole" / f"model.{tag}.safetensors"),
            _weights(tmp_path / "cut" / f"model.{tag}.safetensors"),
        )
        assert all(torch.equal(a[k], b[k]) for k in a), tag


@pytest.mark.parametrize("budget,first,then", [("max_steps", 10, 20), ("epochs", 1, 3)])
def test_a_run_stopped_by_its_budget_extends_to_the_run_a_larger_budget_trains(
    tiny_data, tmp_path, budget, first, then
):
    """Stopped by max_steps (on a check) or epochs (checks once per epoch), then --resume with a larger budget:
    the same history and weights, bit for bit, as one run with the larger budget."""
    base = {**RESUME_CFG, "valid_every": 5 if budget == "max_steps" else 0, "patience": 50}
    cfg = lambda n: T.LogicTrainConfig(**{**base, budget: n})
    whole = T.train(LogicModelConfig(**TINY), cfg(then), tiny_data, tmp_path / "whole", log=None)
    cut = tmp_path / "cut"
    assert T.train(LogicModelConfig(**TINY), cfg(first), tiny_data, cut, log=None).stopped_by == budget
    logs = []
    more = T.train(LogicModelConfig(**TINY), cfg(then), tiny_data, cut, log=logs.append, resume=True)
    assert "resuming" in logs[1] and more.stopped_by == whole.stopped_by == budget and more.steps == whole.steps
    strip = lambda h: [{k: v for k, v in x.items() if k != "seconds"} for x in h]
    assert strip(more.history) == strip(whole.history)
    for tag in ("best", "last"):
        a, b = _weights(tmp_path / "whole" / f"model.{tag}.safetensors"), _weights(cut / f"model.{tag}.safetensors")
        assert all(torch.equal(a[k], b[k]) for k in a), tag
    assert json.loads((cut / "config.json").read_text())["train"][budget] == then  # the header has the new budget


def test_stopped_in_its_last_step_resumes_to_its_end(tiny_data, tmp_path, monkeypatch):
    """Ctrl-C in the last update of the last epoch: its epochs are done, yet --resume is not refused for the used
    budget; it ends the run as an uninterrupted one (the final check) without another update."""
    cfg = T.LogicTrainConfig(**{**RESUME_CFG, "epochs": 1, "valid_every": 1000})  # one check, after the epoch
    whole = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "whole", log=None)
    restore = _interrupt_at(monkeypatch, whole.steps, "signal")  # the last training batch
    first = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "cut", log=None)
    restore()
    assert first.interrupted and first.steps == whole.steps and not first.history
    second = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "cut", log=None, resume=True)
    assert second.stopped_by == "epochs" and second.steps == whole.steps
    strip = lambda h: [{k: v for k, v in x.items() if k != "seconds"} for x in h]
    assert strip(second.history) == strip(whole.history)


def test_an_interrupted_run_resumed_with_a_smaller_budget_ends_without_an_update(tiny_data, tmp_path, monkeypatch):
    cfg = T.LogicTrainConfig(**RESUME_CFG)
    restore = _interrupt_at(monkeypatch, 9, "signal")
    first = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "run", log=None)
    restore()
    assert first.interrupted
    before = _weights(tmp_path / "run" / "model.last.safetensors")
    done = T.train(LogicModelConfig(**TINY), replace(cfg, max_steps=2), tiny_data, tmp_path / "run", resume=True)
    assert done.stopped_by == "max_steps" and done.steps == first.steps > 2
    after = _weights(tmp_path / "run" / "model.last.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_used_up_budget_or_patience_is_not_resumed(tiny_data, tmp_path):
    cfg = T.LogicTrainConfig(**{**RESUME_CFG, "max_steps": 10})
    run = tmp_path / "run"
    T.train(LogicModelConfig(**TINY), cfg, tiny_data, run, log=None)
    for smaller in (10, 7):  # resuming would train past the budget asked for
        with pytest.raises(RunDirError, match=rf"its 10 updates reach max_steps {smaller}; pass a larger"):
            T.train(LogicModelConfig(**TINY), replace(cfg, max_steps=smaller), tiny_data, run, log=None, resume=True)
    with pytest.raises(RunDirError, match="cannot change train.lr"):  # the budget only
        T.train(LogicModelConfig(**TINY), replace(cfg, max_steps=20, lr=0.01), tiny_data, run, log=None, resume=True)
    # Adam steps of 1e-12 are below float32 resolution: the weights and the accuracy stay, patience ends the run
    stale = T.LogicTrainConfig(**{**RESUME_CFG, "patience": 1, "lr": 1e-12, "min_lr": 0.0})
    done = T.train(LogicModelConfig(**TINY), stale, tiny_data, tmp_path / "p", log=None)
    assert done.stopped_by == "patience" and not (tmp_path / "p" / RunDir.RESUME).exists()
    with pytest.raises(RunDirError, match="ended by patience, which is final; train into a new --out"):
        T.train(LogicModelConfig(**TINY), replace(stale, epochs=9), tiny_data, tmp_path / "p", log=None, resume=True)
    (run / RunDir.RESUME).unlink()  # as a run finished before runs kept the file
    with pytest.raises(RunDirError, match="has no resume.safetensors .* but holds results"):
        T.train(LogicModelConfig(**TINY), replace(cfg, max_steps=20), tiny_data, run, log=None, resume=True)


def test_max_steps_flag_and_its_errors(tiny_data, tmp_path, capsys):
    assert main(_train_args(tiny_data, tmp_path / "run", "--max-steps", "3")) == 0
    result = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (result["steps"], result["status"], result["stopped_by"]) == (3, "stopped", "max_steps")
    assert main(_train_args(tiny_data, tmp_path / "bad", "--max-steps", "0")) == 2
    assert "max_steps must be >= 1" in capsys.readouterr().err


def test_bf16_precision_trains_close_to_fp32_with_float32_evaluation(tiny_data, tmp_path, monkeypatch):
    """``precision=bf16``: the steps under bfloat16 autocast (the classifier's logits seen in bfloat16 while
    training, float32 while validating), the run ending near the float32 one. The CPU is accepted by injection (it
    asks the CPU: tests/lm/test_lm_runtime.py), the kernel's bfloat16 products forced on."""
    from onlstm.nn import capabilities

    monkeypatch.setattr(capabilities, "bf16_products_error", lambda: None)
    monkeypatch.setenv("ONLSTM_CPU_BF16", "on")
    cfg = T.LogicTrainConfig(epochs=2, batch_size=32, progress=False, seed=4)
    full = T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "fp32", log=None)
    seen: set = set()
    built = LogicClassifier.__init__

    def watched(self, *args, **kwargs):  # every classifier the run builds reports its logits' dtype
        built(self, *args, **kwargs)
        self.mlp.register_forward_hook(lambda _m, _i, out: seen.add((torch.is_autocast_enabled("cpu"), out.dtype)))

    monkeypatch.setattr(LogicClassifier, "__init__", watched)
    half = T.train(LogicModelConfig(**TINY), replace(cfg, precision="bf16"), tiny_data, tmp_path / "bf16", log=None)
    assert (True, torch.bfloat16) in seen and (False, torch.float32) in seen  # trained in bf16, validated in fp32
    a, b = full.history[-1], half.history[-1]
    # bfloat16 parts the trajectories at once. Measured: 6.2e-5 of the loss apart after these 2 epochs on a Zen 4's
    # AVX-512 BF16 products, the same under ATEN_CPU_CAPABILITY default, avx2 and avx512 and on 1 and 2 threads
    # (2026-12-04). 2% is 300 times that and five of bfloat16's roundings (2**-8), so other CPUs' summation orders
    # pass, while products computed wrongly would not.
    assert abs(a["train_loss"] - b["train_loss"]) < 0.02 * a["train_loss"], (a, b)


def test_bf16_precision_is_refused_where_the_cpu_has_no_bfloat16_products(tiny_data, tmp_path, monkeypatch):
    from onlstm.nn import capabilities

    monkeypatch.setattr(capabilities, "bf16_products_error", lambda: "not available on this CPU: (injected)")
    cfg = T.LogicTrainConfig(epochs=1, batch_size=32, progress=False, precision="bf16")
    with pytest.raises(ConfigError, match=r"train.precision=bf16: not available on this CPU: \(injected\); train"):
        T.train(LogicModelConfig(**TINY), cfg, tiny_data, tmp_path / "r", log=None)
    assert not (tmp_path / "r" / "results.json").exists()
