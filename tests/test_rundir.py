"""The run directory (onlstm.runs.RunDir): the one place that knows a run's files, the registry of run kinds,
what a directory holds, its lock and its header written atomically."""

from __future__ import annotations

import ast
import json
import re

import pytest
import torch

import onlstm.lm
import onlstm.logic  # noqa: F401  (registers the "logic-classifier" kind)
from onlstm import lock as lock_module
from onlstm import saved as saved_module
from onlstm.checkpoint import CheckpointError, config_header, save_weights
from onlstm.errors import RunDirError, WriteError
from onlstm.files import MARKER, write_json
from onlstm.models import LanguageModel
from onlstm.runs import RunDir, RunKind, check_output_dir, find_kind, kind_names, register_kind
from support import REPO

NAMES = {RunDir.CONFIG, RunDir.VOCAB, RunDir.HISTORY, RunDir.LOG, RunDir.RESULTS, RunDir.RESUME, RunDir.LOCK}
NAMES |= {RunDir.TENSORBOARD, RunDir.STEPS, RunDir.SHARED_WEIGHTS, RunDir.CARD}
NAMES |= {RunDir.WEIGHTS.format(tag=tag) for tag in ("best", "last")}


# --------------------------------------------------------------------------- names in one place


def test_every_path_is_its_name_in_the_directory(tmp_path):
    run = RunDir(tmp_path / "r")
    paths = {
        run.config_path: RunDir.CONFIG,
        run.vocab_path: RunDir.VOCAB,
        run.history_path: RunDir.HISTORY,
        run.log_path: RunDir.LOG,
        run.results_path: RunDir.RESULTS,
        run.resume_path: RunDir.RESUME,
        run.lock_path: RunDir.LOCK,
        run.tensorboard_path: RunDir.TENSORBOARD,
        run.steps_path: RunDir.STEPS,
        run.shared_weights_path: RunDir.SHARED_WEIGHTS,
        run.card_path: RunDir.CARD,
        run.weights("best"): "model.best.safetensors",
    }
    for path, name in paths.items():
        assert path == tmp_path / "r" / name
    assert len(set(paths)) == len(paths)  # no two files share a name


def _path_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants equal to a run file's name (a path part, not a sentence that mentions one; "tensorboard"
    is a setting's name too)."""
    files = NAMES - {RunDir.TENSORBOARD}
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in files
    ]


def test_no_module_but_the_run_directorys_spells_a_run_file_name():
    # syneval writes its own results.json into its --out folder, which is not a run directory
    allowed = {"saved.py", "syneval/cli.py"}
    package = REPO / "src" / "onlstm"
    found = []
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        if module not in allowed:
            found += [f"{module}:{line}: {name!r}" for line, name in _path_literals(ast.parse(path.read_text()))]
    assert not found, "name run files through onlstm.saved.RunFiles (onlstm.runs.RunDir):\n" + "\n".join(found)


def test_the_scan_sees_a_literal_path():
    assert _path_literals(ast.parse('p = run_dir / "config.json"\nq = "see config.json"\n')) == [(1, "config.json")]


# --------------------------------------------------------------------------- finding weights


def test_find_reads_both_layouts_and_falls_back_to_the_last_weights(tmp_path):
    run = RunDir(tmp_path / "run")
    save_weights(run.weights("last"), torch.nn.Linear(1, 1))
    assert RunDir.find(run.path)[1] == run.weights("last")
    save_weights(run.weights("best"), torch.nn.Linear(1, 1))
    found, weights = RunDir.find(run.path)
    assert found.path == run.path and weights == run.weights("best")
    assert RunDir.find(run.weights("last"))[1] == run.weights("last")  # a weights file inside one
    shared = RunDir(tmp_path / "shared")
    save_weights(shared.shared_weights_path, torch.nn.Linear(1, 1))
    assert RunDir.find(shared.path)[1] == shared.shared_weights_path
    with pytest.raises(CheckpointError, match="holds no model.best.safetensors, model.last.safetensors or model"):
        RunDir.find(tmp_path)
    with pytest.raises(CheckpointError, match="neither a run directory nor a .safetensors file"):
        RunDir.find(tmp_path / "missing")


# --------------------------------------------------------------------------- the kind registry


def test_the_experiments_register_their_kinds():
    assert {"lm", "logic-classifier"} <= set(kind_names())
    lm = find_kind("lm")
    assert lm.title == "language-model" and lm.model is LanguageModel
    assert lm.command({"model": {}, "train": {}}).startswith("onlstm lm train")
    assert find_kind("logic-classifier").command({"model": {}, "train": {}}).startswith("onlstm logic train")


