"""SyntaxGym test suites: the formula language against the format's documented examples, hand-made suites with
known answers under an injected surprisal function, malformed suites and formulas refused, the command."""

from __future__ import annotations

import json
import re

import pytest
import torch

from onlstm.cli import main
from onlstm.data.reader import TextReader
from onlstm.data.vocab import Vocab
from onlstm.models.language_model import LanguageModel, LMConfig
from onlstm.syneval.cli import format_suites
from onlstm.syneval.data import SynevalDataError
from onlstm.syneval.syntaxgym import (
    FormulaError,
    Region,
    circuit,
    evaluate_formula,
    evaluate_suite,
    parse_formula,
    read_suite,
    regions_csv,
    sg_score,
)
from support import REPO, SHARED_DATA

VALUES = {("mismatch", 2): 7.0, ("match", 2): 3.0, ("match", 1): 1.0, ("mismatch", 1): 1.5}


@pytest.mark.parametrize(
    "formula, expected",
    [
        # the examples of SyntaxGym's suite format documentation
        ("(2;%mismatch%) > (2;%match%)", True),
        ("(2;%mismatch%) - (2;%match%) > 0", True),
        ("(2;%mismatch%) > (2;%match%) & (2;%match%) < (2;%mismatch%)", True),
        ("(*;%mismatch%) > (*;%match%)", True),  # * sums every region of the condition: 8.5 > 4
        ("(*;%match%) = 4", True),
        # arithmetic is left to right; a missed third term would flip these
        ("5 - 4 - 3 < 0", True),
        ("5+4=9+1-1", True),
        ("(5-1)+1=5", True),
        ("5-(3+2)=0", True),
        ("(5-3)+((2+1)-(2+2))=1", True),
        # the published suites group with brackets
        ("[(2;%match%) < (2;%mismatch%)] & [(1;%match%) < (1;%mismatch%)]", True),
        ("[(2;%match%) > (2;%mismatch%)] | [(1;%match%) > (1;%mismatch%)]", False),
        ("[(2;%mismatch%)-(2;%match%)]+[(1;%mismatch%)-(1;%match%)]>4.4", True),
        ("[(2;%mismatch%)-(2;%match%)]+[(1;%mismatch%)-(1;%match%)]>4.6", False),
        ("(2;%match%) = 3.0009", True),  # approximately equal: within 1e-3 + 1e-5 * |b|
        ("(2;%match%) = 3.01", False),
        ("(2;%match%) > -1e1", True),
    ],
)
def test_formulas_evaluate_as_documented(formula, expected):
    assert evaluate_formula(parse_formula(formula), VALUES) is expected


def test_and_or_are_left_to_right_with_equal_precedence():
    # (False & True) | True is True; False & (True | True) would be False
    assert evaluate_formula(parse_formula("1 > 2 & 2 > 1 | 3 > 2"), {}) is True


def test_region_names_may_hold_hyphens_and_digits():
    tree = parse_formula("(10;%no-sub_no-matrix2%) > 1")
    assert tree.left == Region(10, "no-sub_no-matrix2")


@pytest.mark.parametrize(
    "formula",
    [
        "(2;%a%) >",
        "(2;%a%) + (2;%b%)",  # a number, not a comparison
        "1 < 2 < 3",
        "5-1+1=5",  # SyntaxGym's reference reads + before -: 5-(1+1); read left to right, 5: ambiguous, refused
        "(1;%a%) - (1;%b%) + (2;%a%) > 0",
        "[(2;%a%) > 1)",
        "((2;%a%) > 1",
        "(2;%a%) > 1 + (1 > 0)",
        "(2;%a%) > 1 &",
        "__import__('os').system('touch x') > 0",
        "(2;%%) > 1",
        "(x;%a%) > 1",
        "",
    ],
)
def test_malformed_formulas_are_refused(formula):
    with pytest.raises(FormulaError):
        parse_formula(formula)


