"""Model-independent parsing: the distance -> tree builder, bracket strings, spans, metrics (values
worked out by hand in the comments), baselines and the ``compare-trees`` command."""

import json
import math
import random

import pytest
import torch

from onlstm.cli import main
from onlstm.parsing import (
    LabelledTree,
    TreeFormatError,
    average_depth,
    balanced,
    baseline_trees,
    build_tree,
    corpus_f1,
    detect_format,
    evalb_f1,
    evaluate,
    f1_scores,
    label_recall,
    labelled_spans,
    leaves,
    left_branching,
    parse_brackets,
    parse_tree_lines,
    prf_from_counts,
    random_baseline_scores,
    random_tree,
    right_branching,
    score_baselines,
    sentence_f1,
    sentence_prf,
    spans,
    strip_function_tags,
    to_brackets,
    unlabel,
    word_depths,
)

W6 = "the cat sat on the mat".split()
GOLD6 = (("the", "cat"), ("sat", ("on", ("the", "mat"))))  # spans w/o root: 02 26 36 46
RIGHT6 = ("the", ("cat", ("sat", ("on", ("the", "mat")))))  # spans w/o root: 16 26 36 46
GOLD6_LABELLED = "(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))))"


# ---------------------------------------------------------------------------------------------------
# builder


@pytest.mark.parametrize(
    "dist, expected",
    [
        ([0.0, 0.0, 1.0, 0.0], (("a", "b"), ("c", "d"))),  # max at c: (build(a b), (c, d))
        ([0.1, 0.5, 0.5, 0.2], ("a", ("b", ("c", "d")))),  # tie b/c -> leftmost b
        ([1.0, 1.0, 1.0, 1.0], ("a", ("b", ("c", "d")))),  # all tied -> always the first word
        ([1.0, 2.0, 3.0, 4.0], ((("a", "b"), "c"), "d")),  # max last each time -> left-branching
        ([4.0, 3.0, 2.0, 1.0], ("a", ("b", ("c", "d")))),  # max first each time -> right-branching
        ([0.0, 9.0, 0.0, 5.0], ("a", ("b", ("c", "d")))),  # b first; inside (c d) the max is d -> (c, d)
        ([0.0, 1.0, 9.0, 2.0], (("a", "b"), ("c", "d"))),  # c; left (a b): b is max, left part (a) -> (a, b)
    ],
)
def test_build_tree_hand_made(dist, expected):
    assert build_tree("a b c d".split(), dist) == expected


def test_build_tree_five_words_mixed():
    # max at c (idx 2): left = build(a b), right = (c, build(d e)); in (d e) e wins -> (d, e)
    # in (a b) with [0.3, 0.1]: a wins -> (a, b)
    tree = build_tree("a b c d e".split(), [0.3, 0.1, 0.9, 0.2, 0.4])
    assert tree == (("a", "b"), ("c", ("d", "e")))


