"""Treebank reading and normalisation, on .mrg snippets written here and (if present) the NLTK sample."""

import pytest

from onlstm.data.treebank import (
    WORD_TAGS,
    TreebankError,
    file_section,
    find_mrg_files,
    load_treebank,
    load_wsj10,
    normalise_tree,
    normalise_word,
    read_mrg_file,
    split_bracketings,
)
from onlstm.parsing import (
    LabelledTree,
    baseline_trees,
    labelled_spans,
    leaves,
    parse_brackets,
    sentence_f1,
    to_brackets,
    unlabel,
)
from support import SHARED_DATA

TREEBANK = SHARED_DATA / "treebank"

# A PTB-style sentence with a function-tagged subject, an empty complementizer (-NONE- 0) that leaves
# SBAR with the single child S (a unary chain), numbers, '%' (tagged NN) and final punctuation.
SAID = """( (S
    (NP-SBJ-1 (NNP Mr.) (NNP Smith) )
    (VP (VBD said)
      (SBAR (-NONE- 0)
        (S
          (NP-SBJ (PRP it) )
          (VP (VBD rose)
            (NP-EXT (CD 3.5) (NN %) )
            (PP-TMP (IN in) (NP (CD 1989) ))))))
    (. .) ))
"""
# Nothing but an empty element and punctuation: normalises to no word.
EMPTY = "( (FRAG (-NONE- *U*) (: --) ))\n"
# '$' and '#' are dropped (not in the tag set); the number becomes N.
PAID = "( (S (NP-SBJ (PRP He) ) (VP (VBD paid) (NP ($ $) (CD 5) (# #) )) (. !) ))\n"
# 11 words after normalisation (the commas and the period go).
LONG = """( (S (NP-SBJ (DT The) (NNS stocks) ) (, ,) (VP (VBD fell) (ADVP (RB sharply) )
  (PP (IN in) (NP (JJ heavy) (NN trading) )) (, ,) (PP-TMP (IN on) (NP (NNP Friday) (CC and) (NNP Monday) )))
  (. .) ))
"""


def test_normalise_word():
    assert normalise_word("1,234.50") == "N,N.N"
    assert normalise_word("1980s") == "Ns"
    assert normalise_word("Nov.") == "nov."
    assert normalise_word("B-2") == "b-N"


def test_word_tags_are_the_design_list():
    assert len(WORD_TAGS) == 36
    assert {"PRP$", "WP$", "CD", "SYM"} <= WORD_TAGS
    assert not {"-NONE-", ".", ",", "$", "#", "``", "''", "-LRB-", ":"} & WORD_TAGS


def test_normalise_tree_by_hand():
    raw = LabelledTree.fromstring(SAID)
    norm = normalise_tree(raw)
    assert leaves(norm) == ["mr.", "smith", "said", "it", "rose", "N.N", "%", "in", "N"]
    assert to_brackets(norm) == (
        "(S (NP (NNP mr.) (NNP smith)) (VP (VBD said) (SBAR+S (NP (PRP it)) "
        "(VP (VBD rose) (NP (CD N.N) (NN %)) (PP (IN in) (NP (CD N)))))))"
    )
    assert unlabel(norm) == (("mr.", "smith"), ("said", ("it", ("rose", ("N.N", "%"), ("in", "N")))))
    # mr.0 smith1 said2 it3 rose4 N.N5 %6 in7 N8
    assert labelled_spans(norm) == {
        (0, 2, "NP"),
        (2, 9, "VP"),
        (3, 9, "SBAR"),
        (3, 9, "S"),
        (4, 9, "VP"),
        (5, 7, "NP"),
        (7, 9, "PP"),
    }
    assert normalise_tree(LabelledTree.fromstring(EMPTY)) is None
    paid = normalise_tree(LabelledTree.fromstring(PAID))
    assert leaves(paid) == ["he", "paid", "N"] and unlabel(paid) == ("he", ("paid", "N"))
    assert raw.leaves()[0] == "Mr."  # the input is not modified


def test_normalise_tree_rejects_bare_words():
    with pytest.raises(ValueError, match="not inside a"):
        normalise_tree(LabelledTree.fromstring("(S (NP the cat))"))


def test_split_bracketings_errors():
    assert [line for line, _ in split_bracketings(SAID + "\n" + PAID)] == [1, 12]
    with pytest.raises(
        TreebankError, match=r"x\.mrg: unbalanced brackets: the tree starting at line 1 is never closed"
    ):
        split_bracketings("( (S (NP (DT the) (NN cat))\n", "x.mrg")
    with pytest.raises(TreebankError, match=r"line 2 closes nothing"):
        split_bracketings("( (S (NN x)))\n)", "x.mrg")
    with pytest.raises(TreebankError, match="text outside any bracketing at line 1"):
        split_bracketings("hello ( (S (NN x)))", "x.mrg")


def _bank(tmp_path, files):
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_load_flat_nltk_layout(tmp_path):
    root = _bank(tmp_path, {"wsj_0101.mrg": SAID + EMPTY + PAID + LONG, "wsj_0102.mrg": "", "notes.txt": "x"})
    bank = load_treebank(root)
    assert [s.words for s in bank] == [
        tuple("mr. smith said it rose N.N % in N".split()),
        ("he", "paid", "N"),
        tuple("the stocks fell sharply in heavy trading on friday and monday".split()),
    ]
    assert (bank.trees_read, bank.skipped_empty, bank.skipped_long) == (4, 1, 0)
    assert bank.empty_files == ["wsj_0102.mrg"] and bank.sections == ("01",)
    assert [(s.file, s.index, s.section) for s in bank] == [
        ("wsj_0101.mrg", 0, "01"),
        ("wsj_0101.mrg", 2, "01"),
        ("wsj_0101.mrg", 3, "01"),
    ]
    assert "1 empty after normalisation skipped" in bank.summary()
    wsj10 = load_wsj10(root)
    assert len(wsj10) == 2 and wsj10.skipped_long == 1 and wsj10.name.startswith("WSJ10 (NLTK sample")
    assert load_treebank(root / "wsj_0101.mrg", max_length=3).words == [("he", "paid", "N")]


