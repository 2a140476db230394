"""Marvin & Linzen's suite generated from its grammar (onlstm.data.marvin_linzen): every pair of the shared
sample (drawn from the published suite) is generated, in the condition the sample's stratification says; hand
cases of the number rules and the repeat rule; counts from the lexicon; the command's file read back by syneval."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from onlstm.cli import main
from onlstm.data.marvin_linzen import AGREEMENT_WORDS, CASES, FILE, NPI_CASES, NPI_WORDS, generate, other_number
from onlstm.syneval.data import read_items
from support import SHARED_DATA

SAMPLE = SHARED_DATA / "syneval-sample" / "syneval_sample.tsv"


@pytest.fixture(scope="module")
def rows():
    return list(generate())


def test_every_pair_of_the_published_sample_is_generated_in_balanced_conditions(rows):
    """The sample's 1,300 rows (50 a case, NPI triples as two rows) were drawn from the published suite,
    stratified over each case's conditions: each is one generated pair (or grammatical-intrusive pair of a
    triple), of one condition, and the rows of a case spread over all its conditions within one of each other."""
    if not SAMPLE.is_file():
        pytest.skip(f"needs the Marvin & Linzen sample at {SAMPLE}")
    where: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    conditions: dict[str, set[str]] = defaultdict(set)
    for case, condition, good, bad, intrusive in rows:
        where[case, good, bad].add(condition)
        conditions[case].add(condition)
        if intrusive is not None:
            where[f"{case}:intrusive", good, intrusive].add(condition)
    spread: dict[str, Counter] = defaultdict(Counter)
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    for line in lines:
        case, good, bad = line.split("\t")
        found = where.get((case, good, bad), set())
        assert len(found) == 1, f"{line!r}: generated in {sorted(found) or 'no condition'}"
        spread[case].update(found)
    assert len(lines) == 1300 and len(spread) == 26
    # an NPI case's i-th row and its i-th `:intrusive` row are the three sentences of one generated triple
    triples = {(case, good, bad, intrusive) for case, _, good, bad, intrusive in rows if intrusive is not None}
    by_case: dict[str, list[list[str]]] = defaultdict(list)
    for line in lines:
        by_case[line.split("\t")[0]].append(line.split("\t")[1:])
    for case in NPI_CASES:
        pairs = zip(by_case[case], by_case[f"{case}:intrusive"], strict=True)
        assert all((case, g, b, i) in triples and g == g2 for (g, b), (g2, i) in pairs), case
    for case, counts in spread.items():
        assert set(counts) == conditions[case.split(":")[0]] and max(counts.values()) - min(counts.values()) <= 1


def test_the_number_rules_and_hand_made_sentences():
    assert other_number("is tall", verb=True) == "are tall" and other_number("laughs", verb=True) == "laugh"
    assert other_number("knows many different foreign languages", True) == "know many different foreign languages"
    assert other_number("taxi driver", False) == "taxi drivers" and other_number("herself", False) == "themselves"
    got = {(c, g, b, i) for c, _, g, b, i in generate(["simple_agrmt", "vp_coord", "simple_npi_anim"])}
    assert ("simple_agrmt", "the author laughs", "the author laugh", None) in got
    assert ("simple_agrmt", "the authors are tall", "the authors is tall", None) in got
    assert ("vp_coord", "the pilots smile and swim", "the pilots smile and swims", None) in got
    triple = ("simple_npi_anim", "few pilots will ever be famous", "many pilots will ever be famous")
    assert (*triple, "some pilots will ever be famous") in got
    # the repeat rule: a sentence never ends in the phrase (in either number) it already holds
    assert not any(c == "vp_coord" and g.split(" and ")[0].endswith(g.split(" and ")[1]) for c, g, *_ in got)
    assert not any("are tall and is tall" in b or "is tall and are tall" in b for _, _, b, _ in got)


def test_counts_follow_from_the_lexicon(rows):
    """simple_agrmt: every subject with every verb phrase, in both numbers; vp_coord: ordered pairs of two different
    verb phrases; the cross-clause agreement cases: subject x attractor x embedded verb x verb, four conditions."""
    counts = Counter(case for case, *_ in rows)
    nouns, verbs = len(AGREEMENT_WORDS["MS"]), len(AGREEMENT_WORDS["MV"])
    assert counts["simple_agrmt"] == 2 * nouns * verbs
    assert counts["vp_coord"] == 2 * nouns * verbs * (verbs - 1)
    across = nouns * len(AGREEMENT_WORDS["ES"]) * len(AGREEMENT_WORDS["EV"]) * verbs
    assert counts["obj_rel_across_anim"] == counts["obj_rel_within_anim"] == 4 * across
    simple_npi = len(NPI_WORDS["NO"]) * len(NPI_WORDS["MS"]) * len(NPI_WORDS["APMV"])
    assert counts["simple_npi_anim"] == 2 * simple_npi  # past and future
    assert list(counts) == list(CASES) and sum(counts.values()) == len(rows)
    for case, condition, good, bad, intrusive in rows:  # minimal pairs: the same length, differing somewhere
        assert good != bad and len(good.split()) == len(bad.split()), (case, condition, good, bad)
        assert (intrusive is not None) == (case in NPI_CASES)


def test_the_command_writes_what_syneval_reads(tmp_path, capsys):
    out = tmp_path / "ml"
    assert (
        main(["data", "marvin-linzen", "--out", str(out), "--case", "simple_agrmt", "--case", "simple_npi_anim"]) == 0
    )
    assert "wrote 260 items of 2 cases" in capsys.readouterr().out
    items = read_items(out / FILE)
    expected = [r for r in generate(["simple_agrmt", "simple_npi_anim"])]
    assert [(i.case, i.condition, i.grammatical, i.ungrammatical, i.intrusive) for i in items] == expected
    again = ["--case", "simple_agrmt", "--case", "simple_agrmt"]  # its own folder, replaced; a case named twice
    assert main(["data", "marvin-linzen", "--out", str(out), *again]) == 0 and len(read_items(out / FILE)) == 140
    assert main(["data", "marvin-linzen", "--out", str(out), "--case", "nope"]) == 2
    assert "no case nope in Marvin & Linzen's suite" in capsys.readouterr().err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main(["data", "marvin-linzen", "--out", str(mine)]) == 2 and (mine / "notes.txt").read_text() == "keep"


#: The published suite's items per case and condition: the pickles of EMNLP2018/templates/ in
#: github.com/BeckyMarvin/LM_syneval at edb7378, read by onlstm.syneval.data.read_items (the whole suite compared
#: item for item: docs/results/records/ml_published_check.py, docs/syneval.md). 2,800 a condition unless listed.
PUBLISHED = {
    "long_vp_coord": 200, "npi_across_anim": 2400, "npi_across_inanim": 2880, "prep_anim": 4200, "prep_inanim": 1400,
    "reflexive_sent_comp": 840, "reflexives_across": 5600, "sent_comp": 420, "simple_agrmt": 70,
    "simple_npi_anim": 60, "simple_npi_inanim": 72, "simple_reflexives": 140, "vp_coord": 420,
}  # fmt: skip


def test_every_condition_holds_as_many_items_as_the_published_suite(rows):
    """Each case's conditions (2 or 4; NPI: past and future) and the published number of items in each."""
    counts = Counter((case, condition) for case, condition, *_ in rows)
    conditions = Counter(case for case, _ in counts)
    for (case, condition), n in counts.items():
        assert n == PUBLISHED.get(case, 2800), (case, condition, n)
    assert all(conditions[c] == (2 if c in NPI_CASES or "coord" in c or c.startswith("simple") else 4) for c in CASES)
    assert sum(counts.values()) == 163_124
