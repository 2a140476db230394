"""Parsing with a model: the grammar, batched distances, and the parse / eval-parse / plot / demo commands."""

import json
import random
from pathlib import Path

import pytest
import torch

from onlstm.checkpoint import config_header, save_weights
from onlstm.cli import main
from onlstm.data.grammar import Grammar
from onlstm.data.vocab import Vocab
from onlstm.files import write_json
from onlstm.models.language_model import LanguageModel, LMConfig
from onlstm.parsing import build_tree, leaves, to_brackets, unlabel
from onlstm.parsing.induce import load_language_model, sentence_distances

MRG = """
( (S (NP-SBJ (DT The) (NN cat) )
     (VP (VBD sat)
         (PP-LOC (IN on) (NP (DT the) (NN mat) )))
     (. .) ))
( (S (NP-SBJ (NNP Bob) )
     (VP (VBD saw) (NP (CD 3) (NNS dogs) ))
     (. .) ))
"""


def make_run(tmp_path: Path, words, cell="onlstm", normalisation="ptb", hidden=(12, 12, 8)) -> Path:
    torch.manual_seed(0)
    vocab = Vocab.build([words])
    cfg = LMConfig(vocab_size=len(vocab), emb_size=8, hidden_sizes=list(hidden), cell=cell, chunk_size=4)
    model = LanguageModel(cfg)
    run = tmp_path / f"run_{cell}"
    save_weights(run / "model.best.safetensors", model)
    vocab.save(run / "vocab.json")
    write_json(run / "config.json", config_header("lm", cfg.to_dict(), text_normalisation=normalisation))
    return run


# -- grammar ---------------------------------------------------------------------------------------


def test_grammar_trees_are_consistent_with_their_sentences():
    g = Grammar()
    trees = g.corpus(300, seed=3)
    for t in trees:
        words = t.leaves()
        assert g.min_words <= len(words) <= g.max_words
        # every word hangs from a pre-terminal of the lexicon that contains it
        for word, (pos, tag) in zip(words, t.pos()):
            assert pos == word and word in g.lexicon[tag]
        # every phrase expands by one of its rules
        for sub in t.subtrees(lambda s: s.label() in g.rules):
            rhs = tuple(c.label() for c in sub)
            assert rhs in [r for _, r in g.rules[sub.label()]], (sub.label(), rhs)
        assert leaves(unlabel(t)) == words
    assert g.corpus(5, seed=1) == g.corpus(5, seed=1)
    # both branching directions occur: an NP -> NP PP (left) and a VP -> VT NP (right)
    rules = {(s.label(), tuple(c.label() for c in s)) for t in trees for s in t.subtrees(lambda s: s.height() > 2)}
    assert ("NP", ("NP", "PP")) in rules and ("VP", ("VT", "NP")) in rules


def test_grammar_rejects_bad_rules():
    with pytest.raises(ValueError, match="neither a rule nor in the lexicon"):
        Grammar(rules={"S": [(1.0, ("NP", "XX"))], "NP": [(1.0, ("DET",))]})
    with pytest.raises(ValueError, match="must not recurse"):
        Grammar(rules={"S": [(1.0, ("S", "DET"))]})


# -- distances -------------------------------------------------------------------------------------


def test_batched_distances_equal_one_by_one(tmp_path):
    words = "the cat sat on mat bob saw N dogs".split()
    lm = load_language_model(make_run(tmp_path, words))
    rng = random.Random(0)
    sentences = [[rng.choice(words) for _ in range(rng.randint(1, 9))] for _ in range(23)]
    forget, inputs, unk = sentence_distances(lm.model, lm.vocab, sentences, batch_size=5)
    assert unk == 0
    for s, f, i in zip(sentences, forget, inputs):
        f1, i1, _ = sentence_distances(lm.model, lm.vocab, [s], batch_size=1)
        assert f.shape == (3, len(s))
        torch.testing.assert_close(f, f1[0], atol=1e-6, rtol=0)
        torch.testing.assert_close(i, i1[0], atol=1e-6, rtol=0)