def suite_dict(**changes) -> dict:
    """Two items, two conditions; region 2 is the critical one."""

    def item(n, match2, mismatch2):
        regions = lambda r2: [
            {"region_number": 1, "content": "The dog"},
            {"region_number": 2, "content": r2},
            {"region_number": 3, "content": "here."},
        ]
        return {
            "item_number": n,
            "conditions": [
                {"condition_name": "match", "regions": regions(match2)},
                {"condition_name": "mismatch", "regions": regions(mismatch2)},
            ],
        }

    suite = {
        "meta": {"name": "hand", "metric": "sum"},
        "region_meta": {"1": "subject", "2": "verb", "3": "end"},
        "predictions": [
            {"type": "formula", "formula": "(2;%mismatch%) > (2;%match%)"},
            {"type": "formula", "formula": "(*;%mismatch%) > (*;%match%)"},
        ],
        "items": [item(1, "runs", "run"), item(2, "barks", "bark fast")],
    }
    suite.update(changes)
    return suite


BITS = {"the": 1.0, "dog": 2.0, "runs": 1.0, "run": 5.0, "barks": 4.0, "bark": 3.0, "fast": 0.5, "here": 2.0}


def injected(token_lists):
    """Surprisal of a token = BITS (unknown: 9), the end of the sentence 100 (it must count nowhere)."""
    return [[BITS.get(t, 9.0) for t in toks] + [100.0] for toks in token_lists]


def write(tmp_path, suite: dict, name="suite.json"):
    path = tmp_path / name
    path.write_text(json.dumps(suite))
    return path


def test_a_hand_made_suite_has_the_known_answers(tmp_path):
    suite = read_suite(write(tmp_path, suite_dict()))
    vocab = Vocab(["<eos>", "<unk>", *BITS])
    result = evaluate_suite(suite, vocab, injected)
    # item 1: run 5 > runs 1 (holds); item 2: bark fast 3.5 < barks 4 (fails); whole sentences: 10 > 6, 8.5 > 9 no
    assert result["outcomes"] == {1: [True, True], 2: [False, False]}
    assert [p["accuracy"] for p in result["predictions"]] == [0.5, 0.5]
    assert result["accuracy"] == 0.5 and result["items"] == 2 and result["oov_types"] == []
    assert result["covered_items"] == 2 and result["covered_accuracy"] == 0.5
    region2 = {
        (r["item_number"], r["condition_name"]): r["metric_value"] for r in result["regions"] if r["region_number"] == 2
    }
    assert region2 == {(1, "match"): 1.0, (1, "mismatch"): 5.0, (2, "match"): 4.0, (2, "mismatch"): 3.5}
    csv = regions_csv([("m", [result])]).splitlines()
    assert csv[0].startswith("model,suite,item_number,condition_name,region_number") and len(csv) == 1 + 2 * 2 * 3


def test_suite_accuracy_needs_every_prediction_of_an_item(tmp_path):
    s = suite_dict()
    s["items"][1]["conditions"][1]["regions"][1]["content"] = "bark bark"  # 6 > 4; whole sentence 11 > 9
    result = evaluate_suite(read_suite(write(tmp_path, s)), Vocab(["<eos>", "<unk>", *BITS]), injected)
    assert result["outcomes"][2] == [True, True] and result["accuracy"] == 1.0
    s["predictions"].append({"type": "formula", "formula": "(1;%match%) > 100"})
    result = evaluate_suite(read_suite(write(tmp_path, s)), Vocab(["<eos>", "<unk>", *BITS]), injected)
    assert result["accuracy"] == 0.0 and [p["accuracy"] for p in result["predictions"]] == [1.0, 1.0, 0.0]


def test_coverage_counts_items_whose_every_word_is_known(tmp_path):
    s = suite_dict()
    s["items"][1]["conditions"][0]["regions"][0]["content"] = "The zebra"  # item 2 (which fails) not covered
    result = evaluate_suite(read_suite(write(tmp_path, s)), Vocab(["<eos>", "<unk>", *BITS]), injected)
    assert result["oov_types"] == ["zebra"] and result["covered_items"] == 1
    assert result["accuracy"] == 0.5 and result["covered_accuracy"] == 1.0
    none = evaluate_suite(read_suite(write(tmp_path, s)), Vocab(["<eos>", "<unk>"]), injected)
    assert none["covered_items"] == 0 and none["covered_accuracy"] is None


