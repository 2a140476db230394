"""docs/results/records/ml_published_check.py, the generated Marvin & Linzen suite against the authors' pickles item
for item: on pickles written here in the authors' layout (``{condition: [(g, u), ...]}``, NPI ``(g, i, u)``), the
same suite, a changed item, a missing case."""

from __future__ import annotations

import importlib.util
import pickle

import pytest

from onlstm.data.marvin_linzen import generate
from support import REPO


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location(
        "ml_published_check", REPO / "docs/results/records/ml_published_check.py"
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def write_pickles(folder, cases, change=None):
    """The cases as the authors pickled them (protocol 2, as Python 2 wrote them); ``change``: (case, condition,
    index) of an item whose grammatical sentence is altered."""
    folder.mkdir()
    for case in cases:
        table: dict[str, list[tuple]] = {}
        for _, condition, g, u, i in generate([case]):
            table.setdefault(condition, []).append((g, u) if i is None else (g, i, u))
        if change and change[0] == case:
            items = table[change[1]]
            items[change[2]] = ("the altered sentence", *items[change[2]][1:])
        (folder / f"{case}.pickle").write_bytes(pickle.dumps(table, protocol=2))


def test_the_same_items_in_the_same_order_are_one_suite(script, tmp_path):
    write_pickles(tmp_path / "t", ["simple_agrmt", "simple_npi_anim"])
    generated = script.by_condition(generate(["simple_agrmt", "simple_npi_anim"]))
    lines = script.compare(script.read_published(tmp_path / "t"), generated)
    assert lines == ["simple_agrmt: identical (140 items)", "simple_npi_anim: identical (120 items)",
                     "the same suite, item for item"]  # fmt: skip


def test_a_changed_item_and_a_missing_case_are_named(script, tmp_path, capsys):
    write_pickles(tmp_path / "t", ["simple_agrmt"], change=("simple_agrmt", "plur_MS_MV", 3))
    assert script.main([str(tmp_path / "t")]) == 1
    out = capsys.readouterr().out.splitlines()
    named = "simple_agrmt: plur_MS_MV: 70 published, 70 generated, 1 differ, first at item 3: ('the altered sentence'"
    assert [line for line in out if line.startswith("simple_agrmt")][0].startswith(named)
    assert "vp_coord: only in the generated suite" in out and out[-1] == "the suites differ"


def test_a_folder_without_the_pickles_is_one_line(script, tmp_path, capsys):
    assert script.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path} holds no *.pickle or *.tsv files" in err
