"""The dependency rules of the package (docs/design.md §4.2): an experiment package never imports another, the
shared layers (nn, data, errors, files, pickles, config, checkpoint, runs, encoders, models, zoo) never import an experiment, and
no module reaches itself through imports. Also: every module is named in design.md's layout (§4.1), and no
function is over 60 lines.

Imports are read with ``ast`` (nothing is executed), including imports inside functions, so a lazy import
cannot hide a dependency.
"""

from __future__ import annotations

import ast
import re

import pytest

from support import REPO

PACKAGE = REPO / "src" / "onlstm"


def registered_experiments() -> tuple[str, ...]:
    """The experiment packages: those whose ``cli.py`` is registered in ``SUBCOMMAND_MODULES`` of
    src/onlstm/cli.py (read, not imported), the one line a new experiment adds (CONTRIBUTING.md)."""
    tree = ast.parse((PACKAGE / "cli.py").read_text(encoding="utf-8"))
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SUBCOMMAND_MODULES" for t in node.targets)
    )
    modules = ast.literal_eval(table)
    return tuple(m.split(".")[1] for m in modules if m.startswith("onlstm.") and m.endswith(".cli"))


#: Experiment packages.
EXPERIMENTS = registered_experiments()
#: Shared modules and packages below the experiments.
SHARED = ("nn", "data", "errors", "files", "pickles", "config", "flags", "checkpoint", "saved", "sharing", "progress")
SHARED += ("runs",)
SHARED += ("lock", "optim_state", "stops")
SHARED += ("device", "graphs", "studies", "encoders", "models", "zoo")
#: The commands, above the experiments: they may import them, and nothing below imports them (``demo`` trains
#: a language model and parses with it).
COMMANDS = ("cli", "__main__", "entry", "demo", "demo_config")
#: Neither: the package's public face (``import onlstm``), which imports the layer only.
PACKAGE_ROOT = ("__init__",)


def import_statements(source: str, module: str) -> list[tuple[str, list[str]]]:
    """``(module imported, names imported from it)`` for every import in ``source`` (the text of module ``module``,
    e.g. ``onlstm.lm.train``), function-local ones included; relative imports are resolved against ``module``.
    ``import a.b`` gives ``("a.b", [])``."""
    package = module.split(".")[:-1]  # onlstm.lm.train and onlstm.lm.__init__ both live in onlstm.lm
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, [alias.name for alias in node.names]))
    return found


def imported_modules(source: str, module: str) -> set[str]:
    """Absolute names of the ``onlstm`` modules that ``source`` (the text of module ``module``) imports."""
    found: set[str] = set()
    for target, names in import_statements(source, module):
        found.add(target)
        found.update(f"{target}.{name}" for name in names)  # `from . import trees` imports onlstm.<pkg>.trees
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
        if other in COMMANDS and own in EXPERIMENTS + SHARED and other not in seen:
            seen.add(other)
            out.append(f"{module} imports {name}: {own!r} must not import the command layer ({other!r})")
            continue
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


#: What each part below the shared layers may import of the project (docs/design.md §4.2): the layer (``nn``)
#: only the two leaf modules, so that it can be read (and copied) with two small files beside it.
LEAVES = {"nn": {"nn", "errors", "files"}, "files": {"files", "errors"}, "errors": {"errors"}}


def test_nn_imports_only_the_leaf_modules():
    outside = {
        f"{module} imports {name}"
        for module, path in package_modules()
        if top_part(module) in LEAVES
        for name in imported_modules(path.read_text(encoding="utf-8"), module)
        if top_part(name) not in LEAVES[top_part(module) or ""]
    }
    assert outside == set()


def test_every_listed_shared_part_and_experiment_exists_or_is_planned():
    present = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}
    assert {"lm", "parsing", "logic"} <= present
    assert {"nn", "data", "errors", "checkpoint", "runs", "encoders", "models"} <= present


def test_every_top_level_part_has_a_place_in_the_layers():
    """A new module or package at the top of the package must be listed above, as an experiment, a shared
    part or a command, so that the rules apply to it."""
    present = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}
    assert present - set(EXPERIMENTS + SHARED + COMMANDS + PACKAGE_ROOT) == set()


#: The experiment template (docs/design.md §4.1): the files every experiment package has.
TEMPLATE = ("__init__.py", "cli.py", "evaluate.py")


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_follows_the_template(experiment):
    """The template's files; ``register(subparsers)`` in cli.py; and config.py where the commands read --config."""
    package = PACKAGE / experiment
    assert [name for name in TEMPLATE if not (package / name).is_file()] == []
    cli = ast.parse((package / "cli.py").read_text(encoding="utf-8"))
    assert "register" in {node.name for node in cli.body if isinstance(node, ast.FunctionDef)}
    if '"--config"' in (package / "cli.py").read_text(encoding="utf-8"):
        assert (package / "config.py").is_file(), f"{experiment} reads --config: declare its settings in config.py"


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
        ("onlstm.nn.modules", "from ..demo import main\n", "'nn' must not import the command layer ('demo')"),
        ("onlstm.logic.cli", "from ..cli import main\n", "'logic' must not import the command layer ('cli')"),
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
        ("onlstm.demo", "from .lm.train import train\nfrom .cli import build_parser\n"),
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


