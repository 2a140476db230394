"""Issue 35, what a resume reads back: the training text must be the run's own (its fingerprint is in config.json),
and the values of the resume file and history.json are checked before training goes on; a damaged or edited
file is one line, exit 2, naming the file and the fix (docs/cli.md), with the run's files left as they were."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from onlstm.cli import main
from onlstm.data.ptb import load_corpus
from support import TINY_LM, problem_lines, write_corpus

LOGIC = ["--emb-size", "8", "--hidden-size", "16", "--chunk-size", "4", "--mlp-hidden", "16", "--no-progress"]
LOGIC += ["--batch-size", "8", "--valid-every", "3", "--epochs", "2", "--threads", "1"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def lm_run(corpus, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("lm") / "run"
    assert main(lm(corpus, run, "--max-steps", "3")) == 0
    return run


@pytest.fixture(scope="module")
def logic_run(tmp_path_factory) -> tuple[Path, Path]:
    from onlstm.logic.generate import GenerateConfig, generate_dataset

    data = tmp_path_factory.mktemp("logic-data")
    generate_dataset(data, GenerateConfig(per_length=12, seed=3, max_ops=6, test_count=3))
    run = tmp_path_factory.mktemp("logic") / "run"
    assert main(["logic", "train", "--data", str(data), "--out", str(run), *LOGIC, "--max-steps", "4"]) == 0
    return data, run


def lm(corpus: Path, run: Path, *extra: str) -> list[str]:
    return ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--out", str(run), *extra]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(capsys, argv: list[str], *words: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(problem_lines(err)) == 1 and "Traceback" not in err, err[-2000:]
    for word in words:
        assert word in err, err
    return err


def test_resume_on_another_training_text_with_the_same_vocabulary_is_refused(corpus, lm_run, tmp_path, capsys):
    other = shutil.copytree(corpus, tmp_path / "other")
    (other / "ptb.train.txt").write_text((corpus / "ptb.train.txt").read_text() * 2)  # every count doubled
    assert load_corpus(other).vocab.words == load_corpus(corpus).vocab.words  # the vocabulary cannot tell them apart
    run = shutil.copytree(lm_run, tmp_path / "run")
    before = snapshot(run)
    refused(capsys, lm(other, run, "--resume", "--max-steps", "5"), "is not the training text", "--data-dir")
    assert snapshot(run) == before
    # the same bytes in another folder are the same text
    same = shutil.copytree(corpus, tmp_path / "moved")
    assert main(lm(same, run, "--resume", "--max-steps", "5")) == 0


def without_fingerprint(run: Path, tmp_path: Path) -> Path:
    """A copy of ``run`` as a run written before its training data's fingerprint was recorded."""
    run = shutil.copytree(run, tmp_path / "run")
    header = json.loads((run / "config.json").read_text())
    assert len(header["data"].pop("train_sha256")) == 64
    (run / "config.json").write_text(json.dumps(header))
    return run


def test_a_run_without_a_fingerprint_resumes_with_a_warning(corpus, lm_run, tmp_path, capsys):
    run = without_fingerprint(lm_run, tmp_path)
    assert main(lm(corpus, run, "--resume", "--max-steps", "5")) == 0
    assert "records no fingerprint of its training text" in capsys.readouterr().out


def logic(data: Path, run: Path, *extra: str) -> list[str]:
    return ["logic", "train", "--data", str(data), "--out", str(run), *LOGIC, *extra]


def test_logic_resume_on_other_training_files_of_the_same_names_is_refused(logic_run, tmp_path, capsys):
    """The data folder generated again with another seed has the same file names and sizes of pairs: resumed, the
    run would go on silently with other batches and another validation hold-out. Its files' fingerprint (in
    config.json) refuses them; the same bytes in another folder are the same data."""
    from onlstm.logic.generate import GenerateConfig, generate_dataset

    data, whole = logic_run
    other = tmp_path / "other"
    generate_dataset(other, GenerateConfig(per_length=12, seed=4, max_ops=6, test_count=3))
    run = shutil.copytree(whole, tmp_path / "run")
    before = snapshot(run)
    refused(capsys, logic(other, run, "--resume", "--max-steps", "5"), "is not the training data of the run", "--data")
    assert snapshot(run) == before
    assert main(logic(shutil.copytree(data, tmp_path / "moved"), run, "--resume", "--max-steps", "5")) == 0


