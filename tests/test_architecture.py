"""The dependency rules of the package (docs/design.md): an experiment package never imports another, and the
shared layers (nn, data, errors, config, checkpoint, runs, encoders, models, zoo) never import an experiment.

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
SHARED = ("nn", "data", "errors", "config", "checkpoint", "runs", "encoders", "models", "zoo")


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


# --------------------------------------------------------------------------- import circles

#: Circles known and not yet removed (issue #23): the test fails when one is removed, so take it off the list.
KNOWN_CIRCLES = {
    ("onlstm.logic.evaluate", "onlstm.logic.model"),
    ("onlstm.logic.evaluate", "onlstm.logic.train", "onlstm.logic.model"),
}


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of ``sources`` it imports (lazy imports included). An import of a package
    itself (``from . import x``, ``from ..nn import ONLSTM``) is no edge: Python runs a package's
    ``__init__`` before any of its modules, so only module-to-module imports can close a circle here."""
    return {module: imported_modules(source, module) & set(sources) - {module} for module, source in sources.items()}


def import_circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Every circle of ``graph`` as a tuple of its modules, starting at the smallest name (found from each
    module by depth-first search; graphs here are a few dozen modules)."""
    found: set[tuple[str, ...]] = set()

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                i = path.index(min(path))
                found.add(tuple(path[i:] + path[:i]))
            elif nxt not in path and nxt > path[0]:  # each circle once, from its smallest module
                walk([*path, nxt])

    for start in sorted(graph):
        walk([start])
    return found


def package_sources() -> dict[str, dict[str, str]]:
    """Per package (``onlstm``, ``onlstm.nn``, ...): its own modules' sources, subpackages not included."""
    out: dict[str, dict[str, str]] = {}
    for module, path in package_modules():
        if path.name != "__init__.py":
            out.setdefault(module.rsplit(".", 1)[0], {})[module] = path.read_text(encoding="utf-8")
    return out


def test_no_import_circle_inside_a_package():
    circles = set().union(*(import_circles(import_graph(s)) for s in package_sources().values()))
    assert circles - KNOWN_CIRCLES == set(), "modules importing each other (lazy imports count): cut the circle"
    assert KNOWN_CIRCLES - circles == set(), "a known circle is gone: remove it from KNOWN_CIRCLES"


def test_the_circle_finder_finds_a_lazy_circle_and_nothing_else():
    sources = {
        "onlstm.nn.kernels": "def load():\n    from .triton_kernel import load_cuda_kernel\n",
        "onlstm.nn.triton_kernel": "from .kernels import register_kernel\nfrom . import fused\n",
        "onlstm.nn.fused": "from .functional import cumax\n",
        "onlstm.nn.functional": "import torch\n",
    }
    assert import_circles(import_graph(sources)) == {("onlstm.nn.kernels", "onlstm.nn.triton_kernel")}
    del sources["onlstm.nn.kernels"]
    assert import_circles(import_graph(sources)) == set()
    three = {"onlstm.a.x": "from .y import f\n", "onlstm.a.y": "from .z import g\n", "onlstm.a.z": "from . import x\n"}
    assert import_circles(import_graph(three)) == {("onlstm.a.x", "onlstm.a.y", "onlstm.a.z")}