def test_an_unknown_kind_is_one_clear_error():
    for kind in ("logic-compare", None, 3):
        with pytest.raises(CheckpointError) as caught:
            find_kind(kind, "export", "runs/x")
        message = str(caught.value)
        assert message.startswith(f"runs/x: cannot export a run of kind {kind!r}") and "lm" in message
        assert "\n" not in message


def test_a_registered_kind_is_found_and_named(tmp_path, monkeypatch):
    monkeypatch.setattr(saved_module, "_KINDS", dict(saved_module._KINDS))  # leave the real registry as it was
    kind = register_kind(RunKind("toy", "toy-model", torch.nn.Linear, lambda config: None))
    assert find_kind("toy") is kind and "toy" in kind_names()
    run = RunDir(tmp_path / "run")
    run.write_config(config_header("toy", {}, status="finished"))
    assert run.kind == "toy" and run.describe() == "a finished toy-model run"


# --------------------------------------------------------------------------- describe and check


@pytest.mark.parametrize(
    "files, expected",
    [
        ({}, None),
        ({RunDir.CONFIG: {"kind": "lm"}}, "a language-model run"),
        ({RunDir.CONFIG: {"kind": "logic-classifier", "status": "finished"}}, "a finished logic run"),
        (
            {RunDir.CONFIG: {"kind": "lm"}, RunDir.RESUME: None},
            "an interrupted language-model run (resume.safetensors)",
        ),
        ({RunDir.RESUME: None}, "an interrupted unknown run (resume.safetensors)"),
        (
            {RunDir.CONFIG: {"kind": "logic-classifier", "status": "finished"}, RunDir.RESUME: None},
            "a finished logic run (resume.safetensors)",
        ),
        ({RunDir.CONFIG: {"kind": "new-kind"}}, "a new-kind run"),  # a kind nobody registered: by its name
        (  # the result record says how the run ended (the header's status: a logic run of an earlier version)
            {RunDir.CONFIG: {"kind": "lm"}, RunDir.RESULTS: {"status": "stopped"}, RunDir.RESUME: None},
            "a stopped language-model run (resume.safetensors)",
        ),
        ({RunDir.CONFIG: {"kind": "lm"}, RunDir.RESULTS: {"status": "diverged"}}, "a diverged language-model run"),
    ],
)
def test_describe_says_what_the_directory_holds(tmp_path, files, expected):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content)
        (run.path / name).write_text("x" if content is None else text)
    assert run.describe() == expected
    assert check_output_dir(run.path, resume=True) == run.path  # resuming may use any of them
    if expected is not None:
        with pytest.raises(
            RunDirError, match=rf"already holds a run; pass --resume .*\(found: {re.escape(expected)}\)"
        ):
            run.check_output(command="onlstm lm train")
    else:
        assert run.check_output() is run


def test_check_output_replaces_only_its_own_kind(tmp_path):
    run = RunDir(tmp_path / "run")
    run.write_config({"kind": "logic-classifier", "status": "finished"})
    assert run.check_output(replace_kind="logic-classifier") is run
    with pytest.raises(RunDirError, match="found: a finished logic run"):
        run.check_output(replace_kind="lm")


def test_read_config_refuses_another_kind_naming_both(tmp_path):
    run = RunDir(tmp_path / "run")
    with pytest.raises(CheckpointError, match="config.json is missing"):
        run.read_config()
    run.write_config({"kind": "lm"})
    assert run.read_config("lm") == {"kind": "lm"}
    with pytest.raises(CheckpointError, match=r"kind 'lm', not a logic classifier \('logic-classifier'\); train one"):
        run.read_config("logic-classifier", "a logic classifier", "train one")


def test_results_come_from_the_results_file_or_an_earlier_logic_header(tmp_path):
    run = RunDir(tmp_path / "run")
    assert run.results() is None
    run.write_config({"kind": "logic-classifier", "status": "finished", "result": {"acc": 0.5}})
    assert run.results() == {"status": "finished", "acc": 0.5}
    write_json(run.results_path, {"status": "stopped", "test": {"ppl": 80.0}})
    assert run.results() == {"status": "stopped", "test": {"ppl": 80.0}}


# --------------------------------------------------------------------------- lock and atomic header