def test_a_logic_run_without_a_fingerprint_resumes_with_a_warning(logic_run, tmp_path, capsys):
    data, whole = logic_run
    run = without_fingerprint(whole, tmp_path)
    assert main(logic(data, run, "--resume", "--max-steps", "5")) == 0
    assert "records no fingerprint of its training data (an older run)" in capsys.readouterr().out
    assert len(json.loads((run / "config.json").read_text())["data"]["train_sha256"]) == 64  # recorded from now on


def edit_resume(path: Path, key: str, change) -> None:
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    value = json.loads(meta[key])
    meta[key] = json.dumps(change(value))
    save_file(load_file(str(path)), str(path), metadata=meta)


def put(name: str, value):
    """An edit of a JSON object: ``name`` (dotted) set to ``value``."""

    def change(obj):
        *outer, last = name.split(".")
        inner = obj
        for part in outer:
            inner = inner[part]
        inner[last] = value
        return obj

    return change


LM_EDITS = {
    "history not a list": ("history", lambda h: {"rows": h}),
    "history of strings": ("history", lambda h: ["x"]),
    "a record without keys": ("history", lambda h: [{}]),
    "NaN as a string": ("history", lambda h: [{"epoch": "NaN", "steps": 1}]),
    "a step as text": ("progress", put("step", "x")),
    "a negative step": ("progress", put("step", -5)),
    "a huge position": ("progress", put("pos", 10**30)),
    "a float count": ("progress", put("epoch", 1e300)),
    "best as a string": ("progress", put("best", "nan")),
    "seconds as text": ("progress", put("seconds", "x")),
    "check_due not a flag": ("progress", put("check_due", "yes")),
    "more checks than history": ("progress", put("n_checks", 5)),
    "task count as text": ("progress", put("task.avg_count", "x")),
    "running loss as text": ("progress", put("sums.loss", "nan")),
    "an earlier version's running loss as text": ("progress", put("task.epoch_loss_sum", "nan")),
    "task results not an object": ("progress", put("task.results", 5)),
    "task with an unknown field": ("progress", put("task.extra", 1)),
    "hidden layout of strings": ("hidden_layout", lambda v: ["x"]),
}


@pytest.mark.parametrize("case", LM_EDITS)
def test_lm_resume_refuses_an_edited_resume_file(corpus, lm_run, tmp_path, capsys, case):
    key, change = LM_EDITS[case]
    run = shutil.copytree(lm_run, tmp_path / "run")
    edit_resume(run / "resume.safetensors", key, change)
    before = snapshot(run)
    refused(capsys, lm(corpus, run, "--resume", "--max-steps", "6"), "resume.safetensors is damaged or was edited")
    assert snapshot(run) == before


HISTORY_EDITS = {
    "not a list": lambda h: {"a": 1},
    "wrong type": lambda h: [{**h[0], "step": "x"}, *h[1:]],
    "missing keys": lambda h: [{}, *h[1:]],
    "NaN string": lambda h: [{**h[0], "valid_accuracy": "NaN"}, *h[1:]],
    "huge number": lambda h: [{**h[0], "step": 1e308}, *h[1:]],
    "infinite": lambda h: [{**h[0], "train_loss": float("inf")}, *h[1:]],
    "strings": lambda h: ["a"] * len(h),
    "numbers and a string": lambda h: [1, 2, "x"],
    "shorter than the checks": lambda h: [],
    "scores by a word": lambda h: [{**h[0], "valid_by_ops": {"x": 1.0}}, *h[1:]],
}


@pytest.mark.parametrize("case", HISTORY_EDITS)
def test_logic_resume_and_curves_refuse_an_edited_history(logic_run, tmp_path, capsys, case):
    """A resume goes on from the history in the resume file (history.json, written after it, is its copy for the
    plots and for people): an edited one is refused there, an edited history.json by the plots."""
    data, whole = logic_run
    run = shutil.copytree(whole, tmp_path / "run")
    assert json.loads((run / "history.json").read_text()), "the run made validation checks"
    edit_resume(run / "resume.safetensors", "history", HISTORY_EDITS[case])
    before = snapshot(run)
    argv = ["logic", "train", "--data", str(data), "--out", str(run), *LOGIC, "--resume", "--max-steps", "8"]
    refused(capsys, argv, "resume.safetensors is damaged or was edited", "train again")
    assert snapshot(run) == before
    if case != "shorter than the checks":  # the plots read every record there is
        history = json.loads((run / "history.json").read_text())
        (run / "history.json").write_text(json.dumps(HISTORY_EDITS[case](history)))
        refused(capsys, ["logic", "curves", str(run), "--out", str(tmp_path / "plots")], "history.json is damaged")


