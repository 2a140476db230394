"""Logic data: formulas, relations, reader, generator -- checked against hand-worked cases and the
original files of Bowman et al. (2015) in the shared sample."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import pytest

from onlstm.cli import main
from onlstm.files import MARKER
from onlstm.logic import data as D
from onlstm.logic import formulas as F
from onlstm.logic import generate as G
from onlstm.logic.relations import RELATIONS, REVERSE, relation, relation_of_sets
from support import SHARED_DATA

SAMPLE_DIR = SHARED_DATA / "logic-sample"
SAMPLE_FILES = ("train1.head200", "train4.head200")

T = "( a ( or ( not a ) ) )"  # tautology
C = "( a ( and ( not a ) ) )"  # contradiction


def rel(a: str, b: str) -> str:
    return relation(F.parse(a), F.parse(b))


# --------------------------------------------------------------------------- relations


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("a", "a", "="),
        ("a", "( not ( not a ) )", "="),
        ("( a ( and b ) )", "( b ( and a ) )", "="),
        ("( not ( a ( or b ) ) )", "( ( not a ) ( and ( not b ) ) )", "="),  # De Morgan
        ("( a ( and b ) )", "a", "<"),
        ("a", "( a ( or b ) )", "<"),
        ("a", "( a ( and b ) )", ">"),
        ("( a ( or b ) )", "b", ">"),
        ("a", "( not a )", "^"),
        ("( a ( and b ) )", "( ( not a ) ( or ( not b ) ) )", "^"),
        ("( a ( and b ) )", "( not a )", "|"),
        ("a", "( ( not a ) ( and c ) )", "|"),
        ("( a ( or b ) )", "( not a )", "v"),
        ("( not ( a ( and b ) ) )", "a", "v"),
        ("a", "b", "#"),
        ("( a ( and b ) )", "( a ( and c ) )", "#"),
        ("( a ( or b ) )", "( not b )", "v"),
    ],
)
def test_relation_hand_checked(a, b, expected):
    assert rel(a, b) == expected
    assert rel(b, a) == REVERSE[expected]


def test_every_relation_is_covered_by_the_hand_checked_cases():
    """The parametrize list above names each of the 7 labels at least once."""
    cases = [m for m in test_relation_hand_checked.pytestmark if m.name == "parametrize"][0].args[1]
    labels = {c[2] for c in cases}
    assert labels == set(RELATIONS)


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (C, "b", "<"),
        ("b", C, ">"),
        (T, "b", ">"),
        ("b", T, "<"),
        (C, T, "<"),
        (T, C, ">"),
        (C, "( b ( and ( not b ) ) )", "="),
        (T, "( c ( or ( not c ) ) )", "="),
    ],
)
def test_degenerate_formulas_follow_the_documented_order(a, b, expected):
    assert rel(a, b) == expected


def _relation_by_definition(sa: set, sb: set, universe: set) -> str:
    """The 7 relations written directly from their set definitions, in the documented order."""
    if sa == sb:
        return "="
    if sa < sb:
        return "<"
    if sa > sb:
        return ">"
    disjoint, covering = not (sa & sb), (sa | sb) == universe
    if disjoint:
        return "^" if covering else "|"
    return "v" if covering else "#"


def test_relation_of_sets_matches_the_set_definitions_exhaustively_on_3_points():
    universe = set(range(3))
    subsets = [set(s) for r in range(4) for s in itertools.combinations(range(3), r)]
    for sa, sb in itertools.product(subsets, subsets):
        ma, mb = sum(1 << i for i in sa), sum(1 << i for i in sb)
        assert relation_of_sets(ma, mb, full=0b111) == _relation_by_definition(sa, sb, universe), (sa, sb)


def test_truth_set_agrees_with_evaluation_on_all_64_assignments():
    rng = random.Random(5)
    for n in range(0, 9):
        for _ in range(5):
            f = G.random_formula(n, rng)
            ts = F.truth_set(f)
            for bits in range(64):
                assignment = {v: bool((bits >> k) & 1) for k, v in enumerate(F.VARIABLES)}
                assert F.assignment_index(assignment) == bits
                assert bool((ts >> bits) & 1) == F.evaluate(f, assignment), (F.to_text(f), assignment)


# --------------------------------------------------------------------------- formulas


@pytest.mark.parametrize(
    "text, n_ops",
    [
        ("c", 0),
        ("( not f )", 1),
        ("( a ( and a ) )", 1),
        ("( ( not f ) ( and ( ( not c ) ( and b ) ) ) )", 4),
        ("( not ( c ( or ( not ( b ( or f ) ) ) ) ) )", 4),
        ("( ( ( d ( or f ) ) ( and ( not c ) ) ) ( and a ) )", 4),
    ],
)
def test_print_parse_round_trip_and_operator_count(text, n_ops):
    f = F.parse(text)
    assert F.to_text(f) == text
    assert str(f) == text
    assert F.count_operators(f) == n_ops == F.count_operators_text(text)


def test_parse_builds_the_right_tree():
    f = F.parse("( ( not f ) ( and ( c ( or b ) ) ) )")
    assert f == F.Binary("and", F.Not(F.Var("f")), F.Binary("or", F.Var("c"), F.Var("b")))


def test_generated_formulas_round_trip_and_have_the_asked_operator_count():
    rng = random.Random(11)
    for n in range(0, 16):
        text, ts = G.random_formula_text(n, rng)
        f = F.parse(text)
        assert F.to_text(f) == text
        assert F.count_operators(f) == n
        assert F.truth_set(f) == ts


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "empty"),
        ("( a and b )", "expected"),
        ("( not a", "unbalanced"),
        ("( not a ) )", "unbalanced"),
        ("a b", "after a complete formula"),
        ("( a ( xor b ) )", "unknown token 'xor'"),
        ("g", "unknown token 'g'"),
        ("( not  a )", "single spaces"),
        ("( not a ) ", "single spaces"),
        ("( a ( and b ) c )", "expected ')'"),
        ("( ( not a ) )", "expected '('"),
        ("(not a)", "unknown token"),
    ],
)
def test_parse_rejects_text_outside_the_notation(text, problem):
    with pytest.raises(F.FormulaSyntaxError) as info:
        F.parse(text)
    assert problem in str(info.value)


def _careful(text: str):
    """What the careful recursive-descent parser alone makes of ``text`` (a formula or the error message)."""
    tokens = F.tokenize(text)
    p = F._Parser(tokens, text)
    try:
        f = p.formula()
        if p.pos != len(tokens):
            raise p.fail("unexpected token after a complete formula")
        return f
    except F.FormulaSyntaxError as exc:
        return type(exc)


def test_the_fast_reader_accepts_exactly_what_the_careful_parser_accepts():
    """parse() reads with a quick reader and falls back to the careful parser for its message: on valid formulas
    and on every one-token change of them (deleted, doubled, swapped, replaced), both must agree."""
    rng, tokens = random.Random(5), list(F.VOCABULARY)
    for n in range(0, 9):
        for _ in range(4):
            words = G.random_formula_text(n, rng)[0].split(" ")
            variants = [words]
            for k in range(len(words)):
                variants += [words[:k] + words[k + 1 :], words[: k + 1] + words[k:]]
                variants += [words[:k] + [rng.choice(tokens)] + words[k + 1 :]]
                variants += [words[:k] + words[k + 1 : k + 2] + words[k : k + 1] + words[k + 2 :]]
            for variant in variants:
                text = " ".join(variant)
                if not text:
                    continue
                want = _careful(text)
                try:
                    got = F.parse(text)
                except F.FormulaSyntaxError as exc:
                    got = type(exc)
                assert got == want, text
                if not isinstance(got, type):
                    assert F.count_operators(got) == F.count_operators_text(text), text


def test_a_formula_nested_beyond_the_readers_depth_is_one_error_line(tmp_path):
    """Both readers recurse once a level: a line nested thousands deep is a syntax error naming the file and the
    line, not a RecursionError's traceback (and the next shallow formula still reads)."""
    deep = "( not " * 5000 + "a" + " )" * 5000
    with pytest.raises(F.FormulaSyntaxError, match="nested too deeply"):
        F.parse(deep)
    assert F.parse("( not a )") == F.Not(F.Var("a"))
    (tmp_path / "train0").write_text(f"=\ta\ta\n#\t{deep}\tb\n")
    with pytest.raises(D.LogicDataError, match=r"train0, line 2: first formula .* nested too deeply"):
        D.read_examples(tmp_path)