def test_the_lock_is_the_directorys_lock_file(tmp_path):
    run = RunDir(tmp_path / "new")
    with run.lock("onlstm test"):
        assert json.loads(run.lock_path.read_text())["command"] == "onlstm test"
        with pytest.raises(RunDirError, match="in use by another training"):
            run.lock("second").acquire()
    assert not run.path.exists()  # the lock made the directory and nothing was written: it is gone again


def _stale_lock(run: RunDir, pid: object) -> None:
    run.path.mkdir(parents=True, exist_ok=True)
    import socket

    record = {"pid": pid, "host": socket.gethostname(), "command": "onlstm old", "started": 0}
    run.lock_path.write_text(json.dumps(record))


@pytest.mark.parametrize("whose", ["this process", "pid 1", "the parent process"])
def test_a_lock_naming_a_live_process_that_does_not_hold_it_is_stale(whose, tmp_path):
    """Issue #48: a lock left by a killed training whose pid runs again (used again by another process, or by this
    one: pid 1 in a restarted container) blocked the run for ever. No process holds it: it is taken over."""
    import os

    pid = {"this process": os.getpid(), "pid 1": 1, "the parent process": os.getppid()}[whose]
    run, said = RunDir(tmp_path / "run"), []
    _stale_lock(run, pid)
    with run.lock("onlstm test", log=said.append):
        assert json.loads(run.lock_path.read_text())["pid"] == os.getpid()
    assert len(said) == 1 and f"stale lock of pid {pid} on this host (onlstm old)" in said[0]
    assert "no longer running" in said[0] and not run.lock_path.exists()


def test_without_flock_the_lock_file_is_the_lock(tmp_path, monkeypatch):
    """Where there is no flock (Windows, a file system that refuses it) no pid is trusted: the lock file's presence
    is the lock, and one left behind is refused in one line that names the file to delete, whatever pid it names."""
    import os

    monkeypatch.setattr(lock_module, "_flock", lambda fd: None)
    run = RunDir(tmp_path / "run")
    with run.lock("onlstm test"):
        with pytest.raises(RunDirError, match=f"locked by pid {os.getpid()} on host "):
            run.lock("second").acquire()
    assert not run.path.exists()  # released: the file and the directory it made are gone
    for pid in (10**20, os.getpid()):
        _stale_lock(run, pid)
        with pytest.raises(RunDirError) as refused:
            run.lock("onlstm test").acquire()
        message = str(refused.value)
        assert f"locked by pid {pid}" in message and "without flock" in message and "\n" not in message
        assert f"delete {run.lock_path} and run again" in message
        run.lock_path.unlink()  # the fix the message names
        with run.lock("onlstm test"):
            pass


def test_the_next_lock_removes_the_temporary_files_of_a_killed_writer(tmp_path):
    """Issue #48: a writer killed mid-write (SIGKILL) leaves atomic_write's ``.NAME.XXXXXXXX.tmp`` and the
    safetensors writer's ``.tmpXXXXXX``; the next training of the folder removes them once it holds the lock, and
    nothing else (the user's files whatever their names, a folder, the finished files)."""
    run, said = RunDir(tmp_path / "run"), []
    run.path.mkdir()
    leftovers = [".model.last.safetensors.k2_x9abc.tmp", ".resume.safetensors.abcdefgh.tmp", ".tmpA1b2C3"]
    kept = ["model.best.safetensors", "notes.tmp", ".tmp", ".tmpA1b2C3d", ".x.abc.tmp", ".notes.ABCDEFGH.tmp"]
    for name in leftovers + kept:
        (run.path / name).write_bytes(b"x" * 100)
    (run.path / ".tmpFolder").mkdir()
    with run.lock("onlstm test", log=said.append):
        # while the lock is held, no other training touches them (it cannot take the lock)
        (run.path / leftovers[0]).write_bytes(b"")
        with pytest.raises(RunDirError):
            run.lock("second").acquire()
        assert (run.path / leftovers[0]).exists()
    assert sorted(p.name for p in run.path.iterdir()) == sorted([*kept, ".tmpFolder", leftovers[0]])
    assert len(said) == 1 and f"removed {len(leftovers)} temporary file(s) of a writer that was killed" in said[0]