def test_logic_resume_refuses_an_edited_task_state(logic_run, tmp_path, capsys):
    data, whole = logic_run
    run = shutil.copytree(whole, tmp_path / "run")
    edit_resume(run / "resume.safetensors", "progress", put("task.epoch_rng", [3, "x", None]))
    argv = ["logic", "train", "--data", str(data), "--out", str(run), *LOGIC, "--resume", "--max-steps", "8"]
    refused(capsys, argv, "progress.task.epoch_rng")


@pytest.mark.parametrize(
    "edit", [lambda c: [c], lambda c: {k: v for k, v in c.items() if k != "model"}, lambda c: {**c, "model": [1]}]
)
def test_lm_resume_refuses_an_edited_config(corpus, lm_run, tmp_path, capsys, edit):
    run = shutil.copytree(lm_run, tmp_path / "run")
    (run / "config.json").write_text(json.dumps(edit(json.loads((run / "config.json").read_text()))))
    refused(capsys, lm(corpus, run, "--resume", "--max-steps", "6"), "config.json")


@pytest.mark.parametrize("results", [[1], "x", 5])
def test_export_refuses_results_that_are_not_an_object(lm_run, tmp_path, capsys, results):
    run = shutil.copytree(lm_run, tmp_path / "run")
    (run / "results.json").write_text(json.dumps(results))
    refused(capsys, ["export", "--checkpoint", str(run), "--to", str(tmp_path / "out")], "results.json")
    assert not (tmp_path / "out").exists()


def test_one_restart_rule_without_a_resume_file(tmp_path):
    """Both trainers ask runs.restart_refusal: a run that stopped before its first save starts again from step 0;
    one that saved (its history is written after the resume file) or finished is refused, naming what it holds."""
    from onlstm.files import write_json
    from onlstm.runs import RunDir, restart_refusal

    run = RunDir(tmp_path)
    assert restart_refusal(run) == ""  # killed, or a full disk, before its first save
    write_json(run.results_path, {"status": "interrupted", "stopped_by": "interrupted", "steps": 2})
    assert restart_refusal(run) == ""
    for name in (RunDir.LOG, RunDir.HISTORY):
        (tmp_path / name).write_text("[]")
        assert f"holds results ({name})" in restart_refusal(run)
        (tmp_path / name).unlink()
    write_json(run.results_path, {"status": "finished", "stopped_by": "epochs", "steps": 9})
    assert "holds results (results.json); resuming would start again from step 0" in restart_refusal(run)


@pytest.mark.parametrize("trainer", ["lm", "logic"])
def test_an_interrupted_run_whose_resume_file_was_deleted_is_not_trained_over(
    corpus, lm_run, logic_run, tmp_path, capsys, trainer
):
    """The same refusal in both trainers (logic started such a run again from step 0 over its checks)."""
    data, whole = logic_run
    run = shutil.copytree(lm_run if trainer == "lm" else whole, tmp_path / "run")
    (run / "results.json").write_text(json.dumps({"status": "interrupted", "stopped_by": "interrupted"}))
    (run / "resume.safetensors").unlink()
    before = snapshot(run)
    if trainer == "lm":
        argv = lm(corpus, run, "--resume", "--max-steps", "6")
    else:
        argv = ["logic", "train", "--data", str(data), "--out", str(run), *LOGIC, "--resume", "--max-steps", "8"]
    refused(capsys, argv, "has no resume.safetensors", "but holds results", "train into a new --out")
    assert snapshot(run) == before


def test_a_logic_resume_file_without_the_history_goes_on_from_history_json(logic_run, tmp_path):
    """Logic resume files written before they held the history (runs in progress when it moved there) resume with
    the checks of their history.json."""
    data, whole = logic_run
    run = shutil.copytree(whole, tmp_path / "run")
    path = run / "resume.safetensors"
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    history = json.loads(meta.pop("history"))
    assert history and json.loads((run / "history.json").read_text()) == history
    save_file(load_file(str(path)), str(path), metadata=meta)
    argv = ["logic", "train", "--data", str(data), "--out", str(run), *LOGIC, "--resume", "--max-steps", "8"]
    assert main(argv) == 0
    assert json.loads((run / "history.json").read_text())[: len(history)] == history


