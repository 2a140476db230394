"""The dependency rules of the package (docs/design.md): an experiment package never imports another, and the
shared layers (nn, data, errors, files, config, checkpoint, runs, encoders, models, zoo) never import an experiment.

Imports are read with ``ast`` (nothing is executed), including imports inside functions, so a lazy import
cannot hide a dependency.
"""

from __future__ import annotations

import ast

import pytest

from support import REPO

PACKAGE = REPO / "src" / "onlstm"

#: Experiment packages (add new ones here, e.g. the coming syntactic evaluation).
EXPERIMENTS = ("lm", "parsing", "logic", "syneval")
#: Shared modules and packages below the experiments.
SHARED = ("nn", "data", "errors", "files", "config", "checkpoint", "runs", "encoders", "models", "zoo")


def imported_modules(source: str, module: str) -> set[str]:
    """Absolute names of the ``onlstm`` modules that ``source`` (the text of module ``module``, e.g.
    ``onlstm.lm.train``) imports; relative imports are resolved against ``module``."""
    package = module.split(".")[:-1]  # onlstm.lm.train and onlstm.lm.__init__ both live in onlstm.lm
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # `from . import trees` imports the module onlstm.<pkg>.trees
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "onlstm" or name.startswith("onlstm.")}


def top_part(name: str) -> str | None:
    """``lm`` for ``onlstm.lm.train``; None for ``onlstm`` itself."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def violations(module: str, source: str) -> list[str]:
    """The rule breaks of one module: an experiment importing another experiment, or a shared module
    importing an experiment."""
    own = top_part(module)
    out, seen = [], set()
    for name in sorted(imported_modules(source, module)):
        other = top_part(name)
        if other not in EXPERIMENTS or other == own or other in seen:
            continue
        seen.add(other)  # one report per imported experiment
        if own in EXPERIMENTS:
            out.append(f"{module} imports {name}: experiment {own!r} must not import experiment {other!r}")
        elif own in SHARED:
            out.append(f"{module} imports {name}: shared {own!r} must not import experiment {other!r}")
    return out


def package_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        yield ".".join(rel.parts), path


def test_no_experiment_imports_another_and_shared_code_imports_none():
    problems = [v for module, path in package_modules() for v in violations(module, path.read_text(encoding="utf-8"))]
    assert problems == []


def test_every_listed_shared_part_and_experiment_exists_or_is_planned():
    present = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}
    assert {"lm", "parsing", "logic"} <= present
    assert {"nn", "data", "errors", "checkpoint", "runs", "encoders", "models"} <= present


@pytest.mark.parametrize(
    "module, source, expected",
    [
        # the checker must see each of these (synthetic sources: nothing in the package is changed)
        (
            "onlstm.logic.train",
            "from ..lm.train import StopRequest\n",
            "experiment 'logic' must not import experiment 'lm'",
        ),
        ("onlstm.logic.cli", "def f():\n    from ..lm import distributed\n", "must not import experiment 'lm'"),
        ("onlstm.parsing.induce", "import onlstm.lm.model\n", "experiment 'parsing' must not import experiment 'lm'"),
        (
            "onlstm.data.treebank",
            "from ..parsing.trees import Tree\n",
            "shared 'data' must not import experiment 'parsing'",
        ),
        ("onlstm.runs", "from .logic import train\n", "shared 'runs' must not import experiment 'logic'"),
        ("onlstm.models.language_model", "from ..parsing import trees\n", "shared 'models' must not import"),
        ("onlstm.lm.train", "from ..syneval import score\n", "must not import experiment 'syneval'"),
    ],
)
def test_the_checker_catches_an_injected_import(module, source, expected):
    found = violations(module, source)
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize(
    "module, source",
    [
        ("onlstm.lm.train", "from .model import LanguageModel\nfrom ..runs import StopRequest\n"),
        ("onlstm.parsing.induce", "from ..models.language_model import LanguageModel\n"),
        ("onlstm.data.treebank", "from .trees import Tree\n"),
        ("onlstm.cli", "from .lm.cli import register\nfrom .logic.cli import register\n"),  # the CLI sits above all
    ],
)
def test_allowed_imports_pass(module, source):
    assert violations(module, source) == []


def test_relative_imports_resolve_like_python():
    assert imported_modules("from ..lm.train import x\n", "onlstm.logic.train") == {
        "onlstm.lm.train",
        "onlstm.lm.train.x",
    }
    assert "onlstm.parsing.trees" in imported_modules("from . import trees\n", "onlstm.parsing.__init__")
    assert imported_modules("import torch\nfrom typing import Any\n", "onlstm.runs") == set()


# --------------------------------------------------------------------------- function length

MAX_FUNCTION_LINES = 60
#: A function may be longer when its ``def`` line or the line above it carries this marker with the reason.
LONG_OK = "# long function:"


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """``(name, lines)`` of every function in ``source`` longer than ``limit`` lines without a justification."""
    lines = source.splitlines()
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            context = lines[max(first - 2, 0) : node.lineno]
            if length > limit and not any(LONG_OK in line for line in context):
                out.append((node.name, length))
    return out


def test_long_function_checker_catches_a_long_function():
    body = "".join(f"    x{i} = {i}\n" for i in range(70))
    assert long_functions("def f():\n" + body) == [("f", 71)]
    assert long_functions(f"{LONG_OK} a table of cases\ndef f():\n" + body) == []
    assert long_functions("def f():\n" + body[:200]) == []


def test_no_function_in_src_is_over_60_lines():
    found = {
        f"{path.relative_to(PACKAGE)}:{name} ({n} lines)"
        for path in PACKAGE.rglob("*.py")
        for name, n in long_functions(path.read_text())
    }
    assert not found, f"split these into named steps, or say why with '{LONG_OK} <reason>': {sorted(found)}"
