"""Issue 20, faults and bad numbers: a write the OS refuses (full disk, ``ulimit -f``) is one line naming the
file and the OS error, exit status 4, and the file it would have replaced stays whole; seeds outside
torch's range and negative thread counts are refused naming the option and its range (docs/cli.md,
"Errors and exit codes")."""

from __future__ import annotations

import dataclasses
import errno
import functools
import importlib
import os
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

import onlstm.checkpoint as checkpoint
from onlstm.checkpoint import read_json, save_weights
from onlstm.cli import main
from onlstm.config import MAX_THREADS, SEED_RANGE, THREADS_ZERO_TEXT, Config, ConfigError, field_help
from onlstm.errors import EXIT_WRITE_FAILED, WriteError
from onlstm.files import atomic_write, save_figure, write_json, write_text
from onlstm.logic.config import LogicTrainConfig
from onlstm.runs import RunDir, save_training
from onlstm.runs.engine import Progress
from support import REPO, TINY_LM, write_corpus

resource = pytest.importorskip("resource")  # POSIX: the file-size limit is how a full disk is made for real


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (temporary files included: none may be left behind)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@contextmanager
def file_size_limit(limit: int):
    """RLIMIT_FSIZE for this process, as ``ulimit -f`` sets it: a write past ``limit`` bytes fails with EFBIG
    (Python ignores SIGXFSZ). It applies to root as well. Hold it only around the write under test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if hard != resource.RLIM_INFINITY and hard < limit:
        pytest.skip(f"the hard file-size limit ({hard}) is below {limit} bytes")
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@functools.cache
def _figure():
    """One figure, drawn before the limit is set (matplotlib may write its font cache on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot(range(100), [k * k for k in range(100)])
    return fig


def _csv_log(path: Path) -> None:
    from onlstm.lm.train import write_log_csv

    write_log_csv(path, [{"epoch": k, "steps": 10 * k, "train_loss": 1.0 / (k + 1)} for k in range(50)])


def _trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(16, 16)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _logic_file(path: Path) -> None:
    from onlstm.logic.data import write_file

    write_file(path, [("<", "a", "( a ( or b ) )")] * 40)


# Each kind of file a command writes, written the way the command writes it; every one is bigger than the limit.
WRITERS = {
    "json (config, history, results)": lambda p: write_json(p, {"history": list(range(200))}),
    "text (trees, table, model card)": lambda p: write_text(p, "(a (b c))\n" * 100),
    "weights (safetensors)": lambda p: save_weights(p, torch.nn.Linear(16, 16)),
    "resume state": lambda p: save_training(p, "toy", Progress(step=3), *_trained(), torch.device("cpu")),
    "csv log": _csv_log,
    "plot (matplotlib)": lambda p: save_figure(_figure(), p, dpi=50),
    "logic data file": _logic_file,
}
SUFFIX = {"weights (safetensors)": ".safetensors", "resume state": ".safetensors", "plot (matplotlib)": ".png"}


@pytest.mark.parametrize("kind", list(WRITERS))
def test_a_write_over_the_file_size_limit_is_one_error_and_keeps_the_old_file(tmp_path, kind):
    path = tmp_path / f"out{SUFFIX.get(kind, '.txt')}"
    path.write_bytes(b"the previous checkpoint")
    _figure()
    with file_size_limit(256), pytest.raises(WriteError) as caught:
        WRITERS[kind](path)
    err = caught.value
    assert err.errno == errno.EFBIG and err.exit_code == EXIT_WRITE_FAILED and err.filename == str(path)
    assert str(err).startswith(f"cannot write {path}: File too large (EFBIG, over the file-size limit")
    assert "\n" not in str(err)
    assert snapshot(tmp_path) == {path.name: b"the previous checkpoint"}  # intact, no temporary file left
    WRITERS[kind](path)  # with room again the same call writes the file
    assert path.stat().st_size > 256


def test_a_full_disk_is_named_as_such(tmp_path):
    path = tmp_path / "results.json"
    write_json(path, {"old": 1})

    def full(tmp):
        with open(tmp, "w") as f:
            f.write("{")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what write() says on a full disk (no file name)

    with pytest.raises(WriteError, match=r"cannot write .*results.json: No space left on device \(ENOSPC, the disk"):
        atomic_write(path, full)
    assert snapshot(tmp_path) == {"results.json": b'{\n  "old": 1\n}\n'}


def test_safetensors_io_failure_becomes_the_os_error_it_reports(tmp_path, monkeypatch):
    """safetensors (Rust) raises a SafetensorError ending in "(os error N)" for a failed write; any other
    SafetensorError is a bug and passes unchanged."""
    messages = iter(["Error while serializing: I/O error: No space left on device (os error 28)", "invalid dtype"])

    def failing(tensors, filename, metadata=None):
        raise SafetensorError(next(messages))

    monkeypatch.setattr(checkpoint, "save_file", failing)
    with pytest.raises(WriteError, match="No space left on device") as caught:
        save_weights(tmp_path / "m.safetensors", torch.nn.Linear(2, 2))
    assert caught.value.errno == errno.ENOSPC
    with pytest.raises(SafetensorError, match="invalid dtype"):
        save_weights(tmp_path / "m.safetensors", torch.nn.Linear(2, 2))
    assert list(tmp_path.iterdir()) == []


def test_an_error_about_another_file_is_not_a_write_error(tmp_path):
    def copy_missing(tmp):
        with open(tmp_path / "missing-source") as src, open(tmp, "w") as dst:
            dst.write(src.read())

    with pytest.raises(FileNotFoundError) as caught:
        atomic_write(tmp_path / "copy.txt", copy_missing)
    assert not isinstance(caught.value, WriteError)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the commands


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def lm_train(corpus: Path, run: Path, *extra: str) -> list[str]:
    return ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--out", str(run), *extra]


def one_line(err: str, path: Path) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"cannot write {path}: " in lines[0], lines[0]
    return lines[0]


@pytest.mark.slow  # a second Python process with torch: ~15 s on 2 busy cores
def test_lm_train_resume_under_ulimit_f_is_one_line_and_keeps_the_checkpoint(tmp_path, corpus):
    """The issue's reproduction, in a real process: ``(ulimit -f 8; onlstm lm train … --resume)``."""
    run = tmp_path / "run"
    assert main(lm_train(corpus, run, "--max-steps", "2")) == 0
    before = snapshot(run)
    assert "resume.safetensors" in before and "model.last.safetensors" in before
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "ONLSTM_NO_EXTENSION": "1",  # no kernel build under the limit: only the run's own files matter here
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONWARNINGS": "ignore",  # ... and not its warning that the C++ kernel is off
    }
    limit = 8 * 512  # ulimit -f counts 512-byte blocks: the lock file fits, the resume file does not

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    cmd = [sys.executable, "-m", "onlstm", *lm_train(corpus, run, "--resume", "--max-steps", "4")]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, preexec_fn=limited)
    assert proc.returncode == EXIT_WRITE_FAILED, proc.stderr
    line = one_line(proc.stderr, run / "model.last.safetensors")  # written first: the resume file follows it
    assert line.startswith("onlstm lm train: ") and "File too large (EFBIG" in line
    assert snapshot(run) == before  # the previous checkpoint, weights and log as they were; no lock, no temp file
    assert main(lm_train(corpus, run, "--resume", "--max-steps", "4")) == 0  # with room, --resume goes on