# --------------------------------------------------------------------------- import circles
#
# No module may reach itself through imports, inside a package or across packages. Function-local imports
# count as much as module-level ones: a lazy import only postpones the circle to the first call (and can then
# fail on a half-initialised module); it is still two modules that cannot be understood or moved apart. An
# import's edge goes to the module it names (`from .trees import Tree` and `from . import trees`: the trees
# module; `from ..runs import load_run`: the runs package's __init__), not to the parent packages Python
# imports first: a package's __init__ importing its own modules is not a circle.

#: Circles another change removes; each is checked to still exist, so an entry cannot outlive its circle.
KNOWN_CIRCLES: set[frozenset[str]] = set()


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of ``sources`` it imports, from ``{module: source}`` with modules named as by
    :func:`package_modules` (``onlstm.lm.__init__`` for the package ``onlstm.lm``)."""
    modules = {name.removesuffix(".__init__") for name in sources}
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        edges = set()
        for target, names in import_statements(source, module):
            submodules = {f"{target}.{name}" for name in names} & modules
            edges |= submodules
            if target in modules and (len(submodules) < len(names) or not names):
                edges.add(target)  # `import a.b`, or a name defined in the module or package __init__ `target`
        own = module.removesuffix(".__init__")
        graph[own] = edges - {own}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen, todo = set(), list(graph[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of ``graph``: the largest groups of modules that each reach all the others, sorted."""
    reach = {start: reachable(graph, start) for start in graph}
    groups = {frozenset({m} | {n for n in reach[m] if m in reach[n]}) for m in graph if m in reach[m]}
    return sorted(sorted(group) for group in groups)


def describe(circle: list[str], graph: dict[str, set[str]]) -> str:
    return "; ".join(f"{a} imports {b}" for a in circle for b in sorted(graph[a]) if b in circle)


def package_sources() -> dict[str, str]:
    return {module: path.read_text(encoding="utf-8") for module, path in package_modules()}


def test_no_import_circle_in_the_package():
    graph = import_graph(package_sources())
    circles = import_circles(graph)
    new = [describe(c, graph) for c in circles if frozenset(c) not in KNOWN_CIRCLES]
    assert not new, "move what both sides need to where it belongs:\n" + "\n".join(new)
    gone = KNOWN_CIRCLES - {frozenset(c) for c in circles}
    assert not gone, f"these circles are gone: remove them from KNOWN_CIRCLES {sorted(map(sorted, gone))}"


@pytest.mark.parametrize(
    "sources, expected",
    [
        # a lazy import closes the circle as much as a module-level one
        (
            {"onlstm.logic.a": "from .b import x\n", "onlstm.logic.b": "def f():\n    from .a import y\n"},
            [["onlstm.logic.a", "onlstm.logic.b"]],
        ),
        # three modules, through `from . import c` and an absolute import
        (
            {
                "onlstm.p.a": "from . import b\n",
                "onlstm.p.b": "import onlstm.p.c\n",
                "onlstm.p.c": "from onlstm.p.a import f\n",
                "onlstm.p.d": "from .a import f\n",  # reaches the circle but is not in it
            },
            [["onlstm.p.a", "onlstm.p.b", "onlstm.p.c"]],
        ),
        # across packages, through a package's __init__
        (
            {
                "onlstm.q.__init__": "from .m import f\n",
                "onlstm.q.m": "from ..r import g\n",
                "onlstm.r": "from .q import f\n",
            },
            [["onlstm.q", "onlstm.q.m", "onlstm.r"]],
        ),
        # not circles: a package's __init__ importing its modules, which import each other one way
        (
            {
                "onlstm.q.__init__": "from .m import f\nfrom . import n\n",
                "onlstm.q.m": "from .n import g\n",
                "onlstm.q.n": "",
            },
            [],
        ),
        ({"onlstm.q.m": "from . import m\nimport torch\n"}, []),  # itself, and outside the package
    ],
)
def test_the_circle_checker_finds_exactly_the_circles(sources, expected):
    assert import_circles(import_graph(sources)) == expected


def test_the_circle_checker_catches_a_circle_injected_into_the_package():
    sources = package_sources()
    sources["onlstm.nn.functional"] += "\n\ndef _late():\n    from .modules import ONLSTM\n"
    circles = import_circles(import_graph(sources))
    assert any({"onlstm.nn.functional", "onlstm.nn.modules"} <= set(c) for c in circles), circles