def test_load_full_wsj_layout_sections(tmp_path):
    root = _bank(tmp_path, {"wsj/00/wsj_0001.mrg": SAID, "wsj/23/wsj_2301.mrg": PAID, "wsj/23/WSJ_2302.MRG": LONG})
    assert [file_section(p) for p in find_mrg_files(root)] == ["00", "23", "23"]
    test = load_treebank(root / "wsj", sections=23)
    assert test.words[0] == ("he", "paid", "N") and len(test) == 2 and test.name == "WSJ all lengths (section 23)"
    assert len(load_treebank(root, sections=["0", "23"])) == 3
    with pytest.raises(TreebankError, match="no .mrg file of section.* 05; sections present: 00, 23"):
        load_treebank(root, sections=5)
    with pytest.raises(ValueError, match="WSJ section"):
        load_treebank(root, sections="test")


def test_directory_errors(tmp_path):
    with pytest.raises(TreebankError, match="no such file or directory"):
        load_treebank(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TreebankError, match="directory is empty"):
        load_treebank(tmp_path / "empty")
    _bank(tmp_path / "txt", {"a.txt": SAID})
    with pytest.raises(TreebankError, match="no .mrg files found"):
        load_treebank(tmp_path / "txt")
    _bank(tmp_path / "blank", {"wsj_0001.mrg": EMPTY + EMPTY})
    with pytest.raises(TreebankError, match="no sentence left.*2 empty after normalisation"):
        load_treebank(tmp_path / "blank")
    _bank(tmp_path / "long", {"wsj_0001.mrg": LONG})
    with pytest.raises(TreebankError, match="no sentence left"):
        load_wsj10(tmp_path / "long")


def test_malformed_files_name_the_file(tmp_path):
    _bank(tmp_path / "a", {"wsj_0001.mrg": SAID, "wsj_0002.mrg": PAID + "( (S (NP (DT the) (NN cat))\n"})
    with pytest.raises(TreebankError, match=r"wsj_0002\.mrg: unbalanced brackets: the tree starting at line 2"):
        load_treebank(tmp_path / "a")
    _bank(tmp_path / "b", {"wsj_0003.mrg": "( (S (NP the cat)) )\n"})
    with pytest.raises(TreebankError, match=r"wsj_0003\.mrg: tree 1: the word 'the'"):
        load_treebank(tmp_path / "b")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "wsj_0004.mrg").write_bytes(b"( (S (NN \xff)) )")
    with pytest.raises(TreebankError, match=r"wsj_0004\.mrg: not UTF-8"):
        read_mrg_file(tmp_path / "c" / "wsj_0004.mrg")


@pytest.fixture(scope="module")
def nltk_sample():
    if not TREEBANK.is_dir():
        pytest.skip(f"the NLTK treebank sample is not at {TREEBANK}")
    return load_treebank(TREEBANK)


def test_nltk_sample(nltk_sample):
    bank = nltk_sample
    # data/README.md: 199 files, 3,914 trees, sections 00 and 01
    assert len(bank.files) == 199 and bank.trees_read == 3914 and bank.sections == ("00", "01")
    assert len(bank) + bank.skipped_empty == 3914
    for s in bank:
        assert s.words and list(s.words) == leaves(s.labelled) == leaves(s.tree)
        no_n = [w.replace("N", "") for w in s.words]  # 'N' (for digits) is the only capital left
        assert all(w == w.lower() and not any(c.isdigit() for c in w) for w in no_n)
        assert all(t.label() in WORD_TAGS for t in s.labelled.subtrees() if len(t) == 1 and isinstance(t[0], str))
    assert bank.sentences[0].words[:4] == ("pierre", "vinken", "N", "years")  # wsj_0001: "Pierre Vinken, 61 years old"
    assert parse_brackets(to_brackets(bank.sentences[0].labelled)) == bank.sentences[0].labelled


def test_nltk_sample_wsj10(nltk_sample):
    wsj10 = load_wsj10(TREEBANK, sections="00")
    expected = [s.words for s in nltk_sample if len(s.words) <= 10 and s.section == "00"]
    assert wsj10.words == expected and all(len(w) <= 10 for w in wsj10.words)
    gold = wsj10.labelled_trees
    right = sentence_f1(gold, baseline_trees("right-branching", wsj10.words)).f1
    left = sentence_f1(gold, baseline_trees("left-branching", wsj10.words)).f1
    assert right > left  # English is right-branching


def test_a_tree_nested_deeper_than_the_readers_go_is_one_treebank_error(tmp_path):
    from onlstm.data.trees import MAX_DEPTH

    n = MAX_DEPTH - 2  # within: read and normalised (the file's outer bracket adds a level)
    (tmp_path / "wsj_0001.mrg").write_text("( " + "(S " * n + "(DT a) (NN b)" + ")" * n + ")\n")
    assert [s.words for s in load_treebank(tmp_path)] == [("a", "b")]
    (tmp_path / "wsj_0001.mrg").write_text("( " + "(S " * (n + 2) + "(DT a) (NN b)" + ")" * (n + 2) + ")\n")
    with pytest.raises(TreebankError, match=f"wsj_0001.mrg: brackets nested deeper than {MAX_DEPTH} levels at line 1"):
        load_treebank(tmp_path)
