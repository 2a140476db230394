"""The bowman mix: each pair is what Bowman et al.'s generator can produce, the generator's probabilities hold over
many draws, and (with the workspace's data) generated train0-6 match the original train0-6 file by file."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from onlstm.logic.bowman import P_AND, P_NOT, P_OR, draw_bowman_pair, draw_formula, generate_bowman
from onlstm.logic.data import read_examples
from onlstm.logic.formulas import EMPTY_SET, FULL_SET, Not, count_operators_text, parse, to_text, truth_set
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.logic.relations import relation_of_sets
from onlstm.logic.stats import file_statistics, shape_of
from support import SHARED_DATA

ORIGINAL = SHARED_DATA / "logic-train"


def test_every_pair_is_one_the_generator_can_make():
    rng = random.Random(5)
    for _ in range(3000):
        label, a, b, ops_a, ops_b = draw_bowman_pair(rng)
        fa, fb = parse(a), parse(b)
        (used_a, depth_a, _, _), (used_b, depth_b, _, _) = shape_of(fa), shape_of(fb)
        assert len(used_a | used_b) <= 4  # both sides over the same 4 variables
        assert depth_a <= 3 and depth_b <= 3  # budget 12 -> 6 -> 3 -> 1: three levels
        assert "( not ( not" not in a and "( not ( not" not in b  # one 'not' per node at most
        sa, sb = truth_set(fa), truth_set(fb)
        assert EMPTY_SET not in (sa, sb) and FULL_SET not in (sa, sb)
        assert label == relation_of_sets(sa, sb)
        assert (ops_a, ops_b) == (count_operators_text(a), count_operators_text(b))


def test_the_generators_probabilities_hold_over_many_formulas():
    """Over 40,000 formulas: the root is and/or with probability 4/9 and every node is negated with probability
    1/3; margins are 4 binomial standard errors."""
    rng, n = random.Random(11), 40_000
    roots, nots, nodes = Counter(), 0, 0
    for _ in range(n):
        f = parse(draw_formula(["a", "b", "c", "d"], 12, rng)[0])
        roots[type(f.arg if isinstance(f, Not) else f).__name__] += 1
        tokens = to_text(f).split()
        nots += tokens.count("not")
        nodes += 2 * (tokens.count("and") + tokens.count("or")) + 1  # binary nodes and leaves
    assert abs(roots["Binary"] / n - (P_AND + P_OR)) < 4 * (0.25 / n) ** 0.5
    assert abs(nots / nodes - P_NOT) < 4 * (0.25 / nodes) ** 0.5


def test_buckets_are_filled_from_one_stream_without_repeats_or_excluded_pairs():
    rng = random.Random(2)
    first, _ = generate_bowman({3: 50, 7: 50}, rng, 100_000)
    excluded = {(p[1], p[2]) for p in first[3][:25]}
    drawn, draws = generate_bowman({3: 200, 7: 200}, random.Random(2), 100_000, excluded)
    for k in (3, 7):
        keys = [(p[1], p[2]) for p in drawn[k]]
        assert len(keys) == len(set(keys)) == 200
        assert all(min(max(p[3], p[4]), 12) == k for p in drawn[k])
    assert not excluded & {(p[1], p[2]) for p in drawn[3]}
    assert draws < 100_000


def test_train_is_the_first_part_in_drawing_order(tmp_path):
    cfg = GenerateConfig(mix="bowman", per_length=400, test_fraction=0.25, seed=4, max_ops=4)
    generate_dataset(tmp_path, cfg)
    drawn, _ = generate_bowman({k: 400 for k in range(5)}, random.Random("onlstm-logic-bowman/4"), 20 * 2000)
    for k in range(2, 5):
        train = [(ex.text_a, ex.text_b) for ex in read_examples(tmp_path / f"train{k}")]
        test = [(ex.text_a, ex.text_b) for ex in read_examples(tmp_path / f"test{k}")]
        assert train + test == [(p[1], p[2]) for p in drawn[k]] and len(test) == 100


@pytest.mark.skipif(not ORIGINAL.is_dir(), reason="needs the original train0-6 in ../shared/data/logic-train")
def test_generated_train_files_match_the_original_ones(tmp_path):
    """Bowman et al.'s procedure (500,000 draws, 85% train in drawing order) against their train0-6, file by file.
    Margins: a few standard errors of each statistic at the file's size, wider for the two small files."""
    cfg = GenerateConfig(mix="bowman", per_length=10**6, test_fraction=0.15, draws=500_000, seed=7, max_ops=6)
    generate_dataset(tmp_path, cfg)
    ours = file_statistics(read_examples(tmp_path, split="train", buckets=range(7)))
    theirs = file_statistics(read_examples(ORIGINAL, split="train"))
    for k in range(1, 7):
        o, t = ours[f"train{k}"], theirs[f"train{k}"]
        loose = 3 if k < 3 else 1
        assert abs(o["pairs"] / t["pairs"] - 1) < 0.02 * loose, k
        assert o["over4"] == t["over4"] == 0.0
        for key, margin in (("vars", 0.04), ("depth", 0.04), ("tokens", 0.3), ("smaller", 0.04)):
            assert abs(o[key] - t[key]) < margin * loose, (k, key, o[key], t[key])
        for key in ("not", "label=", "label<", "label>", "label^", "label|", "labelv", "label#"):
            assert abs(o[key] - t[key]) < 1.2 * loose, (k, key, o[key], t[key])


def test_the_other_shape_mix_breaks_the_four_variable_rule(tmp_path):
    """The statistic that tells the two mixes apart: the 'original' mix (a different formula shape) uses 5 or 6
    variables in many long pairs, which Bowman et al.'s data never does."""
    generate_dataset(tmp_path, GenerateConfig(mix="original", per_length=300, seed=0, max_ops=9))
    assert file_statistics(read_examples(tmp_path, split="train", buckets=[9]))["train9"]["over4"] > 20


def test_shape_of_a_formula_by_hand():
    text = "( ( not a ) ( and ( b ( or a ) ) ) )"  # and over (not a) and (b or a): and/or nested 2 deep
    assert shape_of(parse(text)) == ({"a", "b"}, 2, 1, len(text.split()))
    assert shape_of(parse("c")) == ({"c"}, 0, 0, 1)