def fail_rename_of(monkeypatch, name: str, after: int = 0, code: int = errno.ENOSPC) -> dict:
    """The disk fills up when ``name`` is saved for the ``after + 1``-th time (the rename into place fails,
    as it can on a full disk); every other write goes through."""
    real, seen = os.replace, {"n": 0}

    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == name:
            seen["n"] += 1
            if seen["n"] > after:
                raise OSError(code, os.strerror(code))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return seen


@pytest.fixture(scope="module")
def logic_data(tmp_path_factory) -> Path:
    from onlstm.logic.generate import GenerateConfig, generate_dataset

    out = tmp_path_factory.mktemp("logic-data")
    generate_dataset(out, GenerateConfig(per_length=12, seed=3, max_ops=6, test_count=3))
    return out


LOGIC_TINY = ["--emb-size", "8", "--hidden-size", "16", "--chunk-size", "4", "--mlp-hidden", "16", "--no-progress"]


LOGIC_RUN = [*LOGIC_TINY, "--batch-size", "8", "--valid-every", "3", "--epochs", "2", "--threads", "1"]


@pytest.fixture(scope="module")
def whole_logic_run(logic_data, tmp_path_factory) -> Path:
    """A logic run that met no fault, to compare the resumed ones with."""
    out = tmp_path_factory.mktemp("whole") / "run"
    assert main(["logic", "train", "--data", str(logic_data), "--out", str(out), *LOGIC_RUN]) == 0
    return out