def test_distances_follow_the_protocol(tmp_path):
    """<eos> w1..wn <eos> from a zero state: the words' distances are positions 1..n of one pass."""
    words = "a b c d".split()
    lm = load_language_model(make_run(tmp_path, words))
    forget, _, _ = sentence_distances(lm.model, lm.vocab, [["a", "b", "c"]])
    ids = torch.tensor([lm.vocab.index[w] for w in ["<eos>", "a", "b", "c", "<eos>"]]).unsqueeze(1)
    with torch.no_grad():
        _, _, extras = lm.model(ids, return_distances=True)
    want = torch.stack([d.forget[1:4, 0] for d in extras["distances"]])
    torch.testing.assert_close(forget[0], want)
    assert lm.model.training is False


# -- commands --------------------------------------------------------------------------------------


def test_parse_command_brackets_json_and_unknown_count(tmp_path, capsys):
    run = make_run(tmp_path, "the cat sat on mat".split())
    text = tmp_path / "in.txt"
    text.write_text("The cat sat on the mat.\n\nThe dog sat\n")
    assert main(["parsing", "parse", "--checkpoint", str(run), str(text)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 3 and lines[1] == ""  # one output line per input line: blank -> empty line
    assert leaves(__import__("onlstm").parsing.parse_brackets(lines[0])) == "the cat sat on the mat".split()
    assert "2 sentences, 9 words, 1 unknown" in err and "1 punctuation token dropped" in err  # the singular
    assert main(["parsing", "parse", "--checkpoint", str(run), "--format", "json", "--layer", "3", str(text)]) == 0
    rows = [json.loads(l) for l in capsys.readouterr()[0].splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3] and rows[1]["tree"] is None and rows[2]["unknown"] == ["dog"]
    # the tree is the greedy builder applied to the reported layer's distances
    assert rows[0]["tree"] == to_brackets(build_tree(rows[0]["words"], rows[0]["distances"][2]))
    assert main(["parsing", "parse", "--checkpoint", str(run), "--format", "pretty", str(text)]) == 0


def test_parse_command_errors(tmp_path, capsys):
    run = make_run(tmp_path, "a b".split())
    assert main(["parsing", "parse", "--checkpoint", str(tmp_path / "nope")]) == 2
    assert "neither a run directory" in capsys.readouterr().err
    assert main(["parsing", "parse", "--checkpoint", str(run), "--layer", "7", str(run / "vocab.json")]) == 2
    assert "--layer must be between 1 and 3" in capsys.readouterr().err
    lstm = make_run(tmp_path, "a b".split(), cell="lstm")
    assert main(["parsing", "parse", "--checkpoint", str(lstm)]) == 2
    assert "no master gates" in capsys.readouterr().err
    (run / "model.best.safetensors").write_bytes(b"not a safetensors file")
    assert main(["parsing", "parse", "--checkpoint", str(run)]) == 2
    assert "corrupt" in capsys.readouterr().err


def test_eval_parse_command(tmp_path, capsys):
    bank = tmp_path / "wsj"
    bank.mkdir()
    (bank / "wsj_0001.mrg").write_text(MRG)
    run = make_run(tmp_path, "the cat sat on mat bob saw N dogs".split())
    out_trees = tmp_path / "pred.txt"
    assert (
        main(
            [
                "parsing",
                "eval-parse",
                "--checkpoint",
                str(run),
                "--treebank",
                str(bank),
                "--json",
                "--out-trees",
                str(out_trees),
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    assert res["sentences"] == 2 and res["words"] == 10 and res["unknown_words"] == 0
    assert set(res["layers"]) == {"layer 1", "layer 2", "layer 3"}
    assert set(res["baselines"]) == {"left-branching", "right-branching", "balanced", "random"}
    # sentence 1 gold spans (len>1, not root): (the cat), (sat on the mat), (on the mat), (the mat);
    # right-branching finds (cat sat on the mat)... -> its spans: (1,6),(2,6),(3,6),(4,6): matches (2,6),(3,6),(4,6)
    # sentence 2 "bob saw N dogs": gold (saw N dogs), (N dogs); right-branching (saw N dogs), (N dogs) -> both
    s1 = 2 * (3 / 4) * (3 / 4) / (3 / 4 + 3 / 4)
    assert res["baselines"]["right-branching"]["sentence_f1"] == pytest.approx((s1 + 1.0) / 2)
    written = [out_trees.with_name(f"pred.layer{l}.txt") for l in (1, 2, 3)]
    assert all(len(p.read_text().splitlines()) == 2 for p in written)
    assert main(["parsing", "eval-parse", "--checkpoint", str(run), "--treebank", str(bank), "--layers", "2"]) == 0
    table = capsys.readouterr().out
    assert "ON-LSTM layer 2" in table and "right-branching" in table and "sentences/s" in table
    assert main(["parsing", "eval-parse", "--checkpoint", str(run), "--treebank", str(tmp_path / "empty")]) == 2


def test_eval_parse_marks_the_papers_column_and_prints_its_figure(tmp_path, capsys):
    bank = tmp_path / "wsj" / "23"
    bank.mkdir(parents=True)
    (bank / "wsj_2301.mrg").write_text(MRG)
    run = make_run(tmp_path, "the cat sat on mat bob saw N dogs".split())
    base = ["parsing", "eval-parse", "--checkpoint", str(run), "--treebank", str(tmp_path / "wsj"), "--layers", "2"]
    expected = {(): None, ("--wsj10",): "WSJ10", ("--sections", "23"): "WSJ test (section 23)"}
    for flags, paper_set in expected.items():
        assert main([*base, *flags]) == 0
        lines = capsys.readouterr().out.splitlines()
        head = next(line for line in lines if line.startswith("F1 (%)"))
        assert head.split()[2] == "sentence*"  # the starred column: the paper's convention
        note = next(line for line in lines if line.startswith("* sentence: sentence-level F1, the paper's convention"))
        assert "Shen et al. 2019, Table 2" in note
        if paper_set == "WSJ10":
            assert "WSJ10: ON-LSTM mean 65.1, ON-LSTM max 66.8, right-branching 56.6" in note and "47.7" not in note
        elif paper_set:
            assert "WSJ test (section 23): ON-LSTM mean 47.7" in note and "65.1" not in note
        else:
            assert "65.1" in note and "47.7" in note and "neither of its sets" in note
        assert main([*base, *flags, "--json"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert found["paper_convention"] == "sentence_f1" and found["paper"]["set"] == paper_set


def test_plot_command(tmp_path, capsys):
    run = make_run(tmp_path, "the cat sat".split(), normalisation="lower")
    prefix = tmp_path / "fig"
    assert (
        main(
            [
                "parsing",
                "plot",
                "--checkpoint",
                str(run),
                "the cat sat",
                "--gold",
                "((the cat) sat)",
                "--out",
                str(prefix),
            ]
        )
        == 0
    )
    assert prefix.with_suffix(".png").stat().st_size > 1000 and prefix.with_suffix(".svg").exists()
    assert (
        main(
            [
                "parsing",
                "plot",
                "--checkpoint",
                str(run),
                "the cat sat",
                "--gold",
                "((the dog) sat)",
                "--out",
                str(prefix),
                "--overwrite",
            ]
        )
        == 2
    )
    assert "differ" in capsys.readouterr().err


def test_plot_reads_the_gold_words_as_it_reads_the_sentence(tmp_path, capsys):
    """The gold tree of the raw sentence (capitals, punctuation) lines up with the sentence as the model reads it
    (here PTB's convention: lower case, punctuation not read); it used to be compared as written."""
    run = make_run(tmp_path, "the cat sat".split(), normalisation="ptb")
    prefix = tmp_path / "fig"
    gold = "(S (NP (DT The) (NN Cat)) (VP (VBD sat)) (. .))"
    argv = ["parsing", "plot", "--checkpoint", str(run), "The Cat sat.", "--gold", gold, "--out", str(prefix)]
    assert main(argv) == 0, capsys.readouterr().err
    assert prefix.with_suffix(".png").exists()
    argv[argv.index(gold)] = "(S (NP (DT The) (NN Dog)) (VP (VBD sat)) (. .))"
    assert main([*argv, "--overwrite"]) == 2
    assert "the gold tree's words ['the', 'dog', 'sat'] differ from the sentence's ['the', 'cat', 'sat']" in (
        capsys.readouterr().err
    )
    argv[argv.index("(S (NP (DT The) (NN Dog)) (VP (VBD sat)) (. .))")] = "(S (. .) (. !))"
    assert main([*argv, "--overwrite"]) == 2
    assert "no word left after normalisation" in capsys.readouterr().err


DEMO_SMALL = ["--json", "--seed", "1", "--train-sentences", "500", "--test-sentences", "60"]


def test_demo_smoke(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--seconds", "2", "--out", str(out), *DEMO_SMALL]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["chosen_layer"] in (1, 2, 3) and len(res["layers"]) == 3
    # the layer chosen on dev is saved in the run, so parse and plot use it
    config = json.loads((out / "config.json").read_text())
    assert config["parse_layer"] == res["chosen_layer"]
    assert set(res["baselines"]) == {"left-branching", "right-branching", "balanced", "random"}
    assert len((out / "test_pred.txt").read_text().splitlines()) == res["test_sentences"]
    assert Path(res["plots"][0]).exists()
    # the language model was trained by `lm train`'s code: the lm/demo preset, the demo's options over it
    assert config["kind"] == "lm" and config["train"]["time_limit"] == 2 / 60
    assert (config["train"]["optimizer"], config["train"]["seed"], config["model"]["hidden_sizes"]) == (
        "adam",
        1,
        [128, 128, 64],
    )
    assert config["data"]["data_dir"] == str((out / "data").resolve())
    lines = {s: len((out / "data" / f"ptb.{s}.txt").read_text().splitlines()) for s in ("train", "valid", "test")}
    assert lines == {"train": 500, "valid": 300, "test": 60}
    assert res["train"]["steps"] > 0 and (out / "resume.safetensors").exists()
    # the demo's run directory is an ordinary language-model run
    assert main(["parsing", "parse", "--checkpoint", str(out)]) == 2  # no stdin text -> clear error, not a crash
    assert main(["lm", "eval", "--checkpoint", str(out), "--json", "--no-progress"]) == 0


def test_demo_goes_on_after_ctrl_c_and_replaces_an_earlier_demo(tmp_path, capsys, monkeypatch):
    """Ctrl-C during training ends it early and the demo parses with the model so far; an earlier demo's run in
    --out (with its resume file and best weights) is replaced, not refused, and its weights are not used."""
    import signal

    from onlstm.lm import train as lm_train

    out = tmp_path / "demo"
    for seconds in ("2", "8", "32"):  # a loaded machine may end 2 s before the first epoch's check (no best yet)
        assert main(["demo", "--seconds", seconds, "--out", str(out), *DEMO_SMALL]) == 0
        if (out / "model.best.safetensors").exists():
            break
    assert (out / "model.best.safetensors").exists() and (out / "resume.safetensors").exists()
    capsys.readouterr()
    real = lm_train.Trainer.train_step

    def step_then_ctrl_c(self, seg, prog):
        figures = real(self, seg, prog)  # the step's running figures, which the engine adds up
        if prog.step == 0:  # once: a second Ctrl-C aborts
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C sends; the handler only sets a flag
        return figures

    monkeypatch.setattr(lm_train.Trainer, "train_step", step_then_ctrl_c)
    assert main(["demo", "--seconds", "600", "--out", str(out), *DEMO_SMALL]) == 0
    printed = capsys.readouterr()
    res = json.loads(printed.out.strip().splitlines()[-1])
    assert (res["train"]["stopped_by"], res["train"]["steps"]) == ("interrupted", 1)
    assert "no best weights" not in printed.err  # the report says which weights; no note says it again
    # no epoch ended in this run: the weights at the stop, not the earlier demo's best ones
    assert res["train"]["weights"] == "model.last.safetensors" and not (out / "model.best.safetensors").exists()
    assert len((out / "test_pred.txt").read_text().splitlines()) == res["test_sentences"]
    assert json.loads((out / "config.json").read_text())["parse_layer"] == res["chosen_layer"]


# -- issue 13: one output line per input line, layers, deep trees, bad options (docs/cli.md "Bad input") --


def test_parse_keeps_one_output_line_per_input_line(tmp_path, capsys):
    run = make_run(tmp_path, "the cat sat on mat".split())
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n\n ... !\nthe mat\n")  # a blank line and a punctuation-only line
    assert main(["parsing", "parse", "--checkpoint", str(run), str(text)]) == 0
    out, err = capsys.readouterr()
    lines = out.split("\n")[:-1]
    assert len(lines) == 4 and lines[1] == lines[2] == ""
    assert leaves(__import__("onlstm").parsing.parse_brackets(lines[3])) == ["the", "mat"]
    assert "nothing to parse" in err and "2, 3" in err
    assert main(["parsing", "parse", "--checkpoint", str(run), "--format", "json", str(text)]) == 0
    rows = [json.loads(l) for l in capsys.readouterr()[0].splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4] and [r["tree"] is None for r in rows] == [0, 1, 1, 0]
    text.write_text("\n ... !\n")  # nothing to parse on any line: still one output line each, not a refusal
    assert main(["parsing", "parse", "--checkpoint", str(run), "--format", "json", str(text)]) == 0
    assert [json.loads(line)["tree"] for line in capsys.readouterr()[0].splitlines()] == [None, None]
    text.write_text("")
    assert main(["parsing", "parse", "--checkpoint", str(run), str(text)]) == 2
    assert "is empty: nothing to parse" in capsys.readouterr().err


def test_layer_zero_is_refused_and_the_runs_layer_is_the_default(tmp_path, capsys):
    run = make_run(tmp_path, "the cat sat".split(), normalisation="lower")
    for argv in (
        ["parsing", "parse", "--checkpoint", str(run), "--layer", "0"],
        ["parsing", "plot", "the cat", "--checkpoint", str(run)],
    ):
        if argv[1] == "plot":
            argv += ["--layer", "0", "--out", str(tmp_path / "fig")]
        assert main(argv) == 2
        assert "--layer must be between 1 and 3" in capsys.readouterr().err
    config = json.loads((run / "config.json").read_text())
    write_json(run / "config.json", {**config, "parse_layer": 3})  # as `onlstm demo` saves its chosen layer
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    assert main(["parsing", "parse", "--checkpoint", str(run), "--format", "json", str(text)]) == 0
    out, err = capsys.readouterr()
    row = json.loads(out)
    assert err.rstrip().endswith("layer 3")
    assert row["tree"] == to_brackets(build_tree(row["words"], row["distances"][2]))
    assert main(["parsing", "parse", "--checkpoint", str(run), "--layer", "1", str(text)]) == 0  # a given layer wins
    assert capsys.readouterr().err.rstrip().endswith("layer 1")
    write_json(run / "config.json", {**config, "parse_layer": 7})  # edited: no such layer, never silently another
    assert main(["parsing", "parse", "--checkpoint", str(run), str(text)]) == 2
    assert "config.json has parse_layer=7, not one of its 3 layers" in capsys.readouterr().err
    assert main(["parsing", "parse", "--checkpoint", str(run), "--layer", "2", str(text)]) == 0


def test_trees_of_5000_words_are_built_and_printed_without_recursion():
    from onlstm.parsing import spans

    n = 5000
    words = [f"w{k}" for k in range(n)]
    tree = build_tree(words, [float(n - k) for k in range(n)])  # falling distances: nested n deep
    assert leaves(tree) == words
    text = to_brackets(tree)
    assert text.startswith("(w0 (w1 (w2") and text.endswith("w4999" + ")" * (n - 1))
    assert len(spans(tree, include_root=True)) == n - 1
    assert to_brackets(build_tree(words, [float(k) for k in range(n)])).startswith("(" * (n - 1) + "w0 w1)")


def test_parse_a_5000_word_line(tmp_path, capsys):
    run = make_run(tmp_path, "the cat sat".split(), normalisation="lower")
    text = tmp_path / "long.txt"
    text.write_text(" ".join(["the", "cat", "sat"] * 1667)[: 5000 * 4] + "\n")
    for fmt in ("brackets", "pretty"):
        assert main(["parsing", "parse", "--checkpoint", str(run), "--format", fmt, str(text)]) == 0
        out = capsys.readouterr().out
        assert out.count("cat") == 1667


def test_bad_parsing_options_are_one_line_errors(tmp_path, capsys):
    run = make_run(tmp_path, "the cat sat".split(), normalisation="lower")
    bank = tmp_path / "wsj"
    bank.mkdir()
    (bank / "wsj_0001.mrg").write_text(MRG)
    a_dir = tmp_path / "a-dir"
    a_dir.mkdir()
    cases = [
        (["parsing", "parse", "--checkpoint", str(run), "--batch-size", "0"], "--batch-size: must be >= 1"),
        (
            ["parsing", "eval-parse", "--checkpoint", str(run), "--treebank", str(bank), "--random-draws", "0"],
            "--random-draws",
        ),
        (
            ["parsing", "eval-parse", "--checkpoint", str(run), "--treebank", str(bank), "--batch-size", "-1"],
            "--batch-size",
        ),
        (
            ["parsing", "eval-parse", "--checkpoint", str(run), "--treebank", str(bank), "--out-trees", str(a_dir)],
            "is a directory",
        ),
        (["parsing", "plot", "the cat", "--checkpoint", str(run), "--out", str(a_dir)], "is a directory"),
        (["parsing", "plot", "the cat", "--checkpoint", str(run), "--out", "/proc/fig"], "cannot write in /proc"),
    ]
    for argv, message in cases:
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse refuses a bad number before the command starts
            rc = exc.code
        err = capsys.readouterr().err
        assert rc == 2 and message in err and "Traceback" not in err, argv
    assert sorted(p.name for p in a_dir.iterdir()) == []


def random_tree(r, words: list[str]):
    """A random binary or ternary bracketing of ``words``."""
    if len(words) == 1:
        return words[0]
    cuts = sorted(r.sample(range(1, len(words)), min(len(words) - 1, r.choice([1, 2]))))
    bounds = [0, *cuts, len(words)]
    return tuple(random_tree(r, words[a:b]) for a, b in zip(bounds, bounds[1:]))


def test_pretty_trees_have_unbroken_lines(tmp_path, capsys):
    import random

    from onlstm.parsing.cli import _pretty

    down, up = set("│┌┐┬┼├┤"), set("│└┘┴┼├┤")
    r = random.Random(4)
    for n in (2, 3, 5, 8, 13):
        words = [f"w{i}" for i in range(n)]
        _pretty(random_tree(r, words))
        lines = capsys.readouterr().out.rstrip("\n").split("\n")
        assert lines[-1].split() == words
        grid = [line.ljust(max(map(len, lines))) for line in lines]
        for i, (row, below) in enumerate(zip(grid, grid[1:])):
            for c, cell in enumerate(row):
                # a line that leaves a cell downwards enters the next one (or reaches a word), and back up
                assert cell not in down or below[c] in up or i + 2 == len(grid), (n, i, c, "\n".join(lines))
                assert below[c] not in up or cell in down, (n, i, c, "\n".join(lines))
    run = make_run(tmp_path, "the cat sat on mat".split())
    (tmp_path / "in.txt").write_text("the cat sat on the mat\n")
    assert main(["parsing", "parse", "--checkpoint", str(run), "--format", "pretty", str(tmp_path / "in.txt")]) == 0
    drawn = capsys.readouterr().out.splitlines()
    assert drawn[-1].split() == "the cat sat on the mat".split() and all(line.strip() for line in drawn)


def test_output_files_already_there_are_replaced_only_with_overwrite(tmp_path, capsys):
    """A file the command would write that is there already (the user's, or an earlier output) is refused before any
    work, left as it was, and replaced with --overwrite; a plot's two files appear together."""
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "wsj_0001.mrg").write_text(MRG)
    run = make_run(tmp_path, "the cat sat on mat bob saw N dogs".split())
    prefix, trees = tmp_path / "fig", tmp_path / "pred.txt"
    plot = ["parsing", "plot", "--checkpoint", str(run), "the cat sat", "--out", str(prefix)]
    assert main(plot) == 0 and sorted(p.name for p in tmp_path.glob("fig*")) == ["fig.png", "fig.svg"]
    prefix.with_suffix(".svg").write_text("MINE")
    assert main(plot) == 2
    assert f"{prefix}.png and {prefix}.svg exist; choose another --out or pass --overwrite" in capsys.readouterr().err
    assert prefix.with_suffix(".svg").read_text() == "MINE"
    assert main([*plot, "--overwrite"]) == 0 and prefix.with_suffix(".svg").read_text().startswith("<?xml")
    mine = trees.with_name("pred.layer2.txt")
    mine.write_text("MINE")
    evaluate = ["parsing", "eval-parse", "--checkpoint", str(run), "--treebank", str(bank), "--out-trees", str(trees)]
    assert main(evaluate) == 2
    assert f"{mine} exists; choose another --out-trees or pass --overwrite" in capsys.readouterr().err
    assert mine.read_text() == "MINE" and not trees.with_name("pred.layer1.txt").exists()
    assert main([*evaluate, "--overwrite"]) == 0 and len(mine.read_text().splitlines()) == 2
    assert main([*evaluate, "--layers", "2"]) == 0  # one layer: the file named, not there yet
    assert len(trees.read_text().splitlines()) == 2


def test_eval_parse_feeds_a_cased_model_the_treebank_words_in_its_own_convention(tmp_path, capsys):
    """A model of one's own trained on cased text with digits (a WikiText-like corpus): eval-parse gives it
    ``Bob`` and ``3`` as its training text wrote them, not the PTB normalisation's ``bob`` and ``N`` (words it
    does not know: <unk>); the trees written keep the normalised gold words they are scored against."""
    from onlstm.data.reader import TextReader

    bank = tmp_path / "wsj"
    bank.mkdir()
    (bank / "wsj_0001.mrg").write_bytes(MRG.replace("\n", "\r\n").encode())
    run = make_run(tmp_path, "The the cat sat on mat Bob saw 3 dogs".split())
    cased = TextReader(lowercase=False, number=None, punctuation=True)
    cfg = json.loads((run / "config.json").read_text())
    cfg.pop("text_normalisation")
    write_json(run / "config.json", {**cfg, "text": cased.to_dict()})
    trees = tmp_path / "pred.txt"
    args = ["parsing", "eval-parse", "--checkpoint", str(run), "--treebank", str(bank), "--json"]
    assert main([*args, "--layers", "2", "--out-trees", str(trees)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["sentences"] == 2 and res["words"] == 10 and res["unknown_words"] == 0
    assert "bob" in Path(res["trees_written"][0]).read_text()  # the gold's words, as before
    write_json(run / "config.json", {**cfg, "text": TextReader().to_dict()})  # Mikolov's PTB: the paper's words
    assert main([*args, "--layers", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["unknown_words"] == 2  # bob and N: not in this cased vocabulary
