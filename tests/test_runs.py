"""The shared runtime (onlstm.runs): resume files, opening a run, Ctrl-C, device and threads."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

import pytest
import torch
from safetensors import safe_open
from torch import nn

from onlstm.checkpoint import CheckpointError, config_header, save_safetensors, save_weights
from onlstm.device import StopRequest, resolve_device, setup_torch
from onlstm.errors import OnlstmError
from onlstm.files import write_json
from onlstm.runs import RESUME_FORMAT, read_training, restore_training, save_training
from onlstm.runs.engine import Progress
from onlstm.saved import load_run


@dataclass
class Toy:
    """A task's state as the resume file carries it (checked when read back)."""

    order: list[float] = field(default_factory=list)


def test_resume_file_round_trip_and_its_layout(tmp_path):
    path, model = tmp_path / "resume.safetensors", nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prog = Progress(step=7, epoch=1, pos=2, best=0.5, task=Toy([3, 1, 2]))
    save_training(path, "toy", prog, model, opt, torch.device("cpu"), {"a": torch.arange(6.0).view(2, 3)}, world=2)
    # the format as is, every other value as JSON text
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        assert meta["format"] == RESUME_FORMAT and meta["world"] == "2" and meta["kind"] == '"toy"'
        assert set(f.keys()) == {"a", "model.weight", "model.bias", "rng.torch"}
    got_prog, got, meta = read_training(path, "toy", task=Toy)
    assert got_prog == prog and meta["world"] == 2 and torch.equal(got["a"], torch.arange(6.0).view(2, 3))
    assert read_training(path, "toy", tensors=False)[1] == {}  # the metadata alone


def test_unusable_resume_files_say_how_to_go_on(tmp_path):
    path, model = tmp_path / "resume.safetensors", nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    save_safetensors({"x": torch.zeros(1)}, path, {"format": "other-format/9"})
    with pytest.raises(CheckpointError, match=rf"format 'other-format/9', expected '{RESUME_FORMAT}'\); it cannot "
                       r"be resumed: train into a new --out"):  # fmt: skip
        read_training(path, "toy", fix="train into a new --out")
    save_safetensors({"x": torch.zeros(1)}, path, {"format": RESUME_FORMAT, "progress": "{}"})
    with pytest.raises(CheckpointError, match="incomplete or corrupt.*train again without --resume"):
        read_training(path, "toy")
    save_training(path, "lm", Progress(), model, opt, torch.device("cpu"))
    with pytest.raises(CheckpointError, match="the resume file of a 'lm' run, not of a 'toy' one"):
        read_training(path, "toy")
    path.write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        read_training(path, "toy")


def _step(model, opt, x):
    opt.zero_grad()
    loss = (model(x) + 0.1 * torch.randn(x.shape[0], 2)).pow(2).mean()  # the noise consumes the RNG
    loss.backward()
    opt.step()


def test_training_state_restores_exactly(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(5, 3)
    model = nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(3):
        _step(model, opt, x)
    path = tmp_path / "resume.safetensors"
    save_training(path, "toy", Progress(step=3), model, opt, torch.device("cpu"))
    for _ in range(2):  # the uninterrupted run goes on
        _step(model, opt, x)

    torch.manual_seed(123)  # a fresh process: other weights, other random state
    model2 = nn.Linear(3, 2)
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.1)
    _, got, meta = read_training(path, "toy")
    restore_training(path, got, meta["optimizer"], model2, opt2, torch.device("cpu"))
    for _ in range(2):
        _step(model2, opt2, x)
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)  # bit for bit, Adam moments and random state included


def test_restore_refuses_a_file_without_random_state(tmp_path):
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "resume.safetensors"
    save_training(path, "toy", Progress(), model, opt, torch.device("cpu"))
    _, tensors, meta = read_training(path, "toy")
    del tensors["rng.torch"]
    with pytest.raises(CheckpointError, match="random state"):
        restore_training(path, tensors, meta["optimizer"], model, opt, torch.device("cpu"))


# --------------------------------------------------------------------------- load_run


def _toy_run(tmp_path, kind="toy", model_section=None):
    run = tmp_path / "run"
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    save_weights(run / "model.best.safetensors", model)
    write_json(run / "config.json", config_header(kind, model_section or {"inputs": 3, "outputs": 2}))
    write_json(run / "vocab.json", ["a", "b"])
    return run, model


def _build(section):
    return nn.Linear(section["inputs"], section["outputs"])


def test_load_run_builds_and_fills_the_model(tmp_path):
    from onlstm.checkpoint import read_json

    run_dir, saved = _toy_run(tmp_path)
    run = load_run(run_dir, "toy", _build, vocab=read_json)
    assert run.vocab == ["a", "b"] and run.config["kind"] == "toy" and not run.model.training
    assert torch.equal(run.model.weight, saved.weight) and run.weights.name == "model.best.safetensors"