@pytest.mark.parametrize("name", ["model.last.safetensors", "history.json", "resume.safetensors"])
def test_logic_train_on_a_full_disk_keeps_the_last_check_and_resumes_exactly(
    logic_data, whole_logic_run, tmp_path, monkeypatch, capsys, name
):
    """Every validation check saves model.last, history.json and the resume file; when the disk fills up at
    the second check, what the first check saved stays whole, and --resume (with room again) ends where a
    run that never failed ends, bit for bit."""
    argv = ["logic", "train", "--data", str(logic_data), *LOGIC_RUN]
    run = tmp_path / "run"
    with monkeypatch.context() as m:
        seen = fail_rename_of(m, name, after=1)
        assert main([*argv, "--out", str(run)]) == EXIT_WRITE_FAILED
    one_line(capsys.readouterr().err, run / name)
    assert seen["n"] == 2 and not (run / RunDir.LOCK).exists()
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    assert main([*argv, "--out", str(run), "--resume"]) == 0, capsys.readouterr().err
    whole = snapshot(whole_logic_run)
    assert snapshot(run).keys() == whole.keys()
    for file in ("model.best.safetensors", "model.last.safetensors"):
        assert snapshot(run)[file] == whole[file], file
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]
    assert strip(read_json(run / "history.json")) == strip(read_json(whole_logic_run / "history.json"))


def test_commands_that_export_plot_or_generate_on_a_full_disk(corpus, logic_data, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    assert main(lm_train(corpus, run, "--epochs", "1", "--no-final-test")) == 0
    cases = [
        (
            ["export", "--checkpoint", str(run), "--to", str(tmp_path / "shared")],
            tmp_path / "shared" / "model.safetensors",
        ),
        (
            ["parsing", "plot", "--checkpoint", str(run), "the cat sat", "--out", str(tmp_path / "fig")],
            tmp_path / "fig.png",
        ),
        (
            ["logic", "generate", "--out", str(tmp_path / "gen"), "--per-length", "4", "--max-ops", "2"],
            tmp_path / "gen" / "train1",
        ),
    ]
    for argv, path in cases:
        capsys.readouterr()
        with monkeypatch.context() as m:
            fail_rename_of(m, path.name, code=errno.EDQUOT)
            assert main(argv) == EXIT_WRITE_FAILED, argv
        line = one_line(capsys.readouterr().err, path)
        assert "Disk quota exceeded (EDQUOT, the disk quota is used up)" in line and not path.exists()


def test_a_full_disk_outside_the_writers_is_one_line_too(monkeypatch, capsys, tmp_path):
    """A write no onlstm writer made (a library's file, a redirected stdout) still gives one line and exit 4;
    any other OSError is a bug and keeps its traceback."""
    import onlstm.logic.cli as logic_cli

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "some/cache/file")

    monkeypatch.setattr(logic_cli, "generate_dataset", full)
    argv = ["logic", "generate", "--out", str(tmp_path / "g"), "--per-length", "2"]
    assert main(argv) == EXIT_WRITE_FAILED
    err = capsys.readouterr().err.strip()
    assert (
        err == "onlstm logic generate: cannot write some/cache/file: No space left on device (ENOSPC, the disk is full)"
    )

    def bug(*args, **kwargs):
        raise PermissionError(errno.EACCES, "not a full disk", "some/file")

    monkeypatch.setattr(logic_cli, "generate_dataset", bug)
    with pytest.raises(PermissionError):
        main(argv)


# --------------------------------------------------------------------------- seeds and threads

BIG = str(2**70)  # the 1180591620717411303424


