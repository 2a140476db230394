"""Per-token surprisal: ``LanguageModel.surprisals`` against a step-by-step computation, and ``onlstm lm
surprisal``'s TSV (lm-zoo's get-surprisals layout, unknown words as <unk>, the final <eos> included)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from onlstm.cli import main
from onlstm.data.reader import TextReader
from onlstm.data.vocab import Vocab
from onlstm.models.language_model import LanguageModel, LMConfig

WORDS = ["<eos>", "<unk>", "the", "cat", "dog", "sat", "ran", "on", "a", "mat", "big"]


def tiny(cell: str = "onlstm", seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    model = LanguageModel(LMConfig(vocab_size=len(WORDS), emb_size=8, hidden_sizes=[12, 8], cell=cell, chunk_size=4))
    with torch.no_grad():  # spread the weights so that the words' probabilities differ clearly
        for p in model.parameters():
            p.normal_(0, 0.6)
    model.vocab = Vocab(WORDS)
    return model.eval()


def stepwise_bits(model: LanguageModel, words: list[str]) -> list[float]:
    """-log2 p of each of ``words + [<eos>]`` after ``<eos>``, one token at a time with the carried state."""
    ids = model.vocab.encode(["<eos>", *words, "<eos>"])[0]
    out, state = [], None
    with torch.no_grad():
        for t in range(len(ids) - 1):
            h, state, _ = model(torch.tensor([[ids[t]]]), state)
            logp = torch.log_softmax(model.logits(h)[0, 0].double(), 0)[ids[t + 1]]
            out.append(-float(logp) / math.log(2))
    return out


@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
def test_surprisals_equal_reading_each_sentence_alone(cell):
    model, r = tiny(cell), random.Random(1)
    sentences = [" ".join(r.choice(WORDS[2:] + ["zebra"]) for _ in range(r.randint(0, 7))) for _ in range(40)]
    sentences += [sentences[3], sentences[5] + " mat"]  # a duplicate and an extension share prefixes in the tree
    got = model.surprisals(sentences, batch_size=7)
    for sentence, bits in zip(sentences, got):
        assert bits.dtype == torch.float64 and len(bits) == len(sentence.split()) + 1
        assert bits.tolist() == pytest.approx(stepwise_bits(model, sentence.split()), abs=1e-4)


def test_surprisals_need_a_vocabulary():
    model = tiny()
    del model.vocab
    with pytest.raises(ValueError, match="vocabulary"):
        model.surprisals(["the cat"])


def test_the_command_writes_lm_zoos_table(tmp_path, capsys):
    model = tiny()
    model.save_pretrained(tmp_path / "model")
    text = tmp_path / "sentences.txt"
    text.write_text("the cat sat\na zebra ran\n")
    assert main(["lm", "surprisal", "--checkpoint", str(tmp_path / "model"), str(text)]) == 0
    out = capsys.readouterr()
    rows = [line.split("\t") for line in out.out.splitlines()]
    assert rows[0] == ["sentence_id", "token_id", "token", "surprisal"]
    assert [r[:3] for r in rows[1:]] == [
        ["1", "1", "the"], ["1", "2", "cat"], ["1", "3", "sat"], ["1", "4", "<eos>"],
        ["2", "1", "a"], ["2", "2", "<unk>"], ["2", "3", "ran"], ["2", "4", "<eos>"],
    ]  # fmt: skip
    expected = stepwise_bits(model, "the cat sat".split()) + stepwise_bits(model, "a zebra ran".split())
    assert [float(r[3]) for r in rows[1:]] == pytest.approx(expected, abs=1e-5)
    assert "2 sentences, 8 tokens (1 read as <unk>)" in out.err


def test_an_existing_output_is_kept_without_overwrite(tmp_path, capsys):
    tiny().save_pretrained(tmp_path / "model")
    (tmp_path / "s.txt").write_text("the cat\n")
    out = tmp_path / "s.tsv"
    out.write_text("mine")
    args = ["lm", "surprisal", "--checkpoint", str(tmp_path / "model"), str(tmp_path / "s.txt"), "--out", str(out)]
    assert main(args) == 2 and out.read_text() == "mine"
    assert "--overwrite" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0 and out.read_text().startswith("sentence_id\t")


def test_a_folder_as_output_is_refused_before_any_scoring(tmp_path, capsys, monkeypatch):
    """--out naming a folder: exit 2 with one line naming it, with or without --overwrite, before the model is
    loaded (it once failed only after scoring everything, with exit 4, meant for a disk that refuses a write)."""
    import onlstm.models.language_model as language_model

    tiny().save_pretrained(tmp_path / "model")
    (tmp_path / "s.txt").write_text("the cat\n")
    (tmp_path / "folder").mkdir()
    monkeypatch.setattr(language_model, "load_language_model_run", lambda *a, **k: pytest.fail("the model was read"))
    args = ["lm", "surprisal", "--checkpoint", str(tmp_path / "model"), str(tmp_path / "s.txt")]
    for overwrite in ([], ["--overwrite"]):
        assert main([*args, "--out", str(tmp_path / "folder"), *overwrite]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"--out {tmp_path / 'folder'} is a directory; give a file name" in err
    assert list((tmp_path / "folder").iterdir()) == []


def test_a_string_is_one_sentence():
    model = tiny()
    (one,) = model.surprisals("the cat sat on a mat")
    assert one.tolist() == pytest.approx(stepwise_bits(model, "the cat sat on a mat".split()), abs=1e-4)
    assert len(model.surprisals("the cat")) == 1  # not one sentence per character


def test_raw_text_is_read_as_the_training_text_was_written():
    model = tiny()
    model.reader = TextReader.detect(WORDS)  # Mikolov's convention: lower case, no punctuation
    raw = model.surprisals(["The cat sat on a mat.", "A big dog, the cat."])
    done = model.surprisals(["the cat sat on a mat", "a big dog the cat"], pretokenized=True)
    assert [b.tolist() for b in raw] == [b.tolist() for b in done]
    assert raw[0].tolist() == pytest.approx(stepwise_bits(model, "the cat sat on a mat".split()), abs=1e-4)
    # pretokenized: read as it is, so a capital is another word (<unk> here)
    (cased,) = model.surprisals("The cat", pretokenized=True)
    assert cased.tolist() == pytest.approx(stepwise_bits(model, ["<unk>", "cat"]), abs=1e-4)


def test_the_command_reads_raw_text_and_shows_what_the_model_read(tmp_path, capsys):
    model = tiny()
    model.save_pretrained(tmp_path / "model", run_config={"text": TextReader.detect(WORDS).to_dict()})
    (tmp_path / "raw.txt").write_text("The cat sat.\nA zebra ran!\n")
    (tmp_path / "done.txt").write_text("the cat sat\na zebra ran\n")
    checkpoint = ["lm", "surprisal", "--checkpoint", str(tmp_path / "model")]
    assert main([*checkpoint, str(tmp_path / "raw.txt")]) == 0
    raw = capsys.readouterr()
    assert main([*checkpoint, "--pretokenized", str(tmp_path / "done.txt")]) == 0
    assert raw.out == capsys.readouterr().out  # the same rows, the same values
    rows = [line.split("\t") for line in raw.out.splitlines()[1:]]
    assert [r[2] for r in rows] == ["the", "cat", "sat", "<eos>", "a", "<unk>", "ran", "<eos>"]
    assert "note" not in raw.err
    assert main([*checkpoint, "--pretokenized", str(tmp_path / "raw.txt")]) == 0
    verbatim = [line.split("\t")[2] for line in capsys.readouterr().out.splitlines()[1:]]
    assert verbatim == ["<unk>", "cat", "<unk>", "<eos>", "<unk>", "<unk>", "<unk>", "<eos>"]


def test_a_model_that_does_not_say_how_it_reads_reads_as_ptb_said_once(tmp_path, capsys):
    tiny().save_pretrained(tmp_path / "model")  # no reader saved: an older run
    (tmp_path / "raw.txt").write_text("The cat sat.\nThe dog ran.\n")
    assert main(["lm", "surprisal", "--checkpoint", str(tmp_path / "model"), str(tmp_path / "raw.txt")]) == 0
    out, err = capsys.readouterr()
    assert [line.split("\t")[2] for line in out.splitlines()[1:4]] == ["the", "cat", "sat"]
    notes = [line for line in err.splitlines() if "note:" in line]
    assert len(notes) == 1 and notes[0].startswith("onlstm lm surprisal: note: ") and "PTB" in notes[0]


def test_a_file_whose_lines_end_with_a_lone_carriage_return_is_named_in_a_note(tmp_path, capsys):
    # an old Mac OS file: no line feed at all, so the whole file is one line; read silently, it was one sentence
    model = tiny()
    model.save_pretrained(tmp_path / "model", run_config={"text": TextReader.detect(WORDS).to_dict()})
    (tmp_path / "mac.txt").write_bytes(b"the cat sat\ra dog ran\r")
    assert main(["lm", "surprisal", "--checkpoint", str(tmp_path / "model"), str(tmp_path / "mac.txt")]) == 0
    got = capsys.readouterr()
    assert "note: the text has carriage returns (\\r) but no line feed" in got.err
    assert "tr '\\r' '\\n'" in got.err
    (tmp_path / "unix.txt").write_bytes(b"the cat sat\na dog ran\n")  # the fix it names: two sentences, no note
    assert main(["lm", "surprisal", "--checkpoint", str(tmp_path / "model"), str(tmp_path / "unix.txt")]) == 0
    fixed = capsys.readouterr()
    assert "note" not in fixed.err and {r.split("\t")[0] for r in fixed.out.splitlines()[1:]} == {"1", "2"}
