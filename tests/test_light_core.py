"""The light core (issue 23): ``pip install onlstm`` installs what the layer needs; the experiments' packages are
the ``experiments`` extra. Without them the layer imports, trains and saves, ``onlstm info`` works, and a command
that needs them exits 2 with one line naming the extra.

"Without them" is made real in a child process: a ``sitecustomize`` placed first on its path hides those packages
from every import finder (they are installed here, so nothing else could keep them away)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap

import pytest

from onlstm.errors import EXPERIMENT_PACKAGES, INSTALL_EXPERIMENTS
from support import REPO

BLOCKER = """
import sys

BLOCKED = {blocked!r}


class _Hiding:
    # Wraps each finder so that these packages are not found, as if not installed: `import` raises
    # ModuleNotFoundError and importlib.util.find_spec returns None (torch probes optional packages that way).
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attr):
        return getattr(self.finder, attr)


sys.meta_path[:] = [_Hiding(finder) for finder in sys.meta_path]
"""

LAYER = """
import importlib, sys
import torch
for name in {blocked!r}:  # the blocker is in force
    try:
        importlib.import_module(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"{{name}} was importable: the blocker did not load")
import onlstm
from onlstm.checkpoint import load_weights, save_weights

torch.manual_seed(0)
layer = onlstm.ONLSTM(5, 8, num_layers=2, chunk_size=2, batch_first=True)
before = [p.detach().clone() for p in layer.parameters()]
opt = torch.optim.SGD(layer.parameters(), lr=0.5)
out, _ = layer(torch.randn(3, 4, 5))
out.pow(2).mean().backward()
opt.step()
assert any(not torch.equal(a, b) for a, b in zip(before, layer.parameters())), "the step changed nothing"
save_weights(sys.argv[1], layer)
again = onlstm.ONLSTM(5, 8, num_layers=2, chunk_size=2, batch_first=True)
load_weights(sys.argv[1], again)
assert all(torch.equal(a, b) for a, b in zip(layer.parameters(), again.parameters()))
cell = onlstm.ONLSTMCell(5, 8, chunk_size=2)
loaded = sorted(n for n in sys.modules if n.split(".")[0] in {blocked!r})
print("ok", loaded)
"""


@pytest.fixture(scope="module")
def env_without_extras(tmp_path_factory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("blocker")
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(EXPERIMENT_PACKAGES)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), str(REPO / "src"), env.get("PYTHONPATH")]))
    return env


def core_dependencies() -> set[str]:
    """The distributions ``pip install onlstm`` installs: the core requirements and theirs, recursively, as
    installed here (markers evaluated, no extras)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    todo = list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])
    found: set[str] = set()
    while todo:
        req = Requirement(todo.pop())
        name = canonicalize_name(req.name)
        if name in found or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        found.add(name)
        try:
            todo += metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            pass  # an optional platform package (CUDA libraries) not installed here
    return found