def test_build_tree_edge_cases():
    assert build_tree(["solo"], [0.3]) == "solo"
    assert build_tree(["x", "y"], [0.0, 1.0]) == ("x", "y")
    assert build_tree(["x", "y"], torch.tensor([0.7, 0.1])) == ("x", "y")
    with pytest.raises(ValueError, match="zero words"):
        build_tree([], [])
    with pytest.raises(ValueError, match="one distance per word"):
        build_tree(["a", "b"], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        build_tree(["a", "b"], [1.0, math.nan])
    with pytest.raises(TypeError, match="strings"):
        build_tree([1, 2], [1.0, 2.0])


# ---------------------------------------------------------------------------------------------------
# bracket strings, leaves, spans


def test_brackets_round_trip_unlabelled():
    tree = (("the", "cat"), "sat")
    assert to_brackets(tree) == "((the cat) sat)"
    assert parse_brackets("((the cat) sat)") == tree
    assert parse_brackets("  ( ( the  cat )\tsat ) ") == tree
    assert to_brackets("word") == "word" and parse_brackets("word") == "word"
    assert parse_brackets("(the (big cat))") == ("the", ("big", "cat"))
    assert parse_brackets("(a b c)") == ("a", "b", "c")
    assert parse_brackets("(((a b)) c)") == (("a", "b"), "c")  # unary bracket unwrapped
    assert parse_brackets("(word)") == "word"
    assert to_brackets(["a", ["b", "c"]]) == "(a (b c))"  # lists (the reference's trees) accepted


def test_brackets_labelled():
    text = "(S (NP (DT the) (NN cat)) (VP (VBD sat)))"
    tree = parse_brackets(text)
    assert isinstance(tree, LabelledTree) and tree.label() == "S"
    assert leaves(tree) == ["the", "cat", "sat"]
    assert to_brackets(tree) == text
    assert unlabel(tree) == (("the", "cat"), "sat")
    ptb = parse_brackets("( (S (NP-SBJ (PRP it)) (VP (VBD ran))) )")  # PTB root wrapper removed
    assert ptb.label() == "S" and leaves(ptb) == ["it", "ran"]
    one = parse_brackets("(S (NN yes))", labelled=True)
    assert leaves(one) == ["yes"]
    assert parse_brackets("(S (NN yes))") == ("S", ("NN", "yes"))  # auto: no branching phrase -> unlabelled


def test_brackets_errors():
    for bad, msg in [
        ("((a b) c", "never closed"),
        ("(a b))", "no matching"),
        ("", "empty tree"),
        ("(a) (b)", "one tree"),
        ("(a ())", "empty bracket"),
    ]:
        with pytest.raises(TreeFormatError, match=msg):
            parse_brackets(bad)
    with pytest.raises(TreeFormatError, match="not a labelled tree"):
        parse_brackets("((a b) c)", labelled=True)
    with pytest.raises(ValueError, match="cannot write"):
        to_brackets(("a b", "c"))


def test_detect_format_and_lines():
    assert detect_format(["(S (NP (NN yes)))", GOLD6_LABELLED]) == "labelled"
    assert detect_format(["(a (b c))", "((a b) c)"]) == "unlabelled"
    trees = parse_tree_lines(["(S (NN yes))", GOLD6_LABELLED, "", ""])
    assert len(trees) == 2 and all(isinstance(t, LabelledTree) for t in trees)
    with pytest.raises(TreeFormatError, match="line 2: empty line"):
        parse_tree_lines(["(a b)", "", "(c d)"])
    with pytest.raises(TreeFormatError, match=r"f\.txt line 2: unbalanced"):
        parse_tree_lines(["(a b)", "((c d)"], source="f.txt")


def test_spans():
    tree = (("the", "cat"), "sat")
    assert spans(tree) == {(0, 2)}
    assert spans(tree, include_root=True) == {(0, 2), (0, 3)}
    assert spans(tree, include_root=True, min_length=1) == {(0, 2), (0, 3)}  # words are not constituents
    assert spans(GOLD6) == {(0, 2), (2, 6), (3, 6), (4, 6)}
    assert spans("solo") == set() and spans(("a", "b")) == set()
    assert spans(parse_brackets(GOLD6_LABELLED)) == spans(GOLD6)


def test_labelled_spans_and_function_tags():
    assert strip_function_tags("NP-SBJ-1") == "NP"
    assert strip_function_tags("NP=2") == "NP"
    assert strip_function_tags("-NONE-") == "-NONE-"
    assert strip_function_tags("S") == "S"
    tree = parse_brackets("(S (NP-SBJ-1 (DT the) (JJ big) (NN cat)) (VP (VBD sat) (ADVP-DIR (RB down))))")
    # words: the big cat sat down -> NP (0,3), VP (3,5); ADVP is one word; S is the root
    assert labelled_spans(tree) == {(0, 3, "NP"), (3, 5, "VP")}
    assert labelled_spans(tree, include_root=True) == {(0, 3, "NP"), (3, 5, "VP"), (0, 5, "S")}
    chain = parse_brackets("(S (NP (PRP he)) (VP (VBD said) (SBAR+S (NP (PRP it)) (VP (VBD fell)))))")
    assert labelled_spans(chain) == {(1, 4, "VP"), (2, 4, "SBAR"), (2, 4, "S")}


def test_word_depths():
    # the cat: root + (0,2); sat: root + (2,6); on: + (3,6); the mat: + (4,6)
    assert word_depths(GOLD6) == [2, 2, 2, 3, 4, 4]
    assert word_depths("solo") == [0]
    assert word_depths(("a", "b", "c")) == [1, 1, 1]


# ---------------------------------------------------------------------------------------------------
# metrics, by hand

# A: GOLD6 vs RIGHT6: gold {02,26,36,46}, pred {16,26,36,46}, overlap 3 -> P = R = F1 = 3/4;
#    with the root: 4 of 5 each side -> 4/5.
# B: flat gold (a b c) has no span; pred (a (b c)) has {13}: P 0, R 1, F1 0.  With root: gold {03},
#    pred {03, 13}: m1 p2 g1.
# C: two words: both empty -> 1, 1, 1.  With root: {02} both: m1 p1 g1.
# D: one word: both empty -> 1, 1, 1.  With root: the one-word root is not counted: m0 p0 g0.
GOLDS = [GOLD6, ("a", "b", "c"), ("x", "y"), "z"]
PREDS = [RIGHT6, ("a", ("b", "c")), ("x", "y"), "z"]


def test_prf_from_counts_conventions():
    assert prf_from_counts(0, 0, 0) == (1.0, 1.0, 1.0)  # nothing to find, nothing proposed
    assert prf_from_counts(0, 2, 0) == (0.0, 1.0, 0.0)  # gold empty -> recall 1, precision 0
    assert prf_from_counts(0, 0, 3) == (0.0, 0.0, 0.0)  # prediction empty, gold not
    assert prf_from_counts(1, 2, 4) == pytest.approx((0.5, 0.25, 2 * 0.5 * 0.25 / 0.75))
    assert prf_from_counts(0, 2, 2) == (0.0, 0.0, 0.0)  # P + R = 0 -> F1 0, no division by zero
    with pytest.raises(ValueError):
        prf_from_counts(3, 2, 2)


def test_sentence_prf_single_sentences():
    assert sentence_prf(GOLD6, RIGHT6) == pytest.approx((0.75, 0.75, 0.75))
    assert sentence_prf(("a", "b", "c"), ("a", ("b", "c"))) == (0.0, 1.0, 0.0)
    assert sentence_prf(("x", "y"), ("x", "y")) == (1.0, 1.0, 1.0)
    assert sentence_prf("z", "z") == (1.0, 1.0, 1.0)
    assert sentence_prf(("a", ("b", "c")), ("a", "b", "c")) == (0.0, 0.0, 0.0)


def test_sentence_f1_is_mean_over_sentences():
    sc = sentence_f1(GOLDS, PREDS)
    assert sc.f1 == pytest.approx((0.75 + 0 + 1 + 1) / 4)
    assert sc.precision == pytest.approx((0.75 + 0 + 1 + 1) / 4)
    assert sc.recall == pytest.approx((0.75 + 1 + 1 + 1) / 4)
    assert (sc.sentences, sc.matched, sc.predicted, sc.gold) == (4, 3, 5, 4)


def test_corpus_f1_pools_counts():
    sc = corpus_f1(GOLDS, PREDS)  # matched 3, predicted 4+1, gold 4
    assert sc.precision == pytest.approx(3 / 5) and sc.recall == pytest.approx(3 / 4)
    assert sc.f1 == pytest.approx(2 / 3)  # 2 * 0.6 * 0.75 / 1.35
    assert corpus_f1([("x", "y"), "z"], [("x", "y"), "z"]).f1 == 1.0  # all totals zero


def test_evalb_counts_the_root():
    sc = evalb_f1(GOLDS, PREDS)  # matched 4+1+1, predicted 5+2+1, gold 5+1+1
    assert (sc.matched, sc.predicted, sc.gold) == (6, 8, 7)
    assert sc.precision == pytest.approx(6 / 8) and sc.recall == pytest.approx(6 / 7)
    assert sc.f1 == pytest.approx(0.8)  # 2 (3/4)(6/7) / (3/4 + 6/7) = 36/45
    assert evalb_f1([GOLD6], [RIGHT6]).f1 == pytest.approx(0.8)
    assert f1_scores(GOLDS, PREDS)["evalb_f1"] == sc


def test_metrics_reject_bad_pairs():
    with pytest.raises(ValueError, match="no sentences"):
        sentence_f1([], [])
    with pytest.raises(ValueError, match="1 gold trees and 2"):
        corpus_f1([("a", "b")], [("a", "b"), ("c", "d")])
    with pytest.raises(ValueError, match="sentence 1: the gold tree has 2 words"):
        evalb_f1([("a", "b"), ("a", "b")], [("a", "b"), ("a", "b", "c")])


def test_label_recall_by_hand():
    g1 = parse_brackets(GOLD6_LABELLED)  # NP 02, VP 26, PP 36, NP 46; pred RIGHT6 has 26 36 46
    # it said he ran: VP (1,4), SBAR (2,4), S (2,4) -- the unary chain counts once for each label;
    # the prediction is left-branching (((it said) he) ran): spans (0,2), (0,3) -> none found
    g2 = parse_brackets("( (S (NP-SBJ (PRP it)) (VP (VBD said) (SBAR (S (NP-SBJ (PRP he)) (VP (VBD ran)))))) )")
    p2 = left_branching(["it", "said", "he", "ran"])
    rec = label_recall([g1, g2], [RIGHT6, p2])
    assert list(rec) == ["NP", "VP", "PP", "S", "SBAR"]  # by gold count, then name
    assert (rec["NP"].gold, rec["NP"].found, rec["NP"].recall) == (2, 1, 0.5)
    assert (rec["VP"].gold, rec["VP"].found) == (2, 1)
    assert rec["PP"].recall == 1.0 and rec["S"].recall == 0.0 and rec["SBAR"].recall == 0.0
    with pytest.raises(TypeError, match="labelled"):
        label_recall([GOLD6], [RIGHT6])


def test_average_depth_by_hand():
    assert average_depth([GOLD6]) == pytest.approx(17 / 6)
    assert average_depth([GOLD6, "z"]) == pytest.approx(17 / 7)  # pooled over words
    assert average_depth([GOLD6, "z"], per_sentence=True) == pytest.approx((17 / 6 + 0) / 2)
    n = 5  # right-branching: depths 1, 2, ..., n-1, n-1 -> (n + 1) / 2 - 1 / n
    assert average_depth([right_branching("abcde")]) == pytest.approx((n + 1) / 2 - 1 / n)
    with pytest.raises(ValueError):
        average_depth([])


def test_evaluate_collects_everything():
    ev = evaluate([parse_brackets(GOLD6_LABELLED)], [RIGHT6])
    d = ev.to_dict()
    assert d["sentences"] == 1
    assert d["sentence_f1"]["f1"] == pytest.approx(0.75) and d["evalb_f1"]["f1"] == pytest.approx(0.8)
    assert d["label_recall"]["NP"]["recall"] == 0.5
    assert d["average_depth"]["gold"] == pytest.approx(17 / 6)
    json.dumps(d)
    assert "sentence F1" in ev.format_table() and "NP" in ev.format_table()
    assert evaluate([GOLD6], [RIGHT6]).label_recall is None


# ---------------------------------------------------------------------------------------------------
# baselines


def test_baseline_shapes():
    w = list("abcde")
    assert left_branching(w[:4]) == ((("a", "b"), "c"), "d")
    assert right_branching(w[:4]) == ("a", ("b", ("c", "d")))
    assert balanced(w[:3]) == ("a", ("b", "c"))
    assert balanced(w[:4]) == (("a", "b"), ("c", "d"))
    assert balanced(w) == (("a", "b"), ("c", ("d", "e")))
    for fn in (left_branching, right_branching, balanced, random_tree):
        assert fn(["solo"]) == "solo"
        assert fn(["x", "y"]) == ("x", "y")
        with pytest.raises(ValueError, match="zero words"):
            fn([])


def _is_binary(tree):
    return isinstance(tree, str) or (len(tree) == 2 and all(_is_binary(c) for c in tree))


def test_random_tree_is_seeded_binary_and_covers_shapes():
    w = list("abcdefg")
    assert random_tree(w, 3) == random_tree(w, 3)
    assert random_tree(w, random.Random(5)) == random_tree(w, 5)
    shapes = [random_tree(w[:4], random.Random(s)) for s in range(3000)]
    assert all(_is_binary(t) and leaves(t) == w[:4] for t in shapes)
    assert len({to_brackets(t) for t in shapes}) == 5  # all 5 binary trees over 4 words occur
    share = shapes.count((("a", "b"), ("c", "d"))) / len(shapes)
    assert abs(share - 1 / 3) < 0.05  # split uniform over 3 gaps; uniform-over-trees gives 1/5


def test_baseline_trees_and_scores():
    sents = [["a", "b", "c"], ["x", "y"]]
    assert baseline_trees("left-branching", sents) == [(("a", "b"), "c"), ("x", "y")]
    assert baseline_trees("random", sents, seed=1) == baseline_trees("random", sents, seed=1)
    with pytest.raises(ValueError, match="unknown baseline"):
        baseline_trees("middle", sents)
    gold = [("a", ("b", "c"))]
    sc = score_baselines(gold, draws=2)
    assert sc["right-branching"] == {"sentence_f1": 1.0, "corpus_f1": 1.0, "evalb_f1": 1.0}
    assert sc["balanced"]["sentence_f1"] == 1.0  # (a (b c)) for three words
    assert sc["left-branching"]["sentence_f1"] == 0.0  # {(0,2)} vs {(1,3)}
    assert sc["left-branching"]["evalb_f1"] == pytest.approx(0.5)  # root matches: 1 of 2 each side
    two = random_baseline_scores([("x", "y"), ("u", "v")], draws=3)
    assert two["sentence_f1"] == {"mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0, "draws": 3}
    # three words: each draw scores 1 or 0 per sentence; the mean lies in [0, 1] and matches the draws
    r = random_baseline_scores([gold[0]] * 4, draws=4, seed=7)["sentence_f1"]
    assert 0.0 <= r["min"] <= r["mean"] <= r["max"] <= 1.0
    with pytest.raises(ValueError):
        random_baseline_scores(gold, draws=0)


# ---------------------------------------------------------------------------------------------------
# the compare-trees command


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_compare_trees_table_and_json(tmp_path, capsys):
    gold = _write(tmp_path / "gold.txt", [GOLD6_LABELLED, "(S (NP (NN x)) (VP (VB y)))"])
    pred = _write(tmp_path / "pred.txt", [to_brackets(RIGHT6), "(x y)"])
    assert main(["parsing", "compare-trees", gold, pred]) == 0
    out = capsys.readouterr().out
    assert "sentence F1" in out and "EVALB" in out and "NP" in out
    assert main(["parsing", "compare-trees", gold, pred, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # sentence: (3/4 + 1) / 2; corpus: 3 of 4 both sides; EVALB: (4+1) of (5+1) both sides
    assert d["sentences"] == 2
    assert d["sentence_f1"]["f1"] == pytest.approx(0.875)
    assert d["corpus_f1"]["f1"] == pytest.approx(0.75)
    assert d["evalb_f1"]["f1"] == pytest.approx(5 / 6)
    assert d["label_recall"]["NP"] == {"label": "NP", "gold": 2, "found": 1, "recall": 0.5}


def test_compare_trees_unlabelled_gold(tmp_path, capsys):
    gold = _write(tmp_path / "g.txt", ["((a b) c)", "(d e)"])
    pred = _write(tmp_path / "p.txt", ["(a (b c))", "(d e)"])
    assert main(["parsing", "compare-trees", gold, pred, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["sentence_f1"]["f1"] == pytest.approx(0.5) and d["label_recall"] is None


def test_compare_trees_normalise_gold(tmp_path, capsys):
    gold = _write(tmp_path / "g.txt", ["( (S (NP-SBJ (NNP Sales)) (VP (VBD rose) (NP (CD 5) (NN %))) (. .)) )"])
    pred = _write(tmp_path / "p.txt", ["(sales (rose (N %)))"])
    assert main(["parsing", "compare-trees", gold, pred, "--normalise-gold", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentence_f1"]["f1"] == 1.0


@pytest.mark.parametrize(
    "pred_lines, message",
    [
        (["(a (b c))"], "has 2 trees but"),
        (["(a (b c))", "(d f)"], "line 2: the trees have different words: word 2 is 'e'"),
        (["(a (b c))", "(d e f)"], "line 2: the gold tree has 2 words but the predicted tree has 3"),
        (["(a (b c)", "(d e)"], "line 1: unbalanced"),
    ],
)
def test_compare_trees_bad_input(tmp_path, capsys, pred_lines, message):
    gold = _write(tmp_path / "g.txt", ["((a b) c)", "(d e)"])
    pred = _write(tmp_path / "p.txt", pred_lines)
    assert main(["parsing", "compare-trees", gold, pred]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_a_flat_unlabelled_gold_read_as_labelled_says_which_flag_reads_it(tmp_path, capsys):
    """`(I (saw (the dog)) ...)` has the labelled shape (a label first in each bracket, `(the dog)` a pre-terminal):
    detection reads it so, which the word counts then contradict; the error names the flag that reads it."""
    gold = _write(tmp_path / "g.txt", ["(I (saw (the dog)) (in (the park)))"])
    pred = _write(tmp_path / "p.txt", ["(I (saw (the (dog (in (the park))))))"])
    assert main(["parsing", "compare-trees", gold, pred]) == 2
    err = capsys.readouterr().err
    assert "gold tree has 2 words" in err and "if they are unlabelled, pass --gold-format unlabelled" in err
    assert main(["parsing", "compare-trees", gold, pred, "--gold-format", "unlabelled", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 1


def test_compare_trees_missing_file(tmp_path, capsys):
    gold = _write(tmp_path / "g.txt", ["(a b)"])
    assert main(["parsing", "compare-trees", gold, str(tmp_path / "nope.txt")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_trees_nested_deeper_than_the_readers_go_are_one_error_line(tmp_path, capsys):
    """nltk's trees recurse once a level: a labelled tree just within MAX_DEPTH is read and scored, one level
    deeper is a one-line error naming the file and line, not a traceback. Unlabelled trees are read and scored
    without recursion, at any depth: `parsing parse` writes trees of long lines that nest hundreds deep."""
    from onlstm.data.trees import MAX_DEPTH, TreeFormatError, build_tree, leaves, parse_brackets, spans, to_brackets

    n = MAX_DEPTH - 1
    labelled, unlabelled = "(S " * n + "(DT a) (NN b)" + ")" * n, "(" * n + "a b" + ")" * n
    (tmp_path / "gold.txt").write_text(labelled + "\n")
    (tmp_path / "pred.txt").write_text(unlabelled + "\n")
    assert main(["parsing", "compare-trees", str(tmp_path / "gold.txt"), str(tmp_path / "pred.txt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentence_f1"]["f1"] == 1.0
    deeper = "(S (S " + labelled + "))"
    with pytest.raises(TreeFormatError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_brackets(deeper)
    (tmp_path / "deep.txt").write_text(deeper + "\n")
    assert main(["parsing", "compare-trees", str(tmp_path / "deep.txt"), str(tmp_path / "deep.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "deep.txt line 1" in err and "nested deeper" in err, err
    words = [f"w{k}" for k in range(1500)]  # a 1,500-word line's tree: 1,499 levels deep
    tree = build_tree(words, [float(-k) for k in range(1500)])
    read = parse_brackets(to_brackets(tree))  # compared by spans: == on tuples this deep would recurse
    assert to_brackets(tree).endswith(")" * 1499) and spans(read) == spans(tree) and leaves(read) == words
    (tmp_path / "long.txt").write_text(to_brackets(tree) + "\n")
    assert main(["parsing", "compare-trees", str(tmp_path / "long.txt"), str(tmp_path / "long.txt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentence_f1"]["f1"] == 1.0