# --------------------------------------------------------------------------- the optimizer's and the model's tensors


def edit_tensors(path: Path, change) -> None:
    """``change(tensors, optimizer)`` edits the file's tensors and its optimizer record (dicts, in place)."""
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    tensors, optimizer = load_file(str(path)), json.loads(meta["optimizer"])
    change(tensors, optimizer)
    save_file(tensors, str(path), metadata={**meta, "optimizer": json.dumps(optimizer)})


def drop_state(of: int, record: bool = True):
    """Every optimizer tensor of parameter ``of`` removed; without ``record`` the list of parameters with state
    too (a file written before it was recorded)."""

    def change(tensors, optimizer):
        for key in [k for k in tensors if k.startswith(f"optim.{of}.")]:
            del tensors[key]
        if not record:
            del optimizer["stateful"]

    return change


def damages(name: str) -> dict:
    """The damages of a resume file that hold parameter 0's ``name`` (a tensor of the parameter's shape)."""
    return {
        "a missing tensor": (lambda t, o: t.pop(f"optim.0.{name}"), f"optim.0.{name} is missing"),
        "a wrong shape": (lambda t, o: t.update({f"optim.0.{name}": torch.zeros(2)}), f"optim.0.{name} has shape (2,)"),
        "all state of a parameter": (drop_state(0), "optim.0."),
        "all state of a parameter, no record": (drop_state(0, record=False), "optim.0."),
        "a tensor of no parameter": (lambda t, o: t.update({"optim.99.x": torch.zeros(1)}), "optim.99.x"),
        "a tensor the optimizer does not keep": (lambda t, o: t.update({"optim.0.x": torch.zeros(1)}), "optim.0.x"),
    }