# --------------------------------------------------------------------------- the original files


@pytest.fixture(scope="module")
def sample_examples():
    if not SAMPLE_DIR.is_dir():
        pytest.skip(f"shared logic sample not found at {SAMPLE_DIR}")
    return D.read_examples(SAMPLE_DIR)


def test_every_sample_line_agrees_with_the_relation_and_the_file_rule(sample_examples):
    """THE KEY CHECK: recompute the label of every line of the original files, and the file number."""
    agreed = Counter()
    for ex in sample_examples:
        assert relation(ex.a, ex.b) == ex.label, f"{ex.where}: {ex.label} {ex.text_a} | {ex.text_b}"
        assert ex.file_number == ex.bucket, f"{ex.where}: max ops {ex.max_ops} in file {ex.file_number}"
        agreed[Path(ex.source).name] += 1
    assert agreed == {name: 200 for name in SAMPLE_FILES}
    print(f"\nlogic sample: {sum(agreed.values())} lines agree ({dict(agreed)})")


def test_every_sample_line_round_trips_exactly(sample_examples):
    by_file = {}
    for ex in sample_examples:
        by_file.setdefault(ex.source, []).append(D.format_line(ex.label, ex.a, ex.b) + "\n")
    for source, lines in by_file.items():
        assert "".join(lines) == Path(source).read_text(encoding="utf-8")


