"""docs/results/records/ml_sample_check.py, the generated Marvin & Linzen suite against the published sample through
a model's outcomes: its weighting by the sample's conditions, its z and its chi-square tail, on injected outcomes."""

from __future__ import annotations

import importlib.util
import math

import pytest

from onlstm.syneval.data import Item
from onlstm.syneval.evaluate import Outcome
from support import REPO


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("ml_sample_check", REPO / "docs/results/records/ml_sample_check.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def outcome(condition: str, k: int, correct: bool, covered: bool = True) -> Outcome:
    item = Item("simple_agrmt", condition, f"good {condition} {k}", f"bad {condition} {k}")
    return Outcome(item, "g>u", 1.0 if correct else -1.0, 0.0, covered)


def key(o: Outcome) -> tuple:
    return (o.item.case, o.item.grammatical, o.item.ungrammatical, o.item.intrusive)


def test_the_generated_accuracy_is_weighted_as_the_sample_weights_the_conditions(script):
    """Condition a: 10 items, all right; b: 30, all wrong (the suite: 25%). A sample of 3 a and 1 b gets 75%, which
    is what the suite gives at the sample's weights (3/4 x 1 + 1/4 x 0): difference 0, z 0, chi-square tail 1."""
    outs = [outcome("a", k, True) for k in range(10)] + [outcome("b", k, False) for k in range(30)]
    sample = {key(o) for o in outs[:3]} | {key(outs[10])}
    rows = script.rows_of(outs + [outs[0]], sample, covered_only=False)  # a repeated item counts once
    assert rows == {("simple_agrmt", "g>u"): (3, 4, 0.75)}
    assert "| simple_agrmt | g>u | 4 | +0.0 | +0.00 |" in script.report("m", rows)


def test_a_sample_easier_than_the_suite_gives_its_z_and_covered_pairs_are_apart(script):
    """Half of each condition right in the suite; a sample of 4 right of 4: +50 points, z = 0.5 / sqrt(0.25 / 4) = 2.
    Among covered pairs only (the wrong ones not covered) the suite is all right, and so is the sample: z 0."""
    outs = [outcome(c, k, k % 2 == 0, covered=k % 2 == 0) for c in "ab" for k in range(8)]
    sample = {key(o) for o in outs if o.correct and o.item.grammatical.endswith((" 0", " 2"))}
    rows = script.rows_of(outs, sample, covered_only=False)
    assert rows == {("simple_agrmt", "g>u"): (4, 4, 0.5)}
    lines = script.report("m", rows)
    assert "| simple_agrmt | g>u | 4 | +50.0 | +2.00 |" in lines
    assert lines[-1] == f"pooled: sum z^2 = 4.0 over 1 rows, p = {math.erfc(2 / math.sqrt(2)):.3f}"
    assert script.rows_of(outs, sample, covered_only=True) == {("simple_agrmt", "g>u"): (4, 4, 1.0)}


def test_the_chi_square_tail_against_closed_forms(script):
    """k = 2: exp(-x/2); k = 1: erfc(sqrt(x/2)); the tail at 0 is 1."""
    for x in (0.5, 3.0, 12.0):
        assert script.chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-9)
        assert script.chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-9)
    assert script.chi2_sf(0.0, 5) == 1.0
