"""The streamed corpus reader for large corpora (Gulordava et al.'s Wikipedia, WikiText-103): a vocabulary
from word counts with an optional cap, a vocab.txt read when present, ids in one int64 tensor, and no Python
object per token kept while encoding (checked with tracemalloc on generated text, not by timing)."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest
import torch

import onlstm.data.ptb as ptb
from onlstm.data.ptb import CorpusError, encode_split, load_corpus, read_vocab_file


def write(dir: Path, files: dict[str, str]) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (dir / name).write_text(text)
    return dir


def decode(corpus, split: str) -> list[str]:
    return [corpus.vocab.words[i] for i in corpus[split].ids]


def test_cap_keeps_the_most_frequent_words_and_maps_the_rest_to_unk(tmp_path):
    # counts: a 4, b 3, d 2, c 2, e 1; cap 5 = <eos>, <unk> + 3 words: a, b and d (d ties c but is seen first)
    train = "e d c\na b a\nb a d\nc b a\n"
    c = load_corpus(write(tmp_path, {"train.txt": train, "valid.txt": "a e\n", "test.txt": "d\n"}), max_vocab=5)
    assert c.vocab.words == ["<eos>", "<unk>", "d", "a", "b"]  # kept words in order of first appearance
    assert decode(c, "train")[:4] == ["<unk>", "d", "<unk>", "<eos>"]
    assert c["train"].n_unknown == 3 and c["valid"].n_unknown == 1 and decode(c, "test") == ["d", "<eos>"]
    assert c.limited and not c.closed_vocab
    with pytest.raises(CorpusError, match="at least 3"):
        load_corpus(tmp_path, max_vocab=2)


def test_a_vocab_file_is_the_vocabulary_even_for_a_closed_corpus(tmp_path):
    files = {"train.txt": "the cat <unk>\n", "valid.txt": "the dog\n", "test.txt": "a cat\n", "vocab.txt": "the\ncat\n"}
    c = load_corpus(write(tmp_path, files))
    assert c.vocab.words == ["<eos>", "<unk>", "the", "cat"]  # specials added before the file's words
    assert c.closed_vocab and c.limited
    assert decode(c, "valid") == ["the", "<unk>", "<eos>"]  # not an error: the file leaves words out
    assert load_corpus(tmp_path, max_vocab=3).vocab.words == ["<eos>", "<unk>", "the"]  # the file's first words


def test_vocab_file_errors_are_clear(tmp_path):
    with pytest.raises(CorpusError, match=r"lists \['a'\] more than once"):
        read_vocab_file(write(tmp_path, {"v.txt": "a\nb\na\n"}) / "v.txt")
    with pytest.raises(CorpusError, match="v2.txt is empty"):
        read_vocab_file(write(tmp_path, {"v2.txt": "\n"}) / "v2.txt")


def test_lines_that_already_end_in_eos_get_no_second_one(tmp_path):
    c = load_corpus(write(tmp_path, {"train.txt": "a b <eos>\nb\n\n", "valid.txt": "a\n", "test.txt": "b <eos>\n"}))
    assert decode(c, "train") == ["a", "b", "<eos>", "b", "<eos>", "<eos>"]
    assert decode(c, "test") == ["b", "<eos>"]


def test_non_utf8_text_names_the_file(tmp_path):
    write(tmp_path, {"valid.txt": "a\n", "test.txt": "a\n"})
    (tmp_path / "train.txt").write_bytes(b"a b\n\xff\xfe c\n")
    with pytest.raises(CorpusError, match=r"train.txt: not UTF-8 text at line 2 \(invalid start byte at byte 4 "):
        load_corpus(tmp_path)


def test_a_byte_that_is_not_utf8_is_named_by_its_own_line_far_into_the_file(tmp_path):
    """A latin-1 word on line 3,001 (past the text reader's first buffer): the line and the byte are its own, not
    those of the buffer that held it ("near line 1", "position 903")."""
    write(tmp_path, {"valid.txt": "a\n", "test.txt": "a\n"})
    body = b"\xef\xbb\xbf" + b"the cat sat\r\n" * 3000
    (tmp_path / "train.txt").write_bytes(body + "a caf\xe9 b\r\n".encode("latin-1"))
    with pytest.raises(CorpusError) as err:
        load_corpus(tmp_path)
    assert f"not UTF-8 text at line 3001 (invalid continuation byte at byte {len(body) + 5} " in str(err.value)
    assert "iconv" in str(err.value)


def generated(path: Path, n_words: int, seed: int = 0) -> int:
    """Zipf-like text: ``n_words`` words over 5,000 types in lines of 5-30 words; returns the token count."""
    r = random.Random(seed)
    types = [f"w{i}" for i in range(5000)]
    weights = [1 / (i + 1) for i in range(5000)]
    words = r.choices(types, weights, k=n_words)
    lines, i = [], 0
    while i < n_words:
        n = r.randint(5, 30)
        lines.append(" ".join(words[i : i + n]))
        i += n
    path.write_text("\n".join(lines) + "\n")
    return n_words + len(lines)


def test_encoding_keeps_no_python_object_per_token(tmp_path, monkeypatch):
    """Python-heap peak while encoding 300k tokens stays far below a list of every id (which alone would
    take 8 bytes a token for its pointers, 2.4 MB): the ids go to the tensor 1,000 at a time here."""
    monkeypatch.setattr(ptb, "ENCODE_BLOCK", 1000)
    path = tmp_path / "train.txt"
    n = generated(path, 280_000)
    vocab = ptb.vocab_from_counts(ptb.count_words(path)[0])
    tracemalloc.start()
    split = encode_split("train", path, vocab, closed_vocab=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert split.ids.dtype == torch.int64 and split.ids.numel() == n and split.ids.is_contiguous()
    assert peak < 1_000_000, f"encoding kept {peak:,} bytes of Python objects for {n:,} tokens"
    # and the ids are right: decoding gives the text back
    first = path.read_text().splitlines()[0].split()
    assert [vocab.words[i] for i in split.ids[: len(first) + 1]] == [*first, "<eos>"]


def test_wiki_paper_preset_has_the_papers_syneval_model_size():
    from onlstm.lm.config import load_config

    cfg = load_config("wiki-paper", {})
    m = cfg.model_config(50002)
    assert (m.emb_size, m.hidden_sizes, m.tie_weights) == (650, [650, 650], True)
    assert cfg.train.max_vocab == 50000


def test_a_capped_run_trains_and_evaluates_with_words_outside_its_vocabulary(tmp_path, capsys):
    """A closed-vocabulary corpus (train has <unk>) capped by --max-vocab: the words the cap leaves out
    are <unk> in training and in `lm eval`, not an error."""
    import json

    from onlstm.cli import main
    from support import TINY_LM

    r = random.Random(1)
    words = "the cat dog sat on mat a big small red ran fast slow <unk>".split()
    text = lambda n: "\n".join(" ".join(r.choices(words, k=8)) for _ in range(n)) + "\n"
    data = write(tmp_path / "data", {"train.txt": text(120), "valid.txt": text(12), "test.txt": text(12)})
    out = tmp_path / "run"
    argv = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(data), "--out", str(out)]
    assert main([*argv, "--epochs", "1", "--max-vocab", "6", "--no-final-test", "--no-progress"]) == 0
    assert json.loads((out / "config.json").read_text())["data"]["vocab_limited"] is True
    assert len(json.loads((out / "vocab.json").read_text())) == 6
    capsys.readouterr()
    assert main(["lm", "eval", "--checkpoint", str(out), "--split", "valid", "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["unknown_words"] > 0


def test_files_joined_with_cat_keep_no_byte_order_mark_in_a_word(tmp_path):
    """Two files an editor wrote with a byte-order mark, joined with ``cat``: the second mark starts a line in the
    middle of the file; it is not text, and was glued to that line's first word (``'\\ufeffthe'``, a word apart)."""
    write(tmp_path, {"valid.txt": "the cat\n", "test.txt": "the cat\n"})
    (tmp_path / "train.txt").write_bytes(("\ufeffthe cat\n" * 2 + "\ufeffthe dog\n").encode("utf-8"))
    c = load_corpus(tmp_path)
    assert decode(c, "train") == ["the", "cat", "<eos>"] * 2 + ["the", "dog", "<eos>"]
    assert not any("\ufeff" in w for w in c.vocab.words)