def test_the_mean_metric_and_the_older_relation_form(tmp_path):
    s = suite_dict(meta={"name": "m", "metric": "mean"})
    s["predictions"] = [{"relation": "greaterthan", "region_number": 2, "l_operand": "mismatch", "r_operand": "match"}]
    result = evaluate_suite(read_suite(write(tmp_path, s)), Vocab(["<eos>", "<unk>", *BITS]), injected)
    # item 2: mean(bark, fast) = 1.75 < 4
    assert result["outcomes"] == {1: [True], 2: [False]}


def test_capitals_numbers_and_punctuation_are_read_as_the_training_text(tmp_path):
    # PTB's convention: "The"/"No" are the words the and no, "3" is N, the final "." is not read
    s = suite_dict()
    s["items"][0]["conditions"][0]["regions"][0]["content"] = "No dog,"
    s["items"][0]["conditions"][1]["regions"][0]["content"] = "The 3 dogs"
    vocab = Vocab(["<eos>", "<unk>", "N", "no", *BITS])
    result = evaluate_suite(read_suite(write(tmp_path, s)), vocab, injected)
    tokens = {(r["item_number"], r["condition_name"], r["region_number"]): r["tokens"] for r in result["regions"]}
    assert tokens[(1, "match", 1)] == "no dog" and tokens[(1, "mismatch", 1)] == "the N dogs"
    assert tokens[(1, "match", 3)] == "here" and result["oov_types"] == ["dogs"]
    assert result["not_scorable_items"] == 0


def test_a_final_punctuation_region_is_scored_by_the_end_of_the_sentence(tmp_path):
    s = suite_dict()
    for item in s["items"]:
        for cond in item["conditions"]:
            cond["regions"][2]["content"] = " . "
    s["predictions"].append({"type": "formula", "formula": "(3;%match%) = 100"})
    # a model without punctuation: the region asks whether the sentence may end there, answered by <eos> (100)
    ptb = evaluate_suite(read_suite(write(tmp_path, s)), Vocab(["<eos>", "<unk>", *BITS]), injected)
    region3 = [r for r in ptb["regions"] if r["region_number"] == 3]
    assert {(r["metric_value"], r["tokens"], r["scored_by"]) for r in region3} == {(100.0, "<eos>", "end of sentence")}
    assert ptb["not_scorable_items"] == 0 and ptb["predictions"][2]["accuracy"] == 1.0
    # a model that reads punctuation scores the mark itself (unknown to BITS: 9)
    cased = TextReader(lowercase=True, number=None, punctuation=True)
    reads = evaluate_suite(read_suite(write(tmp_path, s)), Vocab(["<eos>", "<unk>", ".", *BITS]), injected, cased)
    assert {r["metric_value"] for r in reads["regions"] if r["region_number"] == 3} == {9.0}


def test_a_region_the_model_reads_nothing_of_makes_its_item_not_scorable(tmp_path, capsys):
    s = suite_dict()
    s["items"][1]["conditions"][1]["regions"][1]["content"] = "--"  # item 2's critical region: punctuation only
    result = evaluate_suite(read_suite(write(tmp_path, s)), Vocab(["<eos>", "<unk>", *BITS]), injected)
    assert result["items"] == 2 and result["scored_items"] == 1 and result["not_scorable_items"] == 1
    assert result["not_scorable"] == [
        {"item_number": 2, "regions": [{"condition": "mismatch", "region": 2, "content": "--"}]}
    ]
    assert result["outcomes"] == {1: [True, True]} and result["accuracy"] == 1.0  # item 1 alone, never a 0
    empty = [r for r in result["regions"] if r["scored_by"] == "nothing read"]
    assert [(r["item_number"], r["metric_value"]) for r in empty] == [(2, None)]
    # a region the suite itself leaves empty is part of the design (its sum is 0), not a region unread
    s["items"][1]["conditions"][1]["regions"][1]["content"] = ""
    assert evaluate_suite(read_suite(write(tmp_path, s)), Vocab(["<eos>", *BITS]), injected)["not_scorable_items"] == 0