@pytest.mark.parametrize(
    "argv, where",
    [
        (["lm", "train", "--data-dir", "D", "--out", "OUT", "--seed", BIG], "train.seed"),
        (["logic", "train", "--data", "D", "--out", "OUT", "--seed", BIG], "train.seed"),
        (["logic", "compare", "--data", "D", "--out", "OUT", "--seeds", "0", BIG], "compare.seeds"),
        (["logic", "generate", "--out", "OUT", "--seed", BIG], "generate.seed"),
        (["demo", "--out", "OUT", "--seed", BIG], "demo.seed"),
        (["lm", "train", "--data-dir", "D", "--out", "OUT", "--seed", "-1"], "train.seed"),
        (["logic", "generate", "--out", "OUT", "--seed", "-3"], "generate.seed"),
    ],
)
def test_a_seed_outside_torchs_range_is_refused_naming_the_option_and_range(argv, where, tmp_path, capsys):
    argv = [str(tmp_path / a) if a in ("D", "OUT") else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert f"{where} must be in [0, {2**64 - 1}], got " in err and "\n" not in err and "Overflow" not in err
    assert list(tmp_path.iterdir()) == []  # refused before anything was made


def test_the_ends_of_the_seed_range_are_seeds(tmp_path):
    for seed in SEED_RANGE:  # both ends are seeds torch takes (Python's random takes any integer)
        torch.manual_seed(seed)
        LogicTrainConfig(seed=seed)
        out = str(tmp_path / str(seed))
        assert main(["logic", "generate", "--out", out, "--per-length", "2", "--seed", str(seed), "--quiet"]) == 0


def _config_classes() -> list[type]:
    for module in ("lm.config", "logic.config", "logic.generate", "demo", "syneval.config"):
        importlib.import_module(f"onlstm.{module}")
    found, todo = [], list(Config.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return [c for c in found if c.__module__.startswith("onlstm.")]


def test_every_seed_and_thread_count_is_declared_in_one_place():
    """Every config field named seed/seeds has torch's seed range, and every threads field accepts 0 as
    PyTorch's default and refuses negatives: one declaration (seed_option, threads_option), one message."""
    seeds, threads = [], []
    for cls in _config_classes():
        for f in dataclasses.fields(cls):
            if f.name in ("seed", "seeds"):
                seeds.append(cls.__name__)
                assert f.metadata["bounds"] == dict(ge=SEED_RANGE[0], le=SEED_RANGE[1]), (cls, f.name)
            if f.name == "threads":
                threads.append(cls.__name__)
                assert f.metadata["bounds"] == dict(ge=0, le=MAX_THREADS) and THREADS_ZERO_TEXT in field_help(f), cls
                with pytest.raises(
                    ConfigError,
                    match=re.escape(f"threads must be in [0, {MAX_THREADS}], got {MAX_THREADS + 1}"),
                ):
                    cls.from_dict({"threads": MAX_THREADS + 1})  # 1e9 aborted inside the OpenMP runtime
                with pytest.raises(ConfigError, match=re.escape(f"threads must be in [0, {MAX_THREADS}], got -1")):
                    cls.from_dict({"threads": -1})
    assert {"TrainConfig", "LogicTrainConfig", "CompareSettings", "GenerateConfig", "DemoConfig"} <= set(seeds)
    assert {"TrainConfig", "LogicTrainConfig", "DemoConfig", "SynevalConfig"} <= set(threads)


@pytest.mark.parametrize("threads", ["0", "-1"])
def test_threads_zero_means_pytorchs_default_and_negative_is_refused(logic_data, tmp_path, capsys, threads):
    before = torch.get_num_threads()
    argv = ["logic", "train", "--data", str(logic_data), "--out", str(tmp_path / "r"), *LOGIC_TINY]
    rc = main([*argv, "--epochs", "1", "--threads", threads])
    err = capsys.readouterr().err
    if threads == "0":
        assert rc == 0 and torch.get_num_threads() == before  # PyTorch's own count, untouched
    else:
        assert rc == 2 and err.strip() == f"onlstm logic train: train.threads must be in [0, {MAX_THREADS}], got -1"
        assert not (tmp_path / "r").exists()
