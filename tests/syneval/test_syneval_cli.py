"""``onlstm syneval`` end to end on tiny language models trained in the test."""

from __future__ import annotations

import json
import random

import pytest

from onlstm.cli import main
from onlstm.models.language_model import load_language_model_run
from onlstm.syneval.data import read_items
from onlstm.syneval.evaluate import score_items
from support import TINY_LM

NOUNS = ["author", "pilot", "farmer"]
VERBS = ["laugh", "swim", "smile"]

SAMPLE = (
    "simple_agrmt\tthe author laughs\tthe author laugh\n"
    "simple_agrmt\tthe pilots swim\tthe pilots swims\n"
    "simple_agrmt\tthe surgeon smiles\tthe surgeon smile\n"  # surgeon: never seen in training
    "subj_rel\tthe author that likes the pilots laughs\tthe author that likes the pilots laugh\n"
    "simple_npi_anim\tno authors will ever laugh\tmost authors will ever laugh\n"
    "simple_npi_anim:intrusive\tno authors will ever laugh\tthe authors will ever laugh\n"
)


def agreement_corpus(dir, seed=0):
    """Sentences with subject-verb agreement over a few words, in the PTB layout."""
    r = random.Random(seed)

    def sentence():
        n, v = r.choice(NOUNS), r.choice(VERBS)
        plural = r.random() < 0.5
        subj = f"the {n}s" if plural else f"the {n}"
        verb = v if plural else v + "s"
        extra = r.choice(["", " that likes the pilots", " no authors will ever", " most authors will"])
        return f" {subj}{extra} {verb} "

    dir.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", 150), ("valid", 20), ("test", 20)):
        (dir / f"ptb.{name}.txt").write_text("\n".join(sentence() for _ in range(n)) + "\n")
    return dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("syneval")
    corpus = agreement_corpus(base / "corpus")
    out = {}
    for cell in ("onlstm", "lstm"):
        out[cell] = base / cell
        argv = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--out", str(out[cell])]
        assert main([*argv, "--epochs", "1", "--cell", cell, "--no-final-test"]) == 0
    return out


def test_two_checkpoints_side_by_side_json_and_out(runs, tmp_path, capsys):
    data = tmp_path / "sample.tsv"
    data.write_text(SAMPLE)
    argv = ["syneval", "--checkpoint", str(runs["onlstm"]), "--checkpoint", str(runs["lstm"]), "--data", str(data)]
    assert main([*argv, "--json", "--no-progress", "--out", str(tmp_path / "out"), "--batch-size", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["items"] == 5 and [m["cell"] for m in report["models"]] == ["onlstm", "lstm"]
    items = read_items(data)
    for m, path in zip(report["models"], (runs["onlstm"], runs["lstm"])):
        run = load_language_model_run(path)
        outcomes, facts = score_items(run.model, run.vocab, items)
        assert m["oov"] == facts["oov"] and m["period"] is False  # the corpus has no "."
        assert "surgeon" in m["oov"] and m["sentences"] == 11
        simple = m["cases"]["simple_agrmt"]["comparisons"]["g>u"]
        expected = [o.correct for o in outcomes if o.item.case == "simple_agrmt"]
        assert simple["pairs"] == 3 and simple["correct"] == sum(expected)
        assert simple["covered"] == 2  # the surgeon pair is not covered
        npi = m["cases"]["simple_npi_anim"]["comparisons"]
        assert set(npi) == {"g>i", "i>u", "g>u"}
        rows = {r["row"]: r for r in m["rows"]}
        assert rows["SVA: simple"]["paper_onlstm"] == 0.99 and rows["SVA: simple"]["pairs"] == 3
        assert "SVA: long VP coordination" not in rows  # no such case in the data
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    pairs = saved["models"][0]["pairs"]
    assert len(pairs) == 3 + 1 + 3 and {"score_first", "score_second", "correct", "covered"} <= set(pairs[0])
    assert (tmp_path / "out" / "rows.png").stat().st_size > 0
    assert read_items(tmp_path / "out" / "items.tsv") != []


def test_text_table_and_word_only(runs, tmp_path, capsys):
    data = tmp_path / "sample.tsv"
    data.write_text(SAMPLE)
    argv = ["syneval", "--checkpoint", str(runs["lstm"]), "--data", str(data), "--no-progress", "--word-only"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "score: first differing word" in text and "'.' appended: no" in text
    assert "SVA: simple" in text and "0.99  1.00" in text and "simple_npi_anim (grammatical vs intrusive)" in text


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("simple_agrmt\tonly two\n", r"onlstm syneval: .*bad\.tsv:1: 2 tab-separated fields"),
        (None, r"onlstm syneval: .*missing\.tsv does not exist"),
    ],
)
def test_bad_data_is_one_line_and_exit_2(runs, tmp_path, capsys, content, expected):
    path = tmp_path / ("bad.tsv" if content else "missing.tsv")
    if content:
        path.write_text(content)
    assert main(["syneval", "--checkpoint", str(runs["lstm"]), "--data", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert pytest.importorskip("re").search(expected, err)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ([], "nothing to evaluate on: give --data (minimal pairs) or --suite (SyntaxGym test suites)"),
        (["--data", "pairs.tsv", "--suite", "suite.json"], "give either --data (minimal pairs) or --suite"),
    ],
)
def test_data_or_suite_is_asked_for_by_what_is_wrong(tmp_path, capsys, given, expected):
    """Neither --data nor --suite is not "not both": each case has its own line, before any file is read."""
    assert main(["syneval", "--checkpoint", str(tmp_path / "nothing"), *given]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err
    assert ("not both" in err) == bool(given)


def test_a_checkpoint_of_another_kind_is_refused(tmp_path, capsys):
    (tmp_path / "sample.tsv").write_text(SAMPLE)
    assert main(["syneval", "--checkpoint", str(tmp_path / "nothing"), "--data", str(tmp_path / "sample.tsv")]) == 2
    assert "onlstm syneval:" in capsys.readouterr().err


def test_no_share_prefixes_gives_the_same_report(runs, tmp_path, capsys):
    data = tmp_path / "sample.tsv"
    data.write_text(SAMPLE)
    argv = ["syneval", "--checkpoint", str(runs["onlstm"]), "--data", str(data), "--json", "--no-progress"]
    reports = []
    for flag in ("--share-prefixes", "--no-share-prefixes"):
        assert main([*argv, flag]) == 0
        (model,) = json.loads(capsys.readouterr().out)["models"]
        reports.append({k: model[k] for k in ("cases", "rows", "all", "oov", "unique")})
    assert reports[0] == reports[1]