# --------------------------------------------------------------------------- below the training runtime

#: What opens, shares and reads a model works without the training runtime (docs/design.md §4.2): these parts
#: never reach ``onlstm.runs``, directly or through another module.
BELOW_RUNS = ("models", "data")


def runtime_reached(graph: dict[str, set[str]]) -> list[str]:
    """The modules of :data:`BELOW_RUNS` that reach ``onlstm.runs``, each with the runs modules it reaches."""
    found = []
    for module in sorted(graph):
        if top_part(module) in BELOW_RUNS:
            reached = sorted(m for m in reachable(graph, module) if top_part(m) == "runs")
            found += [f"{module} reaches {', '.join(reached)}"] if reached else []
    return found


def test_models_and_data_never_reach_the_training_runtime():
    assert runtime_reached(import_graph(package_sources())) == []


def test_the_runtime_check_sees_an_import_through_another_module():
    sources = package_sources()
    sources["onlstm.saved"] += "\n\ndef _late():\n    from .runs import RunDir\n"  # models/ opens runs through it
    found = runtime_reached(import_graph(sources))
    assert any(line.startswith("onlstm.models.language_model reaches onlstm.runs") for line in found), found


# --------------------------------------------------------------------------- the documented layout

DESIGN = REPO / "docs" / "design.md"


def layout_entries(design: str) -> dict[str, str]:
    """The entries of design.md §4.1's layout block under ``src/onlstm/``: first word (``nn/``, ``cli.py``)
    -> the entry's text, continuation lines included."""
    section = design.split("### 4.1 Layout", 1)[1].split("\n### ", 1)[0]
    block = section.split("```", 2)[1]
    entries: dict[str, str] = {}
    name = None
    for line in block.splitlines():
        if line.startswith("  ") and not line.startswith("   "):  # an entry of src/onlstm/
            name = line.split()[0]
            entries[name] = line
        elif line.startswith("   ") and name is not None:
            entries[name] += "\n" + line
        else:
            name = None  # src/onlstm/ itself, or the checkout's other folders
    return entries


def unnamed_modules(modules: list[str], entries: dict[str, str]) -> list[str]:
    """The modules (paths under src/onlstm, ``nn/fused.py``) that the layout does not name: a top-level
    module needs its own entry, a package's module its name (``fused`` or ``fused.py``) in the package's
    entry; a package's ``__init__.py`` is named by the package's entry."""
    out = []
    for module in modules:
        package, _, file = module.rpartition("/")
        if not package:
            named = file in entries
        elif file == "__init__.py":
            named = f"{package}/" in entries
        else:
            named = re.search(rf"(?<![\w.]){re.escape(file[:-3])}\b", entries.get(f"{package}/", "")) is not None
        if not named:
            out.append(module)
    return out


def test_every_module_is_named_in_the_layout_of_design_md():
    modules = sorted(path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py"))
    missing = unnamed_modules(modules, layout_entries(DESIGN.read_text(encoding="utf-8")))
    assert not missing, f"name these in docs/design.md §4.1 (what each is for): {missing}"


def test_the_layout_checker_sees_a_missing_module():
    entries = layout_entries(
        "### 4.1 Layout\n\n```\nsrc/onlstm/\n  cli.py   the command\n  nn/   the layer:\n"
        "        functional.py, _ext.py\ndocs/\n```\n### 4.2 Next\n"
    )
    assert set(entries) == {"cli.py", "nn/"}
    modules = ["cli.py", "nn/__init__.py", "nn/functional.py", "nn/_ext.py", "nn/fused.py", "errors.py", "lm/cli.py"]
    assert unnamed_modules(modules, entries) == ["nn/fused.py", "errors.py", "lm/cli.py"]
    # a name inside another word or after a dot does not count
    assert unnamed_modules(["nn/ext.py", "nn/py.py"], entries) == ["nn/ext.py", "nn/py.py"]


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


def _code_lines(paths) -> int:
    return sum(len(p.read_text().splitlines()) for p in paths)


def test_the_training_runtime_keeps_to_its_line_budgets():
    """Issue #47's budgets, kept once met: the two trainers <= 800 lines, ``runs/`` <= 1,300, and with ``config.py``
    <= 2,600 (the whole package's, 15,000, is not met)."""
    src = REPO / "src" / "onlstm"
    trainers = _code_lines([src / "lm" / "train.py", src / "logic" / "train.py"])
    runs = _code_lines(sorted((src / "runs").glob("*.py")))
    assert trainers <= 800 and runs <= 1300 and trainers + runs + _code_lines([src / "config.py"]) <= 2600
