"""Set-up and first use (issue 13): `onlstm --version`, run files readable under the umask, the corpus
folder saved as an absolute path, and `lm eval` using the run's own thread count."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch

import onlstm
from onlstm.checkpoint import read_json, save_weights
from onlstm.cli import main
from onlstm.config import MAX_THREADS
from onlstm.files import write_json
from support import REPO, write_corpus


def test_version_flag_prints_the_one_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"onlstm {onlstm.__version__}"
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    # One source: pyproject declares the version dynamic, read from onlstm.__version__.
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "onlstm.__version__"}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class _Umask:
    def __init__(self, mask: int):
        self.mask = mask

    def __enter__(self):
        self.old = os.umask(self.mask)

    def __exit__(self, *exc):
        os.umask(self.old)


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_written_files_get_0666_less_the_umask(tmp_path, mask, expected):
    with _Umask(mask):
        write_json(tmp_path / "a.json", {"x": 1})
        save_weights(tmp_path / "w.safetensors", torch.nn.Linear(2, 3))
    assert _mode(tmp_path / "a.json") == expected and _mode(tmp_path / "w.safetensors") == expected
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}


@pytest.fixture(scope="module")
def relative_run(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny LM trained from inside ``work/`` with ``--data-dir corpus`` (relative) under umask 022."""
    assert not Path("tiny").exists()
    work = tmp_path_factory.mktemp("work")
    corpus = write_corpus(work / "corpus")
    here = Path.cwd()
    os.chdir(work)
    try:
        with _Umask(0o022):
            # --config by preset name: there is no file `tiny` here, only the package's preset lm/tiny
            args = ["lm", "train", "--config", "tiny", "--data-dir", "corpus", "--out", "run", "--epochs", "1"]
            assert main(args) == 0
    finally:
        os.chdir(here)
    return work / "run", corpus


def test_every_run_file_is_readable_by_others_under_umask_022(relative_run):
    run, _ = relative_run
    files = sorted(p for p in run.iterdir() if p.is_file())
    assert {p.name for p in files} >= {"config.json", "vocab.json", "model.best.safetensors", "resume.safetensors"}
    assert {p.name: _mode(p) for p in files} == {p.name: 0o644 for p in files}


def test_config_json_stores_the_corpus_folder_absolute_and_eval_runs_from_elsewhere(
    relative_run, tmp_path, monkeypatch, capsys
):
    run, corpus = relative_run
    assert read_json(run / "config.json")["data"]["data_dir"] == str(corpus.resolve())
    monkeypatch.chdir(tmp_path)  # another folder: a relative data_dir would not be found from here
    capsys.readouterr()
    assert main(["lm", "eval", "--checkpoint", str(run), "--split", "valid", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["file"] == str(corpus.resolve() / "ptb.valid.txt")
    # --data-dir still overrides the saved folder
    other = write_corpus(tmp_path / "other", seed=5)
    assert main(["lm", "eval", "--checkpoint", str(run), "--data-dir", str(other), "--split", "valid", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["file"] == str(other / "ptb.valid.txt")


def test_lm_eval_uses_the_runs_thread_count_unless_told(relative_run, capsys):
    run, _ = relative_run
    assert read_json(run / "config.json")["train"]["threads"] == 1  # tiny.yaml sets it
    torch.set_num_threads(2)  # what PyTorch picks on this 2-core machine
    assert main(["lm", "eval", "--checkpoint", str(run), "--split", "valid", "--json"]) == 0
    assert torch.get_num_threads() == 1
    assert main(["lm", "eval", "--checkpoint", str(run), "--split", "valid", "--json", "--threads", "2"]) == 0
    assert torch.get_num_threads() == 2
    capsys.readouterr()
    assert main(["lm", "eval", "--checkpoint", str(run), "--threads", "-1"]) == 2
    assert f"--threads must be in [0, {MAX_THREADS}], got -1" in capsys.readouterr().err


def test_the_demos_hint_names_a_command_that_runs_without_activating_the_venv(monkeypatch, tmp_path):
    import sys

    from onlstm.demo import onlstm_command

    venv_script = tmp_path / ".venv" / "bin" / "onlstm"  # `make demo` runs .venv/bin/onlstm demo
    monkeypatch.setattr(sys, "argv", [str(venv_script), "demo"])
    monkeypatch.setattr(shutil, "which", lambda name: None)  # the venv is not activated: not on PATH
    assert onlstm_command() == str(venv_script)
    monkeypatch.setattr(shutil, "which", lambda name: str(venv_script))  # activated: the plain name works
    assert onlstm_command() == "onlstm"
    monkeypatch.setattr(sys, "argv", ["/somewhere/onlstm/__main__.py", "demo"])  # python -m onlstm
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert onlstm_command() == f"{sys.executable} -m onlstm"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_installs_the_experiments_extra_and_make_test_the_dev_one(tmp_path):
    import subprocess
    import time

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)

    def planned(target: str) -> str:  # what make would run (-n: nothing is run)
        argv = ["make", "-n", "--no-print-directory", "-C", str(REPO), f"VENV={venv}", target]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    assert '-e ".[experiments]"' in planned("demo") and ".[dev]" not in planned("demo")
    assert '-e ".[dev]"' in planned("test")
    later = time.time() + 10  # stamps newer than pyproject.toml
    (venv / ".onlstm-experiments").touch()
    os.utime(venv / ".onlstm-experiments", (later, later))
    assert "pip install" not in planned("demo")
    assert '-e ".[dev]"' in planned("test")  # make test after make demo: upgraded to dev
    (venv / ".onlstm-dev").touch()
    os.utime(venv / ".onlstm-dev", (later, later))
    assert "pip install" not in planned("test") and "pip install" not in planned("demo")
    assert planned("demo").strip().endswith(f"{venv}/bin/onlstm demo")


@pytest.mark.parametrize("experiment", ["lm", "logic"])
def test_the_kernel_is_loaded_before_the_training_clock_starts(experiment, monkeypatch, tmp_path):
    # the first use builds the C++ kernel (tens of seconds): inside the clock it ate the demo's 150 s budget
    from onlstm.nn import kernels
    from onlstm.runs.engine import Engine

    events: list[str] = []
    load, run = kernels.load_kernel, Engine.run
    monkeypatch.setattr(kernels, "load_kernel", lambda name: events.append(f"load {name}") or load(name))
    monkeypatch.setattr(Engine, "run", lambda self: events.append("clock starts") or run(self))
    if experiment == "lm":
        from support import TINY_LM

        argv = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(write_corpus(tmp_path / "c"))]
        argv += ["--max-steps", "2"]
    else:
        from onlstm.logic.generate import GenerateConfig, generate_dataset

        generate_dataset(tmp_path / "d", GenerateConfig(per_length=4, seed=0, max_ops=3, test_count=1))
        argv = ["logic", "train", "--data", str(tmp_path / "d"), "--hidden-size", "8", "--chunk-size", "4"]
        argv += ["--emb-size", "8", "--max-steps", "2", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    assert "clock starts" in events and any(e.startswith("load") for e in events[: events.index("clock starts")])