def test_sample_has_no_degenerate_formula(sample_examples):
    """Why the generator leaves tautologies and contradictions out by default."""
    for ex in sample_examples:
        for f in (ex.a, ex.b):
            assert F.truth_set(f) not in (F.EMPTY_SET, F.FULL_SET), ex.where


def test_sample_selection_by_split_and_counts(sample_examples):
    assert {ex.split for ex in sample_examples} == {"train"}
    only4 = D.read_examples(SAMPLE_DIR, split="train", buckets=[4])
    assert len(only4) == 200 and {ex.file_number for ex in only4} == {4}
    with pytest.raises(D.LogicDataError, match="no file matches split='test'"):
        D.read_examples(SAMPLE_DIR, split="test")


# --------------------------------------------------------------------------- reader errors


GOOD = "#\ta\t( not b )\n"


@pytest.mark.parametrize(
    "bad_line, problem",
    [
        ("#\ta\n", "expected 3 TAB-separated fields"),
        ("#\ta\tb\tc\n", "found 4"),
        ("x\ta\tb\n", "unknown label 'x'"),
        ("#\t( not a\tb\n", "unbalanced"),
        ("#\ta\t( not z )\n", "unknown token 'z'"),
        ("#\t( a and b )\tb\n", "first formula is not in the notation"),
        ("#\ta\t( ( not a ) )\n", "second formula is not in the notation"),
        ("\n", "empty line"),
    ],
)
def test_reader_errors_name_file_line_and_problem(tmp_path, bad_line, problem):
    path = tmp_path / "train1"
    path.write_text(GOOD + GOOD + bad_line + GOOD, encoding="utf-8")
    with pytest.raises(D.LogicDataError) as info:
        D.read_examples(tmp_path)
    message = str(info.value)
    assert str(path) in message and "line 3" in message and problem in message


def test_reader_errors_for_missing_or_empty_input(tmp_path):
    with pytest.raises(D.LogicDataError, match="no train.*test.* files here"):
        D.read_examples(tmp_path)
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(D.LogicDataError, match="no train"):
        D.read_examples(tmp_path)
    with pytest.raises(D.LogicDataError, match="no such file or directory"):
        D.read_examples(tmp_path / "missing")
    import os

    os.mkfifo(tmp_path / "fifo")  # there, but not a file: said so, never read (it would never end)
    with pytest.raises(D.LogicDataError, match="fifo: not a regular file"):
        D.read_examples(tmp_path / "fifo")
    (tmp_path / "bytes").write_bytes(b"<\ta\t( a ( and b ) )\n" * 3000 + b"\xff\xfe\n")
    with pytest.raises(
        D.LogicDataError, match=r"bytes: not UTF-8 text at line 3001 \(invalid start byte at byte 60000 "
    ):
        D.read_examples(tmp_path / "bytes")  # the line was not known: the file was decoded a block at a time
    (tmp_path / "fifo").unlink()
    (tmp_path / "bytes").unlink()
    (tmp_path / "train2").write_text("", encoding="utf-8")
    with pytest.raises(D.LogicDataError, match="no examples match"):
        D.read_examples(tmp_path)
    with pytest.raises(ValueError, match="unknown split"):
        D.read_examples(tmp_path, split="valid")