def test_the_command_names_items_not_scorable_apart(tmp_path, capsys):
    model = tiny_model(tmp_path)
    s = suite_dict()
    s["items"][1]["conditions"][1]["regions"][1]["content"] = "--"
    path = write(tmp_path, s)
    assert main(["syneval", "--checkpoint", str(model), "--suite", str(path), "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["models"][0]["suites"]
    assert result["not_scorable_items"] == 1 and result["not_scorable"][0]["item_number"] == 2
    assert result["scored_items"] == 1 and set(result["outcomes"]) == {"1"}
    assert main(["syneval", "--checkpoint", str(model), "--suite", str(path)]) == 0
    text = capsys.readouterr().out
    assert "1 scored of 2" in text and "not scorable: 1 items" in text and "'--'" in text and "items 2" in text


def npi_suite() -> dict:
    """npi_orc_any's first item as published: the "No" and "The" conditions differ only by their licensor."""
    words = ["author", "that", "the", "senators", "liked", "has had", "any", "success."]
    conds = {"neg_pos": "No", "pos_pos": "The"}
    return {
        "meta": {"name": "npi", "metric": "sum"},
        "region_meta": {str(k): f"r{k}" for k in range(1, 10)},
        "predictions": [{"type": "formula", "formula": "(8;%neg_pos%) < (8;%pos_pos%)"}],
        "items": [
            {
                "item_number": 1,
                "conditions": [
                    {"condition_name": name, "regions": [{"region_number": k + 1, "content": c}
                                                         for k, c in enumerate([first, *words])]}
                    for name, first in conds.items()
                ],
            }
        ],
    }  # fmt: skip


def test_no_and_the_reach_a_ptb_model_as_words(tmp_path, capsys):
    words = ["<eos>", "<unk>", "N", "no", "the", "author", "that", "senators", "liked", "has", "had", "any", "success"]
    torch.manual_seed(0)
    model = LanguageModel(LMConfig(vocab_size=len(words), emb_size=8, hidden_sizes=[12, 8], chunk_size=4)).eval()
    model.save_pretrained(tmp_path / "ptb", words, run_config={"text": TextReader.detect(words).to_dict()})
    path = write(tmp_path, npi_suite())
    assert main(["syneval", "--checkpoint", str(tmp_path / "ptb"), "--suite", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    (result,) = json.loads(captured.out)["models"][0]["suites"]
    assert "note" not in captured.err  # the model says how it reads English
    rows = {(r["condition_name"], r["region_number"]): r for r in result["regions"]}
    assert rows[("neg_pos", 1)]["tokens"] == "no" and rows[("pos_pos", 1)]["tokens"] == "the"
    assert result["oov_types"] == [] and result["covered_items"] == 1
    assert rows[("neg_pos", 8)]["metric_value"] != pytest.approx(rows[("pos_pos", 8)]["metric_value"], abs=1e-6)
    # by hand: the model reads "no author ... any success" from <eos>
    lm = LanguageModel.from_pretrained(tmp_path / "ptb")
    (bits,) = lm.surprisals("No author that the senators liked has had any success.")
    assert rows[("neg_pos", 8)]["metric_value"] == pytest.approx(float(bits[8]), abs=1e-5)


SUITES = SHARED_DATA / "syntaxgym" / "suites"
#: Hu et al.'s circuits and how many of their 31 scored suites each holds (their notebooks/main.py at 43f1f86).
PUBLISHED_CIRCUITS = {"Agreement": 3, "Center Embedding": 2, "Garden-Path Effects": 6, "Gross Syntactic State": 4,
                      "Licensing": 10, "Long-Distance Dependencies": 6}  # fmt: skip


def test_the_sg_score_is_hu_et_al_s_mean_over_their_suites_by_hand():
    """Their rule: fgd-embed3/4, gardenpath* and nn-nv* are left out; a suite not scored (None) is named, not 0; a
    suite of one's own counts in the score but in no circuit; circuits by the name's tag."""
    got = sg_score({"number_src": 0.2, "number_orc": 0.4, "center_embed": 1.0, "fgd-embed3": 0.0, "nn-nv-rpl": 0.0,
                    "npz_ambig": None, "my_suite": 0.6})  # fmt: skip
    assert got["score"] == pytest.approx((0.2 + 0.4 + 1.0 + 0.6) / 4) and (got["suites"], got["of"]) == (4, 5)
    assert got["not_scored"] == ["npz_ambig"] and got["left_out"] == ["fgd-embed3", "nn-nv-rpl"]
    assert got["by_circuit"] == {"Agreement": {"score": pytest.approx(0.3), "suites": 2},
                                 "Center Embedding": {"score": 1.0, "suites": 1}}  # fmt: skip
    assert got["mean_all"] == pytest.approx(2.2 / 6)
    assert circuit("subordination_orc-orc") == "Gross Syntactic State" and circuit("reflexive_prep_fem") == "Licensing"
    assert circuit("fgd-embed4") == "Long-Distance Dependencies" and circuit("nn-nv-rpl") is None
    assert sg_score({"npz_obj": None})["score"] is None and sg_score({})["mean_all"] is None


def test_the_published_results_script_averages_seeds_of_suite_accuracies(tmp_path, capsys):
    """docs/results/records/sg_published.py on a results file in Hu et al.'s layout (a row per seed, suite and
    item): seed 1 scores 0.5 and 1.0 on two suites (0.75), seed 2 0.0 and 0.5 (0.25); fgd-embed3 left out;
    --unscored takes number_src out of the mean."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sg_published", REPO / "docs/results/records/sg_published.py")
    script = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(script)  # type: ignore[union-attr]
    rows = ["model,suite,item,correct"]
    for seed, marks in (("0001", {"number_src": "TF", "center_embed": "TT", "fgd-embed3": "FF"}),
                        ("0002", {"number_src": "FF", "center_embed": "TF", "fgd-embed3": "TT"})):  # fmt: skip
        rows += [
            f"vanilla_bllip-xs_{seed},{suite},{k},{m == 'T'}" for suite, ms in marks.items() for k, m in enumerate(ms)
        ]
    (tmp_path / "syntaxgym_results_vanilla_bllip-xs.csv").write_text("\n".join(rows) + "\n")
    assert script.main([str(tmp_path), "--models", "vanilla"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0]
        == "vanilla bllip-xs: SG score 50.0 ± 35.4 over 2 seeds (75.0, 25.0); 2 of 2 suites; mean over every suite scored 50.0"
    )
    assert "  Agreement: 25.0 (1 suites)" in lines and "  Center Embedding: 75.0 (1 suites)" in lines
    assert script.main([str(tmp_path), "--models", "vanilla", "--unscored", "number_src"]) == 0
    assert "SG score 75.0 ± 35.4 over 2 seeds (100.0, 50.0); 1 of 2 suites" in capsys.readouterr().out
    assert script.main([str(tmp_path), "--models", "ordered-neurons"]) == 2


@pytest.mark.slow
def test_the_published_suites_on_a_small_ptb_model(tmp_path, capsys):
    """Every published suite parses and is scored by an untrained model with Mikolov's PTB vocabulary; no region
    of subordination* is scored 0, and the items not scorable are counted (the comma regions of npz*)."""
    if not SUITES.is_dir() or not (SHARED_DATA / "ptb" / "ptb.train.txt").is_file():
        pytest.skip(f"needs the SyntaxGym suites at {SUITES} and Mikolov's PTB text")
    words = list(dict.fromkeys(["<eos>", *(SHARED_DATA / "ptb" / "ptb.train.txt").read_text().split()]))
    torch.manual_seed(0)
    model = LanguageModel(LMConfig(vocab_size=len(words), emb_size=8, hidden_sizes=[8], chunk_size=4)).eval()
    model.save_pretrained(tmp_path / "ptb", words, run_config={"text": TextReader.detect(words).to_dict()})
    assert main(["syneval", "--checkpoint", str(tmp_path / "ptb"), "--suite", str(SUITES), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    results = {r["suite"]: r for r in report["models"][0]["suites"]}
    assert len(results) == len(list(SUITES.glob("*.json"))) == 34
    for name, r in results.items():
        assert r["scored_items"] + r["not_scorable_items"] == r["items"]
        if name.startswith("subordination"):
            assert r["not_scorable_items"] == 0
            ends = [x for x in r["regions"] if x["scored_by"] == "end of sentence"]
            assert len(ends) == 2 * r["items"] and all(x["metric_value"] > 0 for x in ends)
            assert all(x["metric_value"] not in (0, None) for x in r["regions"] if x["content"].strip())
        # the items not scorable are exactly those with text the model reads nothing of
        unread = {x["item_number"] for x in r["regions"] if x["scored_by"] == "nothing read"}
        assert {e["item_number"] for e in r["not_scorable"]} == unread
    counts = {name: r["not_scorable_items"] for name, r in results.items() if r["not_scorable_items"]}
    assert counts == {name: 24 for name in ("npz_ambig", "npz_ambig_mod", "npz_obj", "npz_obj_mod")}, counts
    # Hu et al.'s score: 31 of the 34 suites in six circuits; the four npz suites (commas) not scored, named
    sg = report["models"][0]["sg_score"]
    assert (sg["suites"], sg["of"], sg["left_out"]) == (27, 31, ["fgd-embed3", "fgd-embed4", "nn-nv-rpl"])
    assert sg["not_scored"] == sorted(counts)
    scored = {c: v["suites"] for c, v in sg["by_circuit"].items()}
    assert scored == PUBLISHED_CIRCUITS | {"Garden-Path Effects": 2}  # mvrr and mvrr_mod
    text = format_suites(report)
    assert f"SG score (Hu et al. 2020): {sg['score']:.3f} over 27 of 31 suites (not scored: npz_ambig, npz_ambig_mod, " \
           "npz_obj, npz_obj_mod; left out by their rule: fgd-embed3, fgd-embed4, nn-nv-rpl)" in text  # fmt: skip


@pytest.mark.parametrize(
    "change, message",
    [
        ({"region_meta": None}, "no region_meta"),
        ({"meta": {"metric": "product"}}, "unknown metric"),
        ({"predictions": []}, "no predictions"),
        ({"predictions": [{"type": "formula", "formula": "(2;%mismatch%) >> 1"}]}, "malformed formula"),
        ({"predictions": [{"type": "formula", "formula": "(2;%other%) > 1"}]}, "condition 'other'"),
        ({"predictions": [{"type": "formula", "formula": "(4;%match%) > 1"}]}, "region 4"),
        ({"region_meta": {"1": "a", "2": "b"}}, "region 3 is not in region_meta"),
        ({"items": []}, "no items"),
    ],
)
def test_malformed_suites_are_refused(tmp_path, change, message):
    with pytest.raises(SynevalDataError, match=message):
        read_suite(write(tmp_path, suite_dict(**change)))


def _damaged(where: str) -> dict:
    """The hand-made suite with one part missing or of the wrong kind."""
    s = suite_dict()
    if where == "no meta":
        del s["meta"]
    elif where == "item_number":
        s["items"][0]["item_number"] = 1.5
    else:  # a region's content that is no text
        s["items"][0]["conditions"][0]["regions"][1]["content"] = {"content 5": 5, "content null": None}[where]
    return s


@pytest.mark.parametrize(
    "where, message",
    [
        ("no meta", "suite.json: no meta; is it a SyntaxGym test suite"),
        ("item_number", "suite.json: item_number must be a whole number such as 3, got 1.5;"),
        ("content 5", "suite.json item 1 condition 'match': region 2's content must be a string (its text), got 5;"),
        ("content null", "condition 'match': region 2's content must be a string (its text), got None;"),
    ],
)
def test_a_damaged_part_is_named_for_what_is_wrong_with_it(tmp_path, capsys, where, message):
    """Not "is not a number" for 1.5 nor "a region is not an object" for a region whose text is no string; a
    suite without meta is refused as docs/syneval.md says (the published suites all have it)."""
    path = write(tmp_path, _damaged(where))
    with pytest.raises(SynevalDataError, match=re.escape(message)):
        read_suite(path)
    assert main(["syneval", "--checkpoint", str(tmp_path / "never read"), "--suite", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_duplicate_items_and_broken_json_are_refused(tmp_path):
    s = suite_dict()
    s["items"][1]["item_number"] = 1
    with pytest.raises(SynevalDataError, match="same item_number"):
        read_suite(write(tmp_path, s))
    s["items"][1]["item_number"] = "1"  # the same item written as text: its outcomes would share one JSON key
    with pytest.raises(SynevalDataError, match="same item_number"):
        read_suite(write(tmp_path, s))
    s["items"][1]["item_number"] = "one"
    with pytest.raises(SynevalDataError, match="item_number must be a whole number such as 3, got 'one'"):
        read_suite(write(tmp_path, s))
    s["items"][1]["item_number"] = " 7"
    assert [number for number, _ in read_suite(write(tmp_path, s)).items] == [1, 7]
    bad = tmp_path / "broken.json"
    bad.write_text('{"meta": ')
    with pytest.raises(SynevalDataError, match="cannot read the suite"):
        read_suite(bad)


def tiny_model(tmp_path):
    torch.manual_seed(0)
    words = ["<eos>", "<unk>", *BITS]
    model = LanguageModel(LMConfig(vocab_size=len(words), emb_size=8, hidden_sizes=[12, 8], chunk_size=4)).eval()
    model.save_pretrained(tmp_path / "model", words)
    return tmp_path / "model"


def test_the_command_scores_suites_and_writes_regions(tmp_path, capsys):
    model = tiny_model(tmp_path)
    a, b = write(tmp_path, suite_dict()), write(tmp_path, suite_dict(meta={"name": "other"}), "b.json")
    out = tmp_path / "out"
    args = ["syneval", "--checkpoint", str(model), "--suite", str(a), "--suite", str(b), "--out", str(out), "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["suite"] for r in report["models"][0]["suites"]] == ["hand", "other"]
    # the command's region values are the model's surprisals: the same through LanguageModel.surprisals
    lm = LanguageModel.from_pretrained(model)
    result = evaluate_suite(read_suite(a), lm.vocab, lambda toks: lm.surprisals(toks))
    assert report["models"][0]["suites"][0]["accuracy"] == result["accuracy"]
    assert [r["metric_value"] for r in report["models"][0]["suites"][0]["regions"]] == pytest.approx(
        [r["metric_value"] for r in result["regions"]]
    )
    assert sorted(p.name for p in out.iterdir()) == [".onlstm-output.json", "regions.csv", "results.json"]
    assert len((out / "regions.csv").read_text().splitlines()) == 1 + 2 * (2 * 2 * 3)
    # a folder stands for its *.json suites, in name order
    folder = tmp_path / "suites"
    folder.mkdir()
    a.rename(folder / "a.json")
    b.rename(folder / "b.json")
    assert main(["syneval", "--checkpoint", str(model), "--suite", str(folder)]) == 0
    text = capsys.readouterr().out
    assert text.index("hand") < text.index("other") and "covered" in text
    # suites of one's own: their mean, and no SG score (none of Hu et al.'s suites among them)
    mean = (report["models"][0]["suites"][0]["accuracy"] + report["models"][0]["suites"][1]["accuracy"]) / 2
    assert f"  mean over every suite scored: {mean:.3f}" in text and "SG score" not in text


def test_the_command_refuses_a_malformed_suite_in_one_line(tmp_path, capsys):
    model = tiny_model(tmp_path)
    bad = write(tmp_path, suite_dict(predictions=[{"type": "formula", "formula": "(2;%match%) <"}]))
    assert main(["syneval", "--checkpoint", str(model), "--suite", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "malformed formula" in err and str(bad) in err
    data = tmp_path / "pairs.tsv"
    data.write_text("simple_agrmt\tthe dog runs\tthe dog run\n")
    assert main(["syneval", "--checkpoint", str(model), "--suite", str(bad), "--data", str(data)]) == 2
    assert "either --data" in capsys.readouterr().err
    good = write(tmp_path, suite_dict(), "good.json")
    assert main(["syneval", "--checkpoint", str(model), "--suite", str(good), "--word-only"]) == 2  # once ignored
    assert "--word-only compares the first differing word" in capsys.readouterr().err


def _with_list_at(where: str) -> dict:
    """The hand-made suite with a list where ``where`` (a scalar field) should be."""
    s = suite_dict()
    if where == "metric":
        s["meta"]["metric"] = ["sum"]
    elif where == "item_number":
        s["items"][0]["item_number"] = [1]
    elif where == "region_number":
        s["items"][0]["conditions"][0]["regions"][0]["region_number"] = [1]
    else:
        s["predictions"] = [{"relation": ["greaterthan"], "region_number": 2, "l_operand": "a", "r_operand": "b"}]
    return s


def _hostile_suite(tmp_path, case: str):
    path = tmp_path / f"{case}.json"
    if case == "nested":
        path.write_text("[" * 100_000 + "]" * 100_000)
        return path
    if case == "long formula":
        formula = " + ".join(["(2;%match%)"] * 1000) + " > 0"
        return write(tmp_path, suite_dict(predictions=[{"type": "formula", "formula": formula}]), path.name)
    if case == "deep formula":
        formula = "(" * 5000 + "(2;%match%)" + ")" * 5000 + " > 0"
        return write(tmp_path, suite_dict(predictions=[{"type": "formula", "formula": formula}]), path.name)
    if case == "surrogate":  # json.dumps writes the lone surrogate as the escape \ud800, as a hostile file would
        return write(tmp_path, suite_dict(meta={"name": "bad \ud800 name", "metric": "sum"}), path.name)
    return write(tmp_path, _with_list_at(case), path.name)


HOSTILE_SUITES = ["metric", "item_number", "region_number", "relation", "nested", "long formula", "deep formula"]


@pytest.mark.parametrize("case", [*HOSTILE_SUITES, "surrogate"])
def test_hostile_suites_are_refused_in_one_line_before_scoring(tmp_path, capsys, monkeypatch, case):
    model = tiny_model(tmp_path)
    path, out = _hostile_suite(tmp_path, case), tmp_path / "out"

    def never(*args, **kwargs):
        raise AssertionError("a malformed suite was scored")

    monkeypatch.setattr("onlstm.syneval.syntaxgym.evaluate_suite", never)
    assert main(["syneval", "--checkpoint", str(model), "--suite", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and str(path) in err, err[-2000:]
    assert not out.exists()


@pytest.mark.parametrize("metric", ["mean", "median", "max", "min", "range"])
def test_an_empty_region_is_null_in_the_json_never_nan(tmp_path, capsys, metric):
    model = tiny_model(tmp_path)
    s = suite_dict(meta={"name": "m", "metric": metric})
    # region 3 holds only a comma, which a model trained without punctuation does not read: no token (a final
    # "." would be scored by <eos>), so its items are not scorable and its value is no number
    for item in s["items"]:
        for cond in item["conditions"]:
            cond["regions"][2]["content"] = ","
    path, out = write(tmp_path, s), tmp_path / "out"
    assert main(["syneval", "--checkpoint", str(model), "--suite", str(path), "--out", str(out), "--json"]) == 0
    printed = capsys.readouterr().out
    for text in (printed, (out / "results.json").read_text()):
        json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))  # strict JSON
    regions = json.loads(printed)["models"][0]["suites"][0]["regions"]
    assert {r["metric_value"] is None for r in regions} == {True, False}
    assert all(r["metric_value"] is None for r in regions if r["region_number"] == 3)