def test_the_header_is_written_atomically(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    run.write_config({"kind": "lm", "status": "running"})

    def refused(src, dst):
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr("onlstm.files.os.replace", refused)
    with pytest.raises(WriteError, match="config.json"):
        run.write_config({"kind": "lm", "status": "finished"})
    assert run.read_config()["status"] == "running"  # the header it held stays whole
    assert [p.name for p in run.path.iterdir()] == [RunDir.CONFIG]  # no temporary file left behind


def test_an_export_never_lands_in_a_training_run(tmp_path):
    from onlstm.sharing import save_pretrained

    run = RunDir(tmp_path / "run")
    save_weights(run.weights("best"), torch.nn.Linear(1, 1))
    with pytest.raises(Exception, match=r"holds a training run \(model.best.safetensors\)"):
        save_pretrained(run.path, torch.nn.Linear(1, 1), {"kind": "x"}, "card")
    shared = RunDir(tmp_path / "shared")
    save_pretrained(shared.path, torch.nn.Linear(1, 1), {"kind": "x"}, "card", ["a"])
    assert {p.name for p in shared.path.iterdir()} == {
        RunDir.CONFIG,
        RunDir.VOCAB,
        RunDir.SHARED_WEIGHTS,
        RunDir.CARD,
        MARKER,
    }
    assert shared.card_path.read_text() == "card" and shared.read_config() == {"kind": "x"}


def test_the_model_cards_yaml_reads_back_as_written():
    yaml = pytest.importorskip("yaml")
    from onlstm.sharing import simple_yaml

    data = {
        "model": {"hidden_sizes": [12, 8], "cell": "onlstm", "dropout": 0.25, "tie": True, "note": None},
        "test": {"ppl": 9.5, "nan": float("nan"), "inf": float("-inf")},
        "history": [{"epoch": 1, "ppl": 300.0}, {"epoch": 2, "ppl": 200.5, "layers": [[1, 2], [3]]}],
        "odd key: #1": "a: b # not a comment\nsecond line",
        "empty": {},
        "none": [],
    }
    back = yaml.safe_load(simple_yaml(data))
    assert back["test"]["nan"] != back["test"]["nan"] and back["test"]["inf"] == float("-inf")
    del back["test"]["nan"], data["test"]["nan"]  # NaN is not equal to itself
    assert back == data
    assert simple_yaml({"test": {"ppl": 9.5}}) == "test:\n  ppl: 9.5"


def test_weights_saved_with_another_kind_of_dtype_are_refused(tmp_path):
    """A weights file whose float tensors were changed to int32 loaded silently (rounded to whole numbers)."""
    import torch
    from safetensors.torch import save_file

    from onlstm.checkpoint import CheckpointError, load_weights

    layer = torch.nn.Linear(3, 2)
    save_file(
        {k: v.detach().to(torch.int32).contiguous() for k, v in layer.state_dict().items()}, str(tmp_path / "w.st")
    )
    with pytest.raises(CheckpointError, match="saved as torch.int32, the model's is torch.float32"):
        load_weights(tmp_path / "w.st", layer)
    save_file({k: v.detach().double().contiguous() for k, v in layer.state_dict().items()}, str(tmp_path / "d.st"))
    load_weights(tmp_path / "d.st", layer)  # another float precision is converted, as load_state_dict does


def test_a_folder_holding_only_a_killed_writers_temporary_files_takes_a_new_run(tmp_path):
    """#48 leftover: a writer killed before config.json existed left only its temporary files; they are not the
    user's (the lock removes them), so a new training there is allowed, while any other file still refuses it."""
    from onlstm.files import LEFTOVER

    run = tmp_path / "run"
    run.mkdir()
    (run / ".log.csv.abcd1234.tmp").write_text("half")
    (run / ".tmpAb12Cd").write_bytes(b"\0" * 8)
    assert all(LEFTOVER.fullmatch(p.name) for p in run.iterdir())
    assert RunDir(run).check_output().path == run
    (run / "notes.txt").write_text("the user's")
    with pytest.raises(RunDirError, match="not empty and holds no run"):
        RunDir(run).check_output()


def test_a_run_that_a_live_process_trains_is_described_so(tmp_path):
    """A new training into a folder where another is running was told "found: an interrupted ... run"; the run's
    live lock says it is training now, and who holds it."""
    import os

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    write_json(run.config_path, {"kind": "lm"})
    run.resume_path.write_bytes(b"")
    assert run.describe().startswith("an interrupted")
    with run.lock("onlstm lm train"):
        assert run.describe().startswith("a ") and f"run training now (pid {os.getpid()} on host" in run.describe()
    assert run.describe().startswith("an interrupted")