def test_load_run_errors_name_the_problem(tmp_path):
    run_dir, _ = _toy_run(tmp_path, kind="other")
    with pytest.raises(CheckpointError, match=r"kind 'other', not a toy model \('toy'\); train one first"):
        load_run(run_dir, "toy", _build, what="a toy model", hint="train one first")
    run_dir, _ = _toy_run(tmp_path, model_section={"inputs": 3})
    with pytest.raises(CheckpointError, match=r"bad model config \('outputs'\)"):
        load_run(run_dir, "toy", _build)
    run_dir, _ = _toy_run(tmp_path, model_section={"inputs": 4, "outputs": 2})
    with pytest.raises(CheckpointError, match="does not fit this model"):
        load_run(run_dir, "toy", _build)
    with pytest.raises(CheckpointError, match="neither a run directory"):
        load_run(tmp_path / "none", "toy", _build)


def test_load_run_check_refuses_before_reading_weights(tmp_path):
    run_dir, _ = _toy_run(tmp_path)
    (run_dir / "model.best.safetensors").write_bytes(b"garbage")  # never read: the check refuses first

    def check(run):
        raise CheckpointError(f"{run.run_dir}: refused")

    with pytest.raises(CheckpointError, match="refused"):
        load_run(run_dir, "toy", _build, check=check)


# --------------------------------------------------------------------------- StopRequest, device, threads


def test_stop_request_first_signal_asks_second_ctrl_c_aborts(capsys):
    before = signal.getsignal(signal.SIGINT)
    with StopRequest() as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before  # handlers given back
    assert "stopping after this step" in capsys.readouterr().err


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(OnlstmError, match="CUDA is not available; use --device cpu"):
            resolve_device("cuda:1")
    else:
        assert resolve_device("cuda", local_rank=0) == torch.device("cuda", 0)


def test_setup_torch_sets_threads_and_flushes_denormals():
    threads = torch.get_num_threads()
    supported = torch.set_flush_denormal(False)  # True where the CPU can flush denormals
    tiny = torch.tensor([1e-40], dtype=torch.float32)  # a float32 denormal
    assert float(tiny * 1.0) != 0.0
    try:
        setup_torch(1)
        assert torch.get_num_threads() == 1
        if supported:
            assert float(tiny * 1.0) == 0.0
        setup_torch(None)  # None: leaves the count alone
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(True)  # as every trainer leaves the process


def test_the_progress_bar_shows_only_on_a_terminal_and_when_enabled():
    import io

    from onlstm.progress import progress_bar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, enabled, shown in (
        (Terminal(), True, True),
        (io.StringIO(), True, False),  # a log file: no carriage-return updates piling up
        (Terminal(), False, False),
    ):
        with progress_bar(enabled, total=3, file=stream) as bar:
            bar.update(3)
        assert bool(stream.getvalue()) == shown, (type(stream).__name__, enabled)


@pytest.mark.parametrize(
    "why, done, budget, resume, want",
    [
        ("epochs", dict(epoch=14, pos=1), dict(epochs=3), "onlstm lm train --out r --resume", "--epochs N (N > 14)"),
        ("epochs", dict(epoch=3), dict(epochs=3), "onlstm lm train --out r --resume", "--epochs N (N > 3)"),
        ("max_steps", dict(step=40), dict(max_steps=20), "onlstm x --resume", "--max-steps N (N > 40)"),
        (
            "epochs",
            dict(epoch=150),
            dict(epochs=150),
            "onlstm logic compare --epochs 150 --patience 9",
            "--patience 9 --epochs N (N > 150)",
        ),
    ],
)
def test_the_line_at_a_budget_stop_names_a_budget_that_trains_further(why, done, budget, resume, want):
    """N must pass what the run has done (a resume with a smaller budget ends a run at once, and a budget below the
    steps done is refused), and a resume command that names the budget already says it once."""
    from types import SimpleNamespace

    from onlstm.runs.budget import Budget
    from onlstm.runs.engine import Engine

    engine = object.__new__(Engine)  # stop_line reads the progress, the budget and the task's words only
    engine.progress = Progress(**{"step": 10, **done}, pass_len=4)
    engine.budget = Budget(valid_every=0, **{"epochs": 30, **budget})
    engine.task = SimpleNamespace(resume_command=resume, score_words=str, steps_per_epoch=0)
    line = engine.stop_line(why)
    assert line.endswith(want) and line.count(f"--{why.replace('_', '-')}") == 1, line
