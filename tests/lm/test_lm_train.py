"""Language-model training and evaluation: exact resume, NT-ASGD averaging, learning-rate scaling,
perplexity protocols, the commands, and clear errors for bad run directories and checkpoints."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from onlstm.checkpoint import CheckpointError, read_json, state_dict_for_saving
from onlstm.cli import main
from onlstm.data.reader import TextReader
from onlstm.data.vocab import Vocab
from onlstm.device import StopRequest
from onlstm.errors import InputError
from onlstm.lm import LanguageModel, LMConfig
from onlstm.lm.config import explicit_settings
from onlstm.lm.data import batchify, bptt_schedule
from onlstm.lm.evaluate import perplexity, stream_loss
from onlstm.lm.ntasgd import nonmono_switch
from onlstm.lm.train import RunDirError, train
from onlstm.runs import RunDir
from support import TINY_LM, quiet, with_train, write_corpus

TINY = TINY_LM


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def settings(**train) -> dict:
    model = {k: train.pop(k) for k in list(train) if k in ("cell", "hidden_sizes", "emb_size")}
    return explicit_settings(TINY, {"train": train, "model": model})


def tensors(run: Path, name: str) -> dict:
    return load_file(str(run / f"{name}.safetensors"))


def assert_same_tensors(a: dict, b: dict, exact: bool = True, atol: float = 0.0):
    assert a.keys() == b.keys()
    for k in a:
        if exact:
            assert torch.equal(a[k], b[k]), k
        else:
            torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0, msg=k)


def log_rows(run: Path) -> list[dict]:
    with open(run / "log.csv") as f:
        return [
            {k: v for k, v in row.items() if k not in ("epoch_seconds", "tokens_per_s", "elapsed_s")}
            for row in csv.DictReader(f)
        ]


def steps_in_epoch(corpus: Path, s: dict, epoch: int) -> int:
    from onlstm.data.ptb import load_corpus
    from onlstm.lm.config import load_config

    t = load_config(TINY, {"train": s["train"]}).train
    rows = batchify(load_corpus(corpus)["train"].ids, t.batch_size).shape[0]
    return len(
        bptt_schedule(rows, t.bptt, t.seed, epoch, t.variable_bptt, t.bptt_short_prob, t.bptt_std, t.min_seq_len)
    )


# --------------------------------------------------------------------------- resume


VARIANTS = {
    "onlstm-sgd-averaging": dict(asgd_start_epoch=2),
    "lstm-momentum": dict(cell="lstm", momentum=0.5),
    "gru-adam": dict(cell="gru", optimizer="adam", lr=0.003),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_resume_mid_epoch_equals_uninterrupted(tmp_path, corpus, variant):
    s = settings(**VARIANTS[variant])
    full = train(tmp_path / "full", corpus, s, log=quiet)
    assert full.status == "finished"
    stop_at = steps_in_epoch(corpus, s, 1) + 3  # in epoch 2, after averaging started
    part = train(tmp_path / "part", corpus, with_train(s, max_steps=stop_at), log=quiet)
    assert part.status == "stopped"
    p = part.progress  # one epoch done, 3 batches into the second
    assert (p.epoch, p.pos, p.step, part.steps) == (1, 3, stop_at, stop_at)
    if variant.startswith("onlstm"):
        assert p.task.averaging and p.task.avg_count == 3
    saved = tensors(tmp_path / "part", "resume")
    assert any(k.startswith("hidden.") for k in saved)  # the carried state is part of the checkpoint
    resumed = train(tmp_path / "part", corpus, with_train(s, max_steps=None), resume=True, log=quiet)
    assert resumed.status == "finished"
    for name in ("model.last", "model.best", "resume"):
        assert_same_tensors(tensors(tmp_path / "full", name), tensors(tmp_path / "part", name))
    assert log_rows(tmp_path / "full") == log_rows(tmp_path / "part")
    assert (
        read_json(tmp_path / "full" / "results.json")["test"] == read_json(tmp_path / "part" / "results.json")["test"]
    )


def test_ctrl_c_saves_a_checkpoint_that_resumes_exactly(tmp_path, corpus):
    s = settings(momentum=0.3)
    full = train(tmp_path / "full", corpus, s, log=quiet)

    def interrupt(trainer):
        if trainer.prog.step == 5:
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C sends; the handler only sets a flag

    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN under a shell's background job
    part = train(tmp_path / "part", corpus, s, on_step=interrupt, log=quiet)
    assert part.status == "interrupted" and part.steps == 5
    assert signal.getsignal(signal.SIGINT) is before  # the handler in place before the run is restored
    train(tmp_path / "part", corpus, s, resume=True, log=quiet)
    assert full.steps == read_json(tmp_path / "part" / "results.json")["steps"]
    assert_same_tensors(tensors(tmp_path / "full", "model.last"), tensors(tmp_path / "part", "model.last"))
    assert_same_tensors(tensors(tmp_path / "full", "resume"), tensors(tmp_path / "part", "resume"))


def test_ctrl_c_during_validation_resumes_with_that_validation(tmp_path, corpus, monkeypatch):
    """Ctrl-C while the first epoch is validated: the resume file holds the whole epoch, its validation is
    done first on resume, and the run ends as an uninterrupted one (also one stopped by max_steps at the
    epoch's last step)."""
    from onlstm.lm import train as lm_train

    s = settings()
    train(tmp_path / "full", corpus, s, log=quiet)
    real = lm_train.Trainer.validate

    def interrupted(self):
        signal.raise_signal(signal.SIGINT)  # the handler sets the flag the evaluation checks
        return real(self)

    monkeypatch.setattr(lm_train.Trainer, "validate", interrupted)
    part = train(tmp_path / "part", corpus, s, log=quiet)
    monkeypatch.undo()
    p, n1 = part.progress, steps_in_epoch(corpus, s, 1)
    assert part.status == "interrupted" and (p.epoch, p.pos, p.check_due, part.steps, part.history) == (
        1,
        0,
        True,
        n1,
        [],
    )
    assert train(tmp_path / "part", corpus, s, resume=True, log=quiet).status == "finished"
    at_end = train(tmp_path / "end", corpus, with_train(s, max_steps=n1), log=quiet)
    assert at_end.status == "stopped" and len(at_end.history) == 1
    train(tmp_path / "end", corpus, with_train(s, max_steps=None), resume=True, log=quiet)
    for run in ("part", "end"):
        assert log_rows(tmp_path / "full") == log_rows(tmp_path / run)
        for name in ("model.last", "model.best", "resume"):
            assert_same_tensors(tensors(tmp_path / "full", name), tensors(tmp_path / run, name))


def test_a_finished_run_extended_by_an_epoch_equals_a_longer_run(tmp_path, corpus):
    """A finished run resumed with more epochs (--resume --epochs 3) ends as a run given those epochs at the
    start: the final test scores the best weights with a model of its own, whose building must leave the random
    state the resume file keeps (dropout's draws in the next epoch) as training left it."""
    s = settings(epochs=3)
    train(tmp_path / "full", corpus, s, log=quiet)
    assert train(tmp_path / "part", corpus, with_train(s, epochs=2), log=quiet).status == "finished"
    assert train(tmp_path / "part", corpus, s, resume=True, log=quiet).status == "finished"
    assert log_rows(tmp_path / "full") == log_rows(tmp_path / "part")
    for name in ("model.last", "model.best", "resume"):
        assert_same_tensors(tensors(tmp_path / "full", name), tensors(tmp_path / "part", name))


def test_time_limit_stops_with_a_resume_file_counts_every_session_and_resumes_exactly(
    tmp_path, corpus, monkeypatch, capsys
):
    """train.time_limit (minutes) is the engine's wall-time budget: the run stops after the step that passes it,
    writes the resume file without validating (as max_steps), counts the time of earlier sessions, and a resume
    with a larger limit ends as an uninterrupted run. The engine's clock is faked: 10 s per step."""
    from types import SimpleNamespace

    from onlstm.runs import engine

    s, clock = settings(), [0.0]
    full = train(tmp_path / "full", corpus, s, log=quiet)
    monkeypatch.setattr(engine, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    def tick(trainer):
        clock[0] += 10.0

    assert steps_in_epoch(corpus, s, 1) > 5  # the limit falls inside the first epoch
    part = train(tmp_path / "part", corpus, settings(time_limit=0.5), on_step=tick, log=quiet)  # 30 s
    assert part.status == "stopped" and (part.steps, part.history) == (4, [])  # 40 s > 30 s
    assert (tmp_path / "part" / "resume.safetensors").exists()
    # the first session's 40 s count: the limit is used up, so a resume under it is refused (one rule with logic's)
    with pytest.raises(RunDirError, match=r"used up its budget \(its 0\.7 min reach time_limit 0\.5; pass a larger"):
        train(tmp_path / "part", corpus, settings(time_limit=0.5), resume=True, on_step=tick, log=quiet)
    done = train(tmp_path / "part", corpus, settings(time_limit=600.0), resume=True, on_step=tick, log=quiet)
    assert done.status == "finished" and done.steps == full.steps
    assert log_rows(tmp_path / "full") == log_rows(tmp_path / "part")
    for name in ("model.last", "model.best", "resume"):
        assert_same_tensors(tensors(tmp_path / "full", name), tensors(tmp_path / "part", name))
    argv = ["lm", "train", "--config", str(TINY), "--data-dir", str(corpus), "--out", str(tmp_path / "bad")]
    for bad, why in (("0", "> 0, got 0.0"), ("-1", "> 0, got -1.0"), ("nan", "a finite number, got nan")):
        assert main([*argv, "--time-limit", bad]) == 2
        assert f"train.time_limit must be {why}" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


# --------------------------------------------------------------------------- the recipe


def test_averaging_lr_scaling_and_evaluation_weights(tmp_path, corpus):
    s = settings(asgd_start_epoch=2)
    seen = {"iterates": [], "lr_checked": 0}

    def check(trainer):
        prog, cfg = trainer.prog, trainer.cfg  # called after an update: prog.pos >= 1
        sched = bptt_schedule(
            trainer.n_rows,
            cfg.bptt,
            cfg.seed,
            prog.epoch + 1,
            cfg.variable_bptt,
            cfg.bptt_short_prob,
            cfg.bptt_std,
            cfg.min_seq_len,
        )
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(cfg.lr * sched[prog.pos - 1].lr_scale)
        seen["lr_checked"] += 1
        if prog.task.averaging:
            seen["iterates"].append([p.detach().clone() for p in trainer.params])
            # ASGD(t0=0, lambd=0)'s ax: the first iterate after one step, then the mean from the second on
            iterates = seen["iterates"][1:] or seen["iterates"]
            mean = [torch.stack(ps).mean(0) for ps in zip(*iterates)]
            for a, m in zip(trainer.averaged_weights(), mean):
                torch.testing.assert_close(a, m, atol=1e-6, rtol=1e-5)
            seen["names"] = trainer.param_names

    out = train(tmp_path / "run", corpus, s, on_step=check, log=quiet)
    assert seen["lr_checked"] == out.steps
    assert len(seen["iterates"]) == steps_in_epoch(corpus, s, 2) == out.progress.task.avg_count
    res = tensors(tmp_path / "run", "resume")
    last = tensors(tmp_path / "run", "model.last")
    for i, n in enumerate(seen["names"]):  # evaluation (and model.last) use the averaged weights, ASGD's ax
        assert torch.equal(last[n], res[f"optim.{i}.ax"])
        assert not torch.equal(res[f"model.{n}"], res[f"optim.{i}.ax"])
    rows = log_rows(tmp_path / "run")
    assert [r["averaging"] for r in rows] == ["0", "1"]


@pytest.mark.parametrize(
    "history, loss, nonmono, expected",
    [
        ([5.0, 4.0, 3.0], 3.5, 3, False),  # not more than nonmono epochs yet
        ([5.0, 4.0, 3.0, 3.1], 3.05, 3, False),  # 3.05 < min(history[:-3]) = 5.0
        ([3.0, 4.0, 3.5, 3.2], 3.1, 3, True),  # 3.1 > min([3.0])
        ([3.0, 4.0, 3.5, 3.2], 2.9, 3, False),  # improved on everything
        ([3.0, 2.0, 3.5, 3.2, 3.3], 2.5, 3, True),  # 2.5 > min([3.0, 2.0]) = 2.0
    ],
)
def test_nonmono_rule(history, loss, nonmono, expected):
    assert nonmono_switch(history, loss, nonmono) is expected


def test_nonmono_switch_in_training(tmp_path, corpus, monkeypatch):
    """NT-ASGD driven by a validation sequence the test controls (injected losses, so no float trajectory of
    training matters): with nonmono=1 the losses 5, 4, 6 trigger the switch at the third check, averaging
    starts the epoch after it, and from then on evaluation and model.last use ASGD's running average."""
    import onlstm.lm.train as lm_train
    from onlstm.lm.evaluate import Perplexity

    injected = [5.0, 4.0, 6.0, 3.0, 2.0]
    seen: dict = {"trainer": None, "calls": []}

    def fake_perplexity(model, ids, protocol, batch_size, bptt, *args, **kwargs):
        tr = seen["trainer"]
        avg = tr.averaged_weights() if tr is not None else None
        if avg is not None:  # validation reads the averaged weights, not the current iterate
            assert all(torch.equal(p, a) for p, a in zip(model.parameters(), avg))
        seen["calls"].append(avg is not None)
        return Perplexity(injected[len(seen["calls"]) - 1], 10, protocol, batch_size, bptt)

    def grab(trainer):
        seen["trainer"] = trainer

    monkeypatch.setattr(lm_train, "perplexity", fake_perplexity)
    s = settings(epochs=5, nonmono=1, final_test=False)
    out = train(tmp_path / "run", corpus, s, on_step=grab, log=quiet)
    p = out.progress.task
    expect_switch = next(i for i in range(5) if nonmono_switch(injected[:i], injected[i], 1))
    assert expect_switch == 2  # worked by hand: 6 > min(5) with one check held back
    assert [h["averaging"] for h in out.history] == [0, 0, 0, 1, 1]
    assert seen["calls"] == [False, False, False, True, True]
    assert p.averaging and p.avg_count > 0
    tr, last = seen["trainer"], tensors(tmp_path / "run", "model.last")
    current = {k: v.clone() for k, v in state_dict_for_saving(tr.model).items()}
    with tr.eval_weights():
        averaged = {k: v.clone() for k, v in state_dict_for_saving(tr.model).items()}
    assert_same_tensors(last, averaged)  # model.last holds the running average ...
    assert any(not torch.equal(last[k], current[k]) for k in last)  # ... which is not the current iterate


def test_patience_counts_the_averaged_weights_checks_only(tmp_path, corpus, monkeypatch):
    """The study's stopping rule (injected losses): SGD epochs that do not improve never count (4.5 and 6 below
    come before averaging, the second triggers it); once averaging started, two epochs in a row without a new
    best stop the run (patience 2), which is final, and the final test still scores the best weights."""
    import onlstm.lm.train as lm_train
    from onlstm.lm.evaluate import Perplexity

    injected = iter([5.0, 4.0, 4.5, 6.0, 3.0, 3.5, 3.2, 2.0, 1.0])
    real, tested = lm_train.perplexity, {}

    def fake_perplexity(model, ids, protocol, batch_size, bptt, *args, **kwargs):
        if protocol != "batched" or kwargs.get("ctx") is None:  # the final test: computed for real
            tested.update({k: v.clone() for k, v in state_dict_for_saving(model).items()})  # the weights it read
            return real(model, ids, protocol, batch_size, bptt, *args, **kwargs)
        return Perplexity(next(injected), 10, protocol, batch_size, bptt)

    monkeypatch.setattr(lm_train, "perplexity", fake_perplexity)
    out = train(tmp_path / "run", corpus, settings(epochs=9, nonmono=1, patience=2), log=quiet)
    assert [h["averaging"] for h in out.history] == [0, 0, 0, 0, 1, 1, 1]
    assert (out.status, out.stopped_by, out.epochs) == ("finished", "patience", 7)
    # the final test ran on the best weights (epoch 5's), not on the last ones (epoch 7's)
    assert_same_tensors(tensors(tmp_path / "run", "model.best"), tested)
    assert any(not torch.equal(v, tested[k]) for k, v in tensors(tmp_path / "run", "model.last").items())
    assert not (tmp_path / "run" / RunDir.RESUME).exists()  # final: nothing to resume
    with pytest.raises(RunDirError, match="ended by patience"):
        train(tmp_path / "run", corpus, settings(), resume=True, log=quiet)


# --------------------------------------------------------------------------- evaluation


def tiny_model(vocab=11, cell="onlstm", seed=0) -> LanguageModel:
    torch.manual_seed(seed)
    return LanguageModel(LMConfig(vocab_size=vocab, emb_size=8, hidden_sizes=[12, 8], chunk_size=4, cell=cell)).eval()


def test_uniform_model_has_perplexity_vocab_size():
    m = tiny_model()
    with torch.no_grad():
        m.embedding.weight.zero_()  # tied decoder: all logits 0
    ids = torch.randint(0, 11, (103,))
    p = perplexity(m, ids, "paper", bptt=7)
    assert p.ppl == pytest.approx(11.0) and p.tokens == 102 and p.dropped == 0
    b = perplexity(m, ids, "batched", batch_size=4, bptt=7)
    assert b.ppl == pytest.approx(11.0) and b.tokens == 4 * (25 - 1) and b.dropped == 3


def test_state_is_carried_across_segments():
    m = tiny_model()
    ids = torch.randint(0, 11, (60,))
    one = perplexity(m, ids, "paper", bptt=1000)
    seg = perplexity(m, ids, "paper", bptt=5)
    assert seg.loss == pytest.approx(one.loss, rel=1e-6)
    cold = sum(stream_loss(m, batchify(ids[i : i + 5], 1), 1000)[0] for i in range(0, 55, 5))
    assert abs(cold - one.loss * one.tokens) > 1e-3  # restarting from zero would change the result


def test_batched_protocol_is_the_columns_read_alone():
    m = tiny_model(cell="lstm")
    ids = torch.randint(0, 11, (83,))
    b = perplexity(m, ids, "batched", batch_size=4, bptt=6)
    cols = batchify(ids, 4)
    alone = [stream_loss(m, cols[:, j : j + 1], 6) for j in range(4)]
    assert b.loss * b.tokens == pytest.approx(sum(s for s, _ in alone), rel=1e-6)
    assert b.tokens == sum(n for _, n in alone)


# --------------------------------------------------------------------------- commands and run directories


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, corpus) -> Path:
    out = tmp_path_factory.mktemp("run") / "tiny"
    assert (
        main(
            [
                "lm",
                "train",
                "--config",
                str(TINY),
                "--data-dir",
                str(corpus),
                "--out",
                str(out),
                "--epochs",
                "1",
                "--cell",
                "lstm",
            ]
        )
        == 0
    )
    return out


def test_run_directory_layout_is_data_only(finished_run):
    names = sorted(p.name for p in finished_run.iterdir())
    assert names == [
        "config.json",
        "history.json",
        "log.csv",
        "model.best.safetensors",
        "model.last.safetensors",
        "results.json",
        "resume.safetensors",
        "steps.csv",
        "vocab.json",
    ]
    config = read_json(finished_run / "config.json")
    assert config["kind"] == "lm" and config["train"]["epochs"] == 1
    cfg = LMConfig.from_dict(config["model"])  # how other commands load the model
    assert cfg.cell == "lstm" and cfg.vocab_size == len(Vocab.load(finished_run / "vocab.json"))
    # how the model reads English: the convention of its training vocabulary, saved with it
    assert config["text"] == TextReader.detect(Vocab.load(finished_run / "vocab.json").words).to_dict()
    _run, weights = RunDir.find(finished_run)
    assert weights.name == "model.best.safetensors"


def test_eval_command_matches_the_final_test(finished_run, corpus, capsys):
    capsys.readouterr()
    assert (
        main(
            [
                "lm",
                "eval",
                "--checkpoint",
                str(finished_run),
                "--data-dir",
                str(corpus),
                "--split",
                "test",
                "--protocol",
                "both",
                "--bptt",
                "8",
                "--batch-size",
                "2",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    results = read_json(finished_run / "results.json")
    assert out["paper"]["loss"] == pytest.approx(results["test"]["loss"], rel=1e-9)
    assert out["paper"]["batch_size"] == 1 and out["batched"]["batch_size"] == 2
    assert (
        main(
            [
                "lm",
                "eval",
                "--checkpoint",
                str(finished_run),
                "--split",
                "valid",
                "--protocol",
                "batched",
                "--batch-size",
                "2",
                "--bptt",
                "8",
            ]
        )
        == 0
    )  # data dir recorded in the run
    text = capsys.readouterr().out
    assert f"{results['valid']['ppl']:.2f}" in text


@pytest.fixture(scope="module")
def run_without_best(tmp_path_factory, corpus) -> Path:
    """A run stopped before its first validation: model.last, no model.best."""
    run = tmp_path_factory.mktemp("stopped") / "run"
    assert train(run, corpus, with_train(settings(), max_steps=3), log=quiet).status == "stopped"
    assert (run / "model.last.safetensors").exists() and not (run / "model.best.safetensors").exists()
    (run.parent / "s.txt").write_text("the cat sat\n")
    return run


OPENING = {  # the commands that open a run by its best weights by default, as argv for a run and a sentence file
    "lm eval": lambda run, text: ["lm", "eval", "--checkpoint", str(run), "--bptt", "8"],
    "lm surprisal": lambda run, text: ["lm", "surprisal", "--checkpoint", str(run), str(text)],
    "parsing parse": lambda run, text: ["parsing", "parse", "--checkpoint", str(run), str(text)],
    "syneval": lambda run, text: ["syneval", "--checkpoint", str(run), "--data", str(text.parent / "pairs.tsv")],
}


@pytest.mark.parametrize("command", list(OPENING))
def test_a_run_without_best_weights_is_opened_with_its_last_ones_and_says_so(run_without_best, capsys, command):
    """Asked (by default) for the best weights of a run that has none yet, a command uses model.last and says so
    in one line of stderr: its scores are not the best weights'. Asked for the last ones, nothing to say."""
    text = run_without_best.parent / "s.txt"
    (text.parent / "pairs.tsv").write_text("simple_agrmt\tthe cat sat\tthe cat sat on\n")
    argv = OPENING[command](run_without_best, text)
    assert main(argv) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "note:" in line]
    why = "(no validation check yet): using model.last.safetensors"
    assert notes == [f"onlstm {command}: note: no best weights in {run_without_best} {why}"]
    if command != "parsing parse":  # it has no --weights
        assert main([*argv, "--weights", "last"]) == 0
        assert "note:" not in capsys.readouterr().err


@pytest.mark.parametrize("command", ["lm eval", "lm surprisal", "syneval", "export"])
def test_weights_chosen_for_a_checkpoint_naming_other_weights_are_refused(finished_run, tmp_path, capsys, command):
    """--weights chooses among a run directory's weights: with a --checkpoint that names one file of other weights
    it was ignored without a word; it is refused in one line before any work. The file it names itself passes."""
    best, text = finished_run / "model.best.safetensors", tmp_path / "s.txt"
    text.write_text("the cat sat\n")
    (tmp_path / "pairs.tsv").write_text("simple_agrmt\tthe cat sat\tthe cat sat on\n")
    argv = {"export": lambda run, _: ["export", "--checkpoint", str(run), "--to", str(tmp_path / "shared")]}.get(
        command, OPENING.get(command)
    )(best, text)
    assert main([*argv, "--weights", "last"]) == 2
    err = capsys.readouterr().err
    expected = (
        f"--weights last chooses among a run directory's weights, but --checkpoint {best} is one weights file; "
        f"give the run directory ({finished_run}) with --weights last, or the file without --weights"
    )
    assert err.count("\n") == 1 and expected in err
    assert not (tmp_path / "shared").exists()
    assert main([*argv, "--weights", "best"]) == 0
    assert main(argv) == 0


def test_existing_run_needs_resume(finished_run, corpus, capsys):
    rc = main(["lm", "train", "--config", str(TINY), "--data-dir", str(corpus), "--out", str(finished_run)])
    assert rc == 2 and "already holds a run; pass --resume" in capsys.readouterr().err


def test_resume_refuses_changed_settings_and_other_data(finished_run, corpus, tmp_path, capsys):
    rc = main(
        [
            "lm",
            "train",
            "--config",
            str(TINY),
            "--data-dir",
            str(corpus),
            "--out",
            str(finished_run),
            "--resume",
            "--lr",
            "3",
            "--cell",
            "lstm",
        ]
    )
    assert rc == 2 and "cannot change train.lr (run: 10.0, given: 3.0)" in capsys.readouterr().err
    other = write_corpus(tmp_path / "other", seed=1, n_train=3)
    (other / "ptb.train.txt").write_text("completely different words here\n")
    more = {"train": {"epochs": 5}}  # a budget left: what is refused is the text
    with pytest.raises(InputError, match="not the training text"):  # its fingerprint, recorded in config.json
        train(finished_run, other, more, resume=True, log=quiet)
    older = shutil.copytree(finished_run, tmp_path / "older")  # a run from before fingerprints: its vocabulary
    header = read_json(older / "config.json")
    del header["data"]["train_sha256"]
    (older / "config.json").write_text(json.dumps(header))
    with pytest.raises(RunDirError, match="different vocabulary"):
        train(older, other, more, resume=True, log=quiet)
    with pytest.raises(RunDirError, match="not a run directory"):
        train(tmp_path / "empty", corpus, {}, resume=True, log=quiet)


def test_corrupt_and_mismatched_checkpoints_are_explained(finished_run, corpus, tmp_path, capsys):
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(finished_run, run)
    data = (run / "resume.safetensors").read_bytes()
    (run / "resume.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        train(run, corpus, {}, resume=True, log=quiet)
    (run / "model.best.safetensors").write_bytes(b"\x00" * 10)
    capsys.readouterr()
    assert main(["lm", "eval", "--checkpoint", str(run), "--data-dir", str(corpus)]) == 2
    assert "corrupt or truncated" in capsys.readouterr().err
    other = tmp_path / "other"
    assert (
        main(
            [
                "lm",
                "train",
                "--config",
                str(TINY),
                "--data-dir",
                str(corpus),
                "--out",
                str(other),
                "--epochs",
                "1",
                "--hidden-sizes",
                "20",
                "16",
                "--no-final-test",
            ]
        )
        == 0
    )
    shutil.copy(other / "model.best.safetensors", run / "model.best.safetensors")
    assert main(["lm", "eval", "--checkpoint", str(run), "--data-dir", str(corpus)]) == 2
    assert "does not fit this model" in capsys.readouterr().err
    shutil.copy(other / "resume.safetensors", run / "resume.safetensors")
    with pytest.raises(CheckpointError, match="written for another model"):
        train(run, corpus, {"train": {"epochs": 5}}, resume=True, log=quiet)


def test_a_resume_with_a_max_steps_already_reached_makes_no_update(tmp_path, corpus):
    """--max-steps at or below the steps done: refused before anything is read or written, naming the flag that
    trains further, as logic's is (the engine once tested the budget only after an update, so such a resume
    trained one step past it); a larger one goes on."""
    s, run = settings(epochs=2), tmp_path / "run"
    assert train(run, corpus, with_train(s, max_steps=4), log=quiet).status == "stopped"
    before = tensors(run, "resume")
    for limit in (4, 2):
        with pytest.raises(RunDirError, match=rf"its 4 updates reach max_steps {limit}; pass a larger --max-steps"):
            train(run, corpus, with_train(s, max_steps=limit), resume=True, log=quiet)
    assert_same_tensors(tensors(run, "resume"), before)
    assert train(run, corpus, with_train(s, max_steps=6), resume=True, log=quiet).steps == 6


def test_lm_train_resolves_its_settings_once_and_checks_its_output_once(tmp_path, corpus, monkeypatch):
    """The walk from the command line to the first step reads the settings (file and flags) once and checks the
    output folder once (issue #38: it did both twice)."""
    from onlstm.config import Settings

    calls = {"resolve": 0, "check_output": 0}
    resolve, check_output = Settings.resolve.__func__, RunDir.check_output

    def counted_resolve(cls, *args, **kw):
        calls["resolve"] += 1
        return resolve(cls, *args, **kw)

    def counted_check(self, *args, **kw):
        calls["check_output"] += 1
        return check_output(self, *args, **kw)

    monkeypatch.setattr(Settings, "resolve", classmethod(counted_resolve))
    monkeypatch.setattr(RunDir, "check_output", counted_check)
    argv = ["lm", "train", "--config", str(TINY), "--data-dir", str(corpus), "--out", str(tmp_path / "run")]
    assert main([*argv, "--max-steps", "1", "--no-final-test", "--no-progress"]) == 0
    assert calls == {"resolve": 1, "check_output": 1}


def test_a_ctrl_c_after_the_final_test_still_writes_the_result(tmp_path, corpus, monkeypatch):
    """A Ctrl-C between the final test and the written result (the resume file, results.json) left a run that had
    trained to its end without results.json; the result is now written first."""
    from onlstm.lm import train as lm_train

    real = lm_train.Trainer._final_test

    def then_interrupted(self):
        status = real(self)
        signal.raise_signal(signal.SIGINT)  # what Ctrl-C sends, as the result is about to be written
        return status

    monkeypatch.setattr(lm_train.Trainer, "_final_test", then_interrupted)
    result = train(tmp_path / "run", corpus, settings(), log=quiet)
    assert result.status == "finished"
    assert read_json(tmp_path / "run" / "results.json")["status"] == "finished"


def test_a_ctrl_c_during_the_final_test_says_so_and_a_resume_scores_the_run(tmp_path, corpus, monkeypatch, capsys):
    """Ctrl-C while the trained run's best weights are tested: the note says the test stops and the weights are
    saved (it said a resumable checkpoint was being saved, which a run done training has no use for), the log
    says to score the run later, and ``--resume`` scores it as an uninterrupted run was scored."""
    from onlstm.lm import train as lm_train

    s = settings()
    full = train(tmp_path / "full", corpus, s, log=quiet)
    real = lm_train.Trainer._perplexity

    def interrupted_test(self, model, split, *args, **kw):
        if split == "test":
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C sends; the handler sets the flag the test checks
        return real(self, model, split, *args, **kw)

    monkeypatch.setattr(lm_train.Trainer, "_perplexity", interrupted_test)
    lines: list[str] = []
    capsys.readouterr()
    part = train(tmp_path / "part", corpus, s, log=lines.append)
    err = capsys.readouterr().err
    monkeypatch.undo()
    assert part.status == "interrupted" and part.steps == full.steps
    assert StopRequest.SCORING in err and StopRequest.NOTE not in err
    assert lines[-1] == "final test interrupted; score the run later with onlstm lm eval"
    assert read_json(tmp_path / "part" / "results.json")["status"] == "interrupted"
    assert train(tmp_path / "part", corpus, s, resume=True, log=quiet).status == "finished"
    assert (
        read_json(tmp_path / "part" / "results.json")["test"] == read_json(tmp_path / "full" / "results.json")["test"]
    )


def test_valid_and_test_words_outside_the_training_vocabulary_are_counted_in_the_log(tmp_path):
    """An open-vocabulary corpus of one's own: valid and test words the training text lacks become <unk> (a
    perplexity flattered by them), and the training says how many, once, before training."""
    data = write_corpus(tmp_path / "data")
    with (data / "ptb.valid.txt").open("a") as f:
        f.write("the zebra sat on a yak\n")
    with (data / "ptb.test.txt").open("a") as f:
        f.write("a gnu\n")
    lines: list[str] = []
    train(tmp_path / "run", data, settings(max_steps=1, final_test=False), log=lines.append)
    said = [line for line in lines if "mapped to <unk>" in line]
    assert len(said) == 1 and "valid" in said[0] and "2 mapped to <unk>" in said[0]
    assert "test" in said[0] and "1 mapped to <unk>" in said[0]
    quiet_lines: list[str] = []
    train(tmp_path / "run2", write_corpus(tmp_path / "plain"), settings(max_steps=1), log=quiet_lines.append)
    assert not [line for line in quiet_lines if "<unk>" in line]


def test_the_saved_text_convention_is_the_training_texts_even_when_a_cap_leaves_its_capitals_out(tmp_path):
    """A cased corpus with punctuation whose --max-vocab keeps only lower-case words: the model was trained on
    "The" and "." as <unk>, so it must read raw text cased and with punctuation (as <unk>), not lower-case
    "The" into "the" nor drop the "." it saw."""
    data = write_corpus(tmp_path / "data")
    text = (data / "ptb.train.txt").read_text()
    (data / "ptb.train.txt").write_text(text + "The cat sat on 1987 mats .\n")
    run = tmp_path / "run"
    train(run, data, settings(max_steps=1, final_test=False, max_vocab=8), log=quiet)
    vocab = Vocab.load(run / "vocab.json").words
    assert "The" not in vocab and "." not in vocab  # the cap left them out
    reader = TextReader.from_dict(read_json(run / "config.json")["text"])
    assert reader.lowercase is False and reader.punctuation is True and reader.number is None
    assert reader.read("The cat sat .", vocab)[0] == ["The", "cat", "sat", "."]


def test_a_model_trained_on_wikitext_style_text_reads_its_hyphens_and_numbers_as_marks(tmp_path):
    """WikiText writes "role-playing" as ``role @-@ playing`` and 1,200 as ``1 @,@ 200``: a model trained on such
    text reads raw English the same way (the reader saved with it), so surprisal and SyntaxGym items reach it in
    its own tokens."""
    data = write_corpus(tmp_path / "data")
    text = (data / "ptb.train.txt").read_text()
    (data / "ptb.train.txt").write_text(text + " The role @-@ playing cat sat on 1 @,@ 200 mats . \n")
    run = tmp_path / "run"
    train(run, data, settings(max_steps=1, final_test=False), log=quiet)
    lm = LanguageModel.from_pretrained(run)
    assert lm.reader.split == "wikitext"
    assert lm.words(["The role-playing cat sat on 1,200 mats."]) == [
        ["The", "role", "@-@", "playing", "cat", "sat", "on", "1", "@,@", "200", "mats", "."]
    ]


@pytest.mark.cpp  # the layers' kernel op in the graph is the C++ kernel's
def test_a_compiled_training_step_trains_what_the_eager_one_trains(tmp_path, corpus, monkeypatch):
    # aot_eager: the compiled graph's autograd without code generation (seconds), so the weights come out equal to
    # the bit; inductor's fused code would differ in rounding (benchmarks/lm_speed.py --compile times it)
    import onlstm.lm.train as lm_train

    graphs, torch_compile = [], torch.compile

    def compile_(model):
        def backend(gm, example_inputs):
            graphs.append(gm)
            return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

        return torch_compile(model, backend=backend)

    s = settings(asgd_start_epoch=2)
    eager = train(tmp_path / "eager", corpus, s, log=quiet)
    monkeypatch.setattr(lm_train.torch, "compile", compile_)
    compiled = train(tmp_path / "compiled", corpus, with_train(s, compile=True), log=quiet)
    assert eager.status == compiled.status == "finished" and graphs
    ops = {str(n.target) for g in graphs for n in g.graph.nodes if "onlstm" in str(n.target)}
    assert ops == {"onlstm.layer_forward.default"}  # the layers ran their kernel, not a traced step loop
    for name in ("model.last", "model.best"):
        assert_same_tensors(tensors(tmp_path / "eager", name), tensors(tmp_path / "compiled", name))
    assert log_rows(tmp_path / "eager") == log_rows(tmp_path / "compiled")


#: The resume check of a compiled run under inductor, in a process of its own (its own inductor cache: see
#: tests/nn/test_layer.py, test_torch_compile_fullgraph_matches_eager, for why and for the scalar code)
INDUCTOR_RESUME = """
import sys, torch
import torch._inductor.cpu_vec_isa as isa
isa.valid_vec_isa_list = lambda: []
from pathlib import Path
from test_lm_train import settings, steps_in_epoch, tensors, log_rows
from support import quiet, with_train, write_corpus
from onlstm.lm.train import train
root = Path(sys.argv[1])
corpus = write_corpus(root / "corpus")
s = with_train(settings(asgd_start_epoch=2), compile=True)
assert train(root / "full", corpus, s, log=quiet).status == "finished"
stop_at = steps_in_epoch(corpus, s, 1) + 3  # in epoch 2, averaging
assert train(root / "part", corpus, with_train(s, max_steps=stop_at), log=quiet).status == "stopped"
assert train(root / "part", corpus, with_train(s, max_steps=None), resume=True, log=quiet).status == "finished"
for name in ("model.last", "model.best", "resume"):
    a, b = tensors(root / "full", name), tensors(root / "part", name)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
assert log_rows(root / "full") == log_rows(root / "part")
print("RESUMED EXACTLY")
"""


@pytest.mark.skipif(
    os.environ.get("ONLSTM_INDUCTOR") != "1", reason="inductor compiles for 1-2 minutes: ONLSTM_INDUCTOR=1"
)
def test_a_compiled_run_under_inductor_resumed_mid_epoch_equals_the_uninterrupted_one(tmp_path):
    # inductor draws dropout and DropConnect masks with its own generator, seeded from torch's at each call of the
    # graph: the resume file's random state must give it the same seeds (the aot_eager test above draws torch's)
    here = Path(__file__).parent
    path = [str(here.parents[1] / "src"), str(here.parent), str(here), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path)))
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    args = [sys.executable, "-c", INDUCTOR_RESUME, str(tmp_path)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=1200, env=env)
    assert r.returncode == 0 and "RESUMED EXACTLY" in r.stdout, r.stderr[-3000:]


def test_compile_under_torchrun_is_refused_before_anything_is_read(tmp_path, corpus):
    from onlstm.config import ConfigError
    from onlstm.lm.config import load_config
    from onlstm.lm.train import Trainer
    from onlstm.runs.dist import DistContext

    cfg = load_config(TINY, {"train": {"compile": True}})
    with pytest.raises(ConfigError, match="not supported under torchrun"):
        Trainer(tmp_path / "run", corpus, cfg, ctx=DistContext(rank=0, world=2))