def test_reader_single_file_and_misfiled_line(tmp_path):
    path = tmp_path / "train0"
    path.write_text("=\ta\ta\n#\ta\t( not b )\n", encoding="utf-8")
    exs = D.read_examples(path)
    assert [(e.label, e.ops_a, e.ops_b, e.line, e.split, e.file_number) for e in exs] == [
        ("=", 0, 0, 1, "train", 0),
        ("#", 0, 1, 2, "train", 0),
    ]
    with pytest.raises(D.LogicDataError, match=r"line 2: the larger operator count is 1, so the pair belongs in file"):
        D.read_examples(path, check_buckets=True)
    other = tmp_path / "pairs.tsv"
    other.write_text("#\ta\t( not b )\n", encoding="utf-8")
    (ex,) = D.read_examples(other, max_ops=1)
    assert ex.split is None and ex.file_number is None and ex.bucket == 1


# --------------------------------------------------------------------------- generator


def _generate(out: Path, **kw) -> G.GenerationReport:
    cfg = G.GenerateConfig(**{"per_length": 40, "seed": 7, **kw})
    return G.generate_dataset(out, cfg)


def _read_dir(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_generator_is_deterministic_for_a_seed(tmp_path):
    _generate(tmp_path / "a")
    _generate(tmp_path / "b")
    _generate(tmp_path / "c", seed=8)
    a, b, c = (_read_dir(tmp_path / x) for x in "abc")
    assert a == b
    assert a != c
    assert set(a) == {f"{s}{k}" for s in ("train", "test") for k in range(13)}


def test_generated_files_obey_the_split_rule_and_labels(tmp_path):
    report = _generate(tmp_path, max_ops=14, test_count=10)
    exs = D.read_examples(tmp_path, check_buckets=True)
    assert len(exs) == report.n_pairs
    assert not D.relabel_mismatches(exs)
    assert max(ex.max_ops for ex in exs) == 14
    assert all(ex.file_number == 12 for ex in exs if ex.max_ops >= 12)
    pairs_by_bucket = Counter()
    for ex in exs:
        pairs_by_bucket[(ex.file_number, ex.text_a, ex.text_b)] += 1
        for f in (ex.a, ex.b):
            assert F.truth_set(f) not in (F.EMPTY_SET, F.FULL_SET), ex.where
    assert max(pairs_by_bucket.values()) == 1, "a pair occurs twice in a bucket (train and test must not share)"
    assert len(D.select(exs, split="test", buckets=[5])) == 10
    assert len(D.select(exs, split="train", buckets=[5])) == 30
    assert len(D.select(exs, buckets=[0])) == 36  # all distinct pairs of two variables


def test_protocol_selection_on_generated_data(tmp_path):
    _generate(tmp_path)
    train = D.read_examples(tmp_path, split="train", max_ops=6)
    test = D.read_examples(tmp_path, split="test", buckets=range(7, 13))
    assert train and all(ex.split == "train" and ex.max_ops <= 6 for ex in train)
    assert {ex.file_number for ex in test} == set(range(7, 13)) and all(ex.split == "test" for ex in test)


def test_balance_labels_reduces_independence(tmp_path):
    plain = _generate(tmp_path / "plain", per_length=200).label_counts()
    balanced = _generate(tmp_path / "bal", per_length=200, balance_labels=True, pool_factor=5).label_counts()
    assert sum(plain.values()) == sum(balanced.values())
    assert balanced["#"] < 0.5 * plain["#"]
    assert balanced["v"] > plain["v"] and balanced["|"] > plain["|"]


def test_water_fill_is_as_even_as_the_pool_allows():
    pool = [G.Pair(lab, str(i), "a", 0, 0) for lab, n in (("#", 50), ("<", 20), ("=", 2)) for i in range(n)]
    chosen = Counter(p.label for p in G.water_fill(pool, 30))
    assert chosen == {"#": 14, "<": 14, "=": 2}
    assert len(G.water_fill(pool, 100)) == len(pool)


def _ops(text: str) -> int:
    return sum(t in ("not", "and", "or") for t in text.split())


def test_original_mix_matches_the_original_files_shares(tmp_path):
    """The mix measured from Bowman et al.'s train0-train6, reproduced within sampling error."""
    report = _generate(tmp_path, mix="original", per_length=3000, test_count=0, max_ops=6)
    exs = D.read_examples(tmp_path, check_buckets=True)
    assert not D.relabel_mismatches(exs)
    by_bucket = {k: [ex for ex in exs if ex.file_number == k] for k in range(7)}
    for k in range(7):  # training sizes in the original files' proportions (largest: train5)
        assert len(by_bucket[k]) == round(3000 * G.ORIGINAL_TRAIN_SIZES[k] / 34152), k
    for k in (5, 6):  # buckets large enough for shares; small ones run out of distinct pairs
        n = len(by_bucket[k])
        smaller = Counter(min(_ops(ex.text_a), _ops(ex.text_b)) for ex in by_bucket[k])
        for j, share in enumerate(G.ORIGINAL_SMALLER_SIDE[k]):
            assert abs(smaller[j] / n - share) < 0.04, (k, j, smaller[j] / n, share)
        labels = Counter(ex.label for ex in by_bucket[k])
        for lab, share in zip(RELATIONS, G.ORIGINAL_LABELS[k]):
            if share >= 0.05:  # '=' and '^' are rarer than that in random pairs: the pool runs short of them
                # and the others make up about a point, shared in proportion to their shares
                assert abs(labels[lab] / n - share) < 0.015, (k, lab, labels[lab] / n, share)
    ops = [t for ex in exs for f in (ex.text_a, ex.text_b) for t in f.split() if t in ("not", "and", "or")]
    assert abs(ops.count("not") / len(ops) - G.ORIGINAL_NOT_SHARE) < 0.03
    assert report.n_pairs == len(exs)


def test_original_mix_beyond_the_original_buckets_and_not_prob():
    weights = G.original_smaller_side(9)
    assert len(weights) == 10 and sum(weights) == pytest.approx(1.0)
    assert weights[:2] == G.ORIGINAL_SMALLER_SIDE[6][:2] and len(set(weights[2:])) == 1
    assert G.GenerateConfig(mix="original").not_probability == G.ORIGINAL_NOT_SHARE
    assert G.GenerateConfig(mix="original", not_prob=0.5).not_probability == 0.5
    assert G.GenerateConfig().not_probability == 0.5
    n_test, n_train = G.GenerateConfig(mix="original", per_length=1000, test_count=100).bucket_sizes(0)
    assert (n_test, n_train) == (100, round(900 * 30 / 34152))  # test parts are not scaled


def test_fill_to_shares_takes_quotas_then_fills_up():
    pool = [G.Pair(lab, str(i), "a", 0, 0) for lab, n in (("#", 50), ("<", 20), ("=", 2)) for i in range(n)]
    shares = tuple({"#": 0.5, "<": 0.3, "=": 0.2}.get(lab, 0.0) for lab in RELATIONS)
    chosen = G.fill_to_shares(pool, 20, shares)
    # quotas 10 / 6 / 4, but only 2 '=': the 2 missing go to the labels furthest below their shares
    assert Counter(p.label for p in chosen) == {"#": 11, "<": 7, "=": 2}
    assert len(set(map(id, chosen))) == 20
    assert len(G.fill_to_shares(pool, 100, shares)) == len(pool)


def test_config_validation():
    with pytest.raises(ValueError, match="test_fraction"):
        G.GenerateConfig(test_fraction=1.5).validate()
    with pytest.raises(ValueError, match="per_length"):
        G.GenerateConfig(per_length=0).validate()


def test_cli_generate_and_check(tmp_path, capsys):
    out = tmp_path / "gen"
    assert (
        main(
            [
                "logic",
                "generate",
                "--out",
                str(out),
                "--per-length",
                "20",
                "--seed",
                "3",
                "--max-ops",
                "5",
                "--balance-labels",
                "--pool-factor",
                "3",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "wrote" in text and "train labels" in text and "train5" in text
    names = sorted(f"{s}{k}" for s in ("train", "test") for k in range(6))
    assert sorted(p.name for p in out.iterdir() if p.name != MARKER) == names  # the marker: a generated set
    assert main(["logic", "check", str(out)]) == 0
    assert "labels agree, 0 lines break" in capsys.readouterr().out
    (out / "train3").write_text("=\ta\t( not a )\n", encoding="utf-8")
    assert main(["logic", "check", str(out)]) == 1
    assert "label differs" in capsys.readouterr().out