@pytest.fixture(scope="module")
def env_core_only(tmp_path_factory) -> dict[str, str]:
    """As after ``pip install onlstm`` in a new venv: every installed package that is not a core dependency
    (numpy included unless the core needs it) is hidden."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    core = core_dependencies() | {"onlstm"}
    hidden = {
        module
        for module, dists in metadata.packages_distributions().items()
        if not any(canonicalize_name(d) in core for d in dists)
    }
    site = tmp_path_factory.mktemp("core-only")
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(hidden)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), str(REPO / "src"), env.get("PYTHONPATH")]))
    return env


def run(args: list[str], env: dict[str, str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_layer_imports_trains_and_saves_without_the_experiments_packages(env_without_extras, tmp_path):
    code = textwrap.dedent(LAYER.format(blocked=sorted(EXPERIMENT_PACKAGES)))
    r = run(["-c", code, str(tmp_path / "w.safetensors")], env_without_extras, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok []"


def test_info_works_and_experiment_commands_name_the_extra(env_without_extras, tmp_path):
    r = run(["-m", "onlstm", "info", "--json"], env_without_extras, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "cpp_kernel" in json.loads(r.stdout)
    # One child runs the rest through main() (each start of Python and torch costs seconds on 2 cores);
    # the first command above went through the real entry point.
    # Each needs a package of the extra whatever it checks first: the presets are YAML, the demo's grammar
    # and labelled gold trees are nltk's (imported when first needed, not with the commands).
    (tmp_path / "gold.txt").write_text("(S (NP (DT the) (NN cat)) (VP (VBD sat)))\n")
    (tmp_path / "pred.txt").write_text("((the cat) sat)\n")
    commands = [
        ["logic", "train", "--config", "smoke", "--data", "data", "--out", "run"],
        ["lm", "train", "--config", "tiny", "--data-dir", "corpus", "--out", "run"],
        ["demo", "--seconds", "1", "--out", "run"],
        ["parsing", "compare-trees", "gold.txt", "pred.txt"],
        ["export", "--checkpoint", "nothing", "--to", "out"],  # a core command keeps its own error
    ]
    code = textwrap.dedent(
        """
        import contextlib, io, json, sys
        from onlstm.cli import main
        out = []
        for argv in json.loads(sys.argv[1]):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                out.append([main(argv), err.getvalue()])
        print(json.dumps(out))
        """
    )
    r = run(["-c", code, json.dumps(commands)], env_without_extras, tmp_path)
    assert r.returncode == 0, r.stderr
    results = json.loads(r.stdout.splitlines()[-1])
    for argv, (status, err) in zip(commands[:-1], results):
        assert status == 2 and len(err.splitlines()) == 1, (argv, status, err)
        assert err.startswith(f"onlstm {argv[0]}") and err.rstrip().endswith(INSTALL_EXPERIMENTS), err
    assert results[-1][0] == 2 and INSTALL_EXPERIMENTS not in results[-1][1]
    assert not (tmp_path / "run").exists()  # nothing was started


def test_commands_register_without_the_extra_and_run_as_far_as_the_core_allows(env_without_extras, tmp_path):
    """Every command is listed with its own help (none imports a package of the extra when it registers: the
    start-up of every command, the extra installed or not, is not charged nltk's import); comparing unlabelled
    trees needs nothing of the extra and works."""
    (tmp_path / "trees.txt").write_text("((the cat) sat)\n")
    r = run(["-m", "onlstm", "--help"], env_without_extras, tmp_path)
    assert r.returncode == 0 and "not installed" not in r.stdout and "logical inference" in r.stdout, r.stderr
    r = run(["-m", "onlstm", "parsing", "compare-trees", "trees.txt", "trees.txt"], env_without_extras, tmp_path)
    assert r.returncode == 0 and "100.0" in r.stdout, r.stderr


def test_registering_the_commands_imports_no_plotting_or_tree_package():
    code = "import sys\nfrom onlstm.cli import build_parser\nbuild_parser()\nprint(sorted(sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    loaded = {name.split(".")[0] for name in json.loads(r.stdout.replace("'", '"'))}
    assert not loaded & {"nltk", "matplotlib", "yaml"}, loaded & {"nltk", "matplotlib", "yaml"}


def test_the_extra_holds_exactly_the_packages_the_cli_names():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    name = lambda requirement: requirement.split(";")[0].split("[")[0].split(">")[0].split("=")[0].strip().lower()
    extras = project["optional-dependencies"]
    assert {name(r) for r in extras["experiments"]} == set(EXPERIMENT_PACKAGES.values())
    assert not {name(r) for r in project["dependencies"]} & set(EXPERIMENT_PACKAGES.values())
    assert "onlstm[experiments]" in extras["dev"]  # `make` installs .[dev]: everything


def test_the_listed_command_names_are_what_each_module_registers():
    import argparse
    import importlib

    from onlstm.cli import SUBCOMMAND_MODULES

    for module, names in SUBCOMMAND_MODULES.items():
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        assert tuple(sub.choices) == names, module


def test_an_import_error_of_another_package_keeps_its_traceback():
    from onlstm.errors import MissingExtra, missing_extra

    assert missing_extra(ModuleNotFoundError("No module named 'numpyy'", name="numpyy")) is None
    found = missing_extra(ModuleNotFoundError("No module named 'yaml'", name="yaml"))
    assert isinstance(found, MissingExtra) and found.exit_code == 2 and str(found).startswith("needs pyyaml,")
    assert missing_extra(ModuleNotFoundError("No module named 'nltk.tree'", name="nltk.tree")) is not None


def test_a_stand_in_answers_every_use_with_the_missing_extra():
    import argparse

    from onlstm.cli import _register_or_stand_in
    from onlstm.errors import MissingExtra

    def register(sub):
        sub.add_parser("one")  # registered before the import failed: kept, not replaced
        raise ModuleNotFoundError("No module named 'nltk'", name="nltk")

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    _register_or_stand_in(sub, register, ("one", "two", "three"))
    assert list(sub.choices) == ["one", "two", "three"]
    for argv in (["two"], ["two", "--help"], ["three", "train", "-x", "--epochs", "3", "file"]):
        args = parser.parse_args(argv)
        with pytest.raises(MissingExtra, match=r"needs nltk, .*pip install 'onlstm\[experiments\]'"):
            args.func(args)

    def broken(sub):
        raise ModuleNotFoundError("No module named 'numpyy'", name="numpyy")

    with pytest.raises(ModuleNotFoundError, match="numpyy"):  # not the extra: a bug keeps its traceback
        _register_or_stand_in(sub, broken, ("four",))


def test_the_core_install_alone_trains_saves_and_loads_the_layer(env_core_only, tmp_path):
    # Only the core's dependencies: safetensors' writer imports numpy, which torch does not install, so numpy
    # must be one of them (a save raised ModuleNotFoundError, and torch warned at every import).
    code = textwrap.dedent(LAYER.format(blocked=sorted(EXPERIMENT_PACKAGES)))
    r = run(["-c", code, str(tmp_path / "w.safetensors")], env_core_only, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok []" and "Failed to initialize NumPy" not in r.stderr


SHARE = """
import contextlib, io, json, sys
import torch
from onlstm.cli import main
from onlstm.models import LanguageModel

out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        out.append([main(argv), err.getvalue()])
lm = LanguageModel.from_pretrained(sys.argv[2])
lm.save_pretrained(sys.argv[3], command="onlstm lm train ...", results={"test": {"ppl": 9.5}})
back = LanguageModel.from_pretrained(sys.argv[3])
assert all(torch.equal(a, b) for a, b in zip(lm.parameters(), back.parameters()))
hidden = sorted(n for n in sys.modules if n.split(".")[0] in ("yaml", "nltk", "matplotlib", "tqdm", "numpy"))
print(json.dumps({"commands": out, "loaded": hidden}))
"""


def test_save_pretrained_and_export_need_only_the_core(env_core_only, tmp_path):
    # README: saving and loading work without the extra; the card was YAML (pyyaml) and a demo's run needed
    # the demo's module (nltk) for its command.
    from onlstm.checkpoint import config_header, save_weights
    from onlstm.data.vocab import Vocab
    from onlstm.demo import DemoConfig
    from onlstm.files import write_json
    from onlstm.lm.config import TrainConfig
    from onlstm.logic.config import LogicModelConfig, LogicTrainConfig
    from onlstm.logic.model import LogicClassifier
    from onlstm.models import LanguageModel, LMConfig

    words = ["<eos>", "<unk>", "the", "cat", "sat"]
    lm = LanguageModel(LMConfig(vocab_size=len(words), emb_size=8, hidden_sizes=[8, 8], chunk_size=4))
    train = TrainConfig(epochs=2, threads=1).to_dict()
    headers = {
        "lm": config_header("lm", lm.config.to_dict(), train=train, data={"data_dir": "/d"}),
        "demo": config_header("lm", lm.config.to_dict(), train=train, demo=DemoConfig(seconds=5).to_dict()),
    }
    for name, header in headers.items():
        save_weights(tmp_path / name / "model.best.safetensors", lm)
        Vocab(words).save(tmp_path / name / "vocab.json")
        write_json(tmp_path / name / "config.json", {**header, "text_normalisation": "lower"})
        write_json(tmp_path / name / "results.json", {"test": {"ppl": 12.5}})
    logic = LogicClassifier(LogicModelConfig(emb_size=8, hidden_size=8, chunk_size=4, mlp_hidden=4))
    save_weights(tmp_path / "logic" / "model.best.safetensors", logic)
    write_json(
        tmp_path / "logic" / "config.json",
        config_header("logic-classifier", logic.config.to_dict(), train=LogicTrainConfig().to_dict(), data={}),
    )
    names = ["lm", "demo", "logic"]
    commands = [["export", "--checkpoint", str(tmp_path / n), "--to", str(tmp_path / f"{n}-shared")] for n in names]
    args = [json.dumps(commands), str(tmp_path / "lm"), str(tmp_path / "saved")]
    r = run(["-c", textwrap.dedent(SHARE), *args], env_core_only, tmp_path)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout.splitlines()[-1])
    assert found["commands"] == [[0, ""]] * 3, found
    assert found["loaded"] == [n for n in found["loaded"] if n.split(".")[0] == "numpy"]  # the extra's: none
    cards = {n: (tmp_path / f"{n}-shared" / "README.md").read_text() for n in names}
    assert "onlstm lm train --data-dir /d" in cards["lm"] and "ppl: 12.5" in cards["lm"]
    assert "onlstm demo --seconds 5" in cards["demo"]
    assert "onlstm logic train" in cards["logic"]
    assert "ppl: 9.5" in (tmp_path / "saved" / "README.md").read_text()


def test_the_list_of_commands_imports_no_torch_and_shows_each_commands_own_line():
    """``onlstm --help`` (and a misspelt command) list the commands without importing them: torch's import took
    seconds before the list appeared. Each line listed is the one the command registers."""
    code = (
        "import sys\nfrom onlstm.cli import build_parser\n"
        "top = build_parser(['--help'])._subparsers._group_actions[0]\n"
        "print({a.dest: a.help for a in top._choices_actions}, 'torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    listed, torch_imported = r.stdout.rsplit(" ", 1)
    assert torch_imported.strip() == "False"
    from onlstm.cli import build_parser

    full = build_parser()._subparsers._group_actions[0]
    assert ast.literal_eval(listed) == {a.dest: a.help for a in full._choices_actions}


def test_a_missing_dependency_of_onlstm_itself_is_one_line_naming_it(tmp_path):
    """pip install --no-deps, or safetensors removed since: every command ended in a traceback while the parser
    was built (the demo's registration imports the checkpoint code)."""
    site = tmp_path / "blocker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=["safetensors"]))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), str(REPO / "src"), env.get("PYTHONPATH")]))
    for command in (["info"], ["demo", "--help"]):
        r = run(["-m", "onlstm", *command], env, tmp_path)
        assert "Traceback" not in r.stderr, r.stderr
        if command == ["info"]:
            assert r.returncode == 0
        else:
            assert r.returncode == 2 and "needs safetensors, a dependency of onlstm" in r.stderr
            assert "pip install safetensors" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_oldest_torch_is_said_once_and_checked_at_import():
    """pyproject.toml's floor is the one the layer checks at import: an older torch fails there with one line
    naming the fix (before, ``import onlstm.nn`` on torch 2.3-2.6 ended in an AttributeError deep in an import)."""
    from onlstm.nn.requires import MIN_TORCH, check

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    deps = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert f"torch>={MIN_TORCH[0]}.{MIN_TORCH[1]}" in deps
    for ok in ("2.7.0", "2.7.1+cu126", "2.13.0+cpu", "2.14.0a0+git1234", "3.0.0"):
        check(ok)
    with pytest.raises(ImportError, match=r"^onlstm needs torch>=2\.7, and this is torch 2\.6\.0: pip install -U"):
        check("2.6.0")