@pytest.fixture(scope="module")
def lm_momentum_run(corpus, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("lm-momentum") / "run"
    assert main(lm(corpus, run, "--momentum", "0.9", "--max-steps", "3")) == 0
    return run


@pytest.mark.parametrize("case", list(damages("x")))
@pytest.mark.parametrize("trainer", ["logic", "lm"])
def test_resume_refuses_damaged_optimizer_state(corpus, logic_run, lm_momentum_run, tmp_path, capsys, trainer, case):
    """Adam (logic) and SGD with momentum (lm): a missing, misshapen or foreign optimizer tensor, or a parameter's
    state gone whole, is one line naming the file, the tensor and the fix (it was a KeyError's or a RuntimeError's
    traceback, or silently resumed without it), the run's files as they were."""
    data, whole = logic_run
    run = shutil.copytree(whole if trainer == "logic" else lm_momentum_run, tmp_path / "run")
    change, words = damages("exp_avg" if trainer == "logic" else "momentum_buffer")[case]
    edit_tensors(run / "resume.safetensors", change)
    before = snapshot(run)
    if trainer == "lm":
        argv = lm(corpus, run, "--momentum", "0.9", "--resume", "--max-steps", "6")
    else:
        argv = ["logic", "train", "--data", str(data), "--out", str(run), *LOGIC, "--resume", "--max-steps", "8"]
    refused(capsys, argv, "resume.safetensors is damaged or was edited", words, "train again without --resume")
    assert snapshot(run) == before


MODEL_DAMAGES = {
    "a missing weight": lambda t, o: t.pop(next(k for k in t if k.startswith("model."))),
    "a wrong shape": lambda t, o: t.update({k: v[:1] for k, v in t.items() if k.startswith("model.")}),
}


@pytest.mark.parametrize("case", MODEL_DAMAGES)
def test_logic_resume_refuses_damaged_weights(logic_run, tmp_path, capsys, case):
    """The weights (model.*) are checked before anything is loaded too (assign_weights): one line, exit 2."""
    data, whole = logic_run
    run = shutil.copytree(whole, tmp_path / "run")
    edit_tensors(run / "resume.safetensors", MODEL_DAMAGES[case])
    before = snapshot(run)
    argv = ["logic", "train", "--data", str(data), "--out", str(run), *LOGIC, "--resume", "--max-steps", "8"]
    refused(capsys, argv, "resume.safetensors (model) does not fit this model")
    assert snapshot(run) == before


def _optimizers() -> dict:
    """The trainers' optimizers, each with the name of a state tensor of the parameter's shape (None: none kept)."""
    from onlstm.lm.config import TrainConfig
    from onlstm.lm.ntasgd import make_optimizer

    lm_cfg = TrainConfig(lr=0.5, momentum=0.9)
    return {
        "lm sgd": (lambda p: make_optimizer(p, TrainConfig(lr=0.5)), None),
        "lm sgd with momentum": (lambda p: make_optimizer(p, lm_cfg), "momentum_buffer"),
        "lm asgd": (lambda p: make_optimizer(p, lm_cfg, averaging=True), "ax"),
        "lm adam": (lambda p: make_optimizer(p, TrainConfig(lr=0.5, optimizer="adam")), "exp_avg"),
        "adam with amsgrad": (lambda p: torch.optim.Adam(p, lr=0.1, amsgrad=True), "max_exp_avg_sq"),
    }


def _steps(model, opt, n: int) -> None:
    for _ in range(n):
        opt.zero_grad()
        (model(torch.ones(4, 3)) + torch.randn(4, 2)).pow(2).mean().backward()
        opt.step()


def _saved(tmp_path: Path, make, steps: int = 2, then: int = 0):
    """A model and its optimizer after ``steps`` steps (and ``then`` more, uninterrupted), the resume file written
    between them read back, and a fresh model and optimizer (another process: other weights and random state)."""
    from onlstm.runs import read_training, save_training
    from onlstm.runs.engine import Progress

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    opt = make(model.parameters())
    _steps(model, opt, steps)
    path = tmp_path / "resume.safetensors"
    save_training(path, "toy", Progress(step=steps), model, opt, torch.device("cpu"))
    _, tensors, meta = read_training(path, "toy")
    _steps(model, opt, then)
    torch.manual_seed(1)
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    return path, model, opt, tensors, meta["optimizer"], fresh, make(fresh.parameters())


@pytest.mark.parametrize("which", list(_optimizers()))
def test_every_trainer_optimizer_resumes_exactly_and_from_before_its_first_step(tmp_path, which):
    from onlstm.runs import restore_training

    make, _ = _optimizers()[which]
    path, model, _, tensors, optimizer, fresh, fresh_opt = _saved(tmp_path, make, then=2)
    restore_training(path, tensors, optimizer, fresh, fresh_opt, torch.device("cpu"))
    _steps(fresh, fresh_opt, 2)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    # a file of an optimizer without state yet, and one written before the parameters with state were recorded
    path, _, _, tensors, optimizer, fresh, fresh_opt = _saved(tmp_path, make, steps=0)
    assert optimizer["stateful"] == [] and not [k for k in tensors if k.startswith("optim.")]
    restore_training(path, tensors, optimizer, fresh, fresh_opt, torch.device("cpu"))
    path, _, _, tensors, optimizer, fresh, fresh_opt = _saved(tmp_path, make)
    del optimizer["stateful"]
    restore_training(path, tensors, optimizer, fresh, fresh_opt, torch.device("cpu"))


@pytest.mark.parametrize("case", list(damages("x")))
@pytest.mark.parametrize("which", list(_optimizers()))
def test_every_trainer_optimizer_refuses_damaged_state(tmp_path, which, case):
    """The API's side of the CLI test above, for each optimizer the trainers use (the expected state is asked of
    the optimizer itself): a CheckpointError naming the file, the tensor and the fix, nothing loaded."""
    from onlstm.checkpoint import CheckpointError
    from onlstm.runs import restore_training

    make, name = _optimizers()[which]
    path, _, _, tensors, optimizer, fresh, fresh_opt = _saved(tmp_path, make)
    if name is None:  # plain SGD keeps no state: any optimizer tensor is foreign
        change, words = (lambda t, o: t.update({"optim.0.momentum_buffer": torch.zeros(5, 3)}), "optim.0.")
    else:
        change, words = damages(name)[case]
    change(tensors, optimizer)
    weights = [p.detach().clone() for p in fresh.parameters()]
    with pytest.raises(CheckpointError) as err:
        restore_training(path, tensors, optimizer, fresh, fresh_opt, torch.device("cpu"))
    message = str(err.value)
    assert message.startswith(f"{path} is damaged or was edited: ") and "\n" not in message
    assert words in message and message.endswith(
        "train again without --resume (into a new --out, or after removing this one)"
    )
    assert all(torch.equal(a, b) for a, b in zip(weights, fresh.parameters())) and not fresh_opt.state
