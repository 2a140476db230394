"""Language-modelling data: the PTB reader, vocabulary policy, columns, the BPTT schedule, the download
command's offline behaviour, and the config presets."""

from __future__ import annotations

import http.server
import os
import threading
from pathlib import Path

import pytest
import torch

from onlstm.cli import main
from onlstm.data.download import DownloadError, download
from onlstm.data.ptb import CorpusError, load_corpus, split_file
from onlstm.lm.config import RUNTIME_FIELDS, TrainConfig, explicit_settings, load_config
from onlstm.lm.data import batchify, bptt_schedule, column_share, segment
from onlstm.models.language_model import LMConfig, locked_dropout
from support import CONFIGS as CONFIG_DIR
from support import SHARED_DATA

PTB_DIR = SHARED_DATA / "ptb"
CONFIGS = CONFIG_DIR / "lm"


def write(dir: Path, files: dict[str, str]) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (dir / name).write_text(text)
    return dir


CLOSED = {"ptb.train.txt": " a b <unk> \n b c \n", "ptb.valid.txt": " c a \n", "ptb.test.txt": " b \n\n"}


# --------------------------------------------------------------------------- reader


def test_reader_appends_eos_and_builds_vocab_from_train(tmp_path):
    c = load_corpus(write(tmp_path, CLOSED))
    assert c.vocab.words == ["<eos>", "<unk>", "a", "b", "c"]  # specials, then first appearance
    assert c.closed_vocab
    w = c.vocab.words
    assert [w[i] for i in c["train"].ids] == ["a", "b", "<unk>", "<eos>", "b", "c", "<eos>"]
    assert [w[i] for i in c["valid"].ids] == ["c", "a", "<eos>"]
    assert [w[i] for i in c["test"].ids] == ["b", "<eos>", "<eos>"]  # an empty line is a lone <eos>
    assert c["train"].n_lines == 2 and c["test"].n_tokens == 3


def test_reader_accepts_plain_names(tmp_path):
    files = {k.replace("ptb.", ""): v for k, v in CLOSED.items()}
    c = load_corpus(write(tmp_path, files))
    assert split_file(tmp_path, "valid").name == "valid.txt" and len(c.vocab) == 5


def test_missing_and_empty_files_are_named(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus(tmp_path / "nowhere")
    (tmp_path / "a-file").write_text("a b\n")  # there, but not what it should be: said so
    with pytest.raises(CorpusError, match="data directory .*a-file is not a folder"):
        load_corpus(tmp_path / "a-file")
    odd = tmp_path / "odd"
    odd.mkdir()
    os.mkfifo(odd / "ptb.train.txt")  # a FIFO would never end
    with pytest.raises(CorpusError, match=r"ptb\.train\.txt is not a regular file"):
        split_file(odd, "train")
    write(tmp_path, {"ptb.train.txt": "a b\n", "ptb.valid.txt": "a\n"})
    with pytest.raises(CorpusError, match=r"no test file \(looked for ptb.test.txt and test.txt\)"):
        load_corpus(tmp_path)
    write(tmp_path, {"ptb.test.txt": "  \n\n"})
    with pytest.raises(CorpusError, match=r"ptb.test.txt is empty"):
        load_corpus(tmp_path)


def test_closed_vocabulary_rejects_unseen_words_with_location(tmp_path):
    write(tmp_path, {**CLOSED, "ptb.valid.txt": " a \n c zebra \n"})
    with pytest.raises(CorpusError, match=r"ptb.valid.txt, line 2: word 'zebra' .*closed vocabulary.*set oov to 'unk'"):
        load_corpus(tmp_path)
    c = load_corpus(tmp_path, oov="unk")
    assert c["valid"].n_unknown == 1 and c["valid"].ids[-2] == c.vocab.unk_id


def test_open_vocabulary_maps_unseen_words_to_unk(tmp_path):
    write(tmp_path, {"ptb.train.txt": "a b\n", "ptb.valid.txt": "a zebra\n", "ptb.test.txt": "b\n"})
    c = load_corpus(tmp_path)
    assert not c.closed_vocab and c["valid"].n_unknown == 1
    with pytest.raises(CorpusError, match="oov policy is 'error'"):
        load_corpus(tmp_path, oov="error")


@pytest.mark.skipif(not PTB_DIR.is_dir(), reason="shared PTB text not present")
def test_real_ptb_counts():
    c = load_corpus(PTB_DIR)
    assert len(c.vocab) == 10000 and c.closed_vocab
    assert [c[s].n_tokens for s in ("train", "valid", "test")] == [929589, 73760, 82430]
    assert sum(c[s].n_unknown for s in ("train", "valid", "test")) == 0


# --------------------------------------------------------------------------- columns and segments


def test_batchify_columns_are_contiguous_stretches():
    ids = torch.arange(23)
    d = batchify(ids, 4)  # 5 rows, 3 tokens dropped
    assert d.shape == (5, 4)
    assert d[:, 1].tolist() == [5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="too short"):
        batchify(torch.arange(5), 4)


@pytest.mark.parametrize("n, world", [(20, 2), (10, 3), (2, 4)])
def test_column_shares_partition_the_batch(n, world):
    shares = [column_share(n, r, world) for r in range(world)]
    assert shares[0][0] == 0 and shares[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(shares, shares[1:]))
    sizes = [b - a for a, b in shares]
    assert max(sizes) - min(sizes) <= 1


def test_bptt_schedule_tiles_the_stream_and_is_reproducible():
    n = 1000
    s = bptt_schedule(n, 70, seed=141, epoch=3)
    assert s == bptt_schedule(n, 70, seed=141, epoch=3)
    assert s != bptt_schedule(n, 70, seed=141, epoch=4)
    assert s[0].start == 0 and all(a.start + a.length == b.start for a, b in zip(s, s[1:]))
    assert s[-1].start + s[-1].length == n - 1  # every row is predicted once
    assert all(seg.length >= 2 for seg in s) and all(seg.length >= 5 for seg in s[:-1])
    assert all(seg.lr_scale >= 5 / 70 for seg in s)
    fixed = bptt_schedule(n, 70, 0, 1, variable=False)
    assert [x.length for x in fixed[:-1]] == [70] * (len(fixed) - 1) and fixed[0].lr_scale == 1.0


def test_bptt_lengths_follow_the_recipe():
    lengths = [seg.length for e in range(1, 30) for seg in bptt_schedule(100_000, 70, 1, e)[:-1]]
    mean = sum(lengths) / len(lengths)
    short = sum(x < 52 for x in lengths) / len(lengths)  # > 3.5 sd below 70: drawn around 35
    assert 67.5 < mean < 69.5  # 0.95 * 70 + 0.05 * 35 = 68.25, minus int() truncation ~0.5
    assert 0.035 < short < 0.065


def test_segment_targets_are_next_rows():
    d = batchify(torch.arange(40), 2)
    x, y = segment(d, 15, 10)
    assert x.shape == (4, 2) and torch.equal(y, x + 1)


def test_locked_dropout_shard_is_the_slice_of_the_whole_batch_mask():
    x = torch.ones(3, 6, 5)
    torch.manual_seed(0)
    full = locked_dropout(x, 0.5, True)
    torch.manual_seed(0)
    part = locked_dropout(x[:, 2:4], 0.5, True, shard=(2, 6))
    assert torch.equal(part, full[:, 2:4])
    assert torch.equal(full[0], full[2])  # one mask over time


# --------------------------------------------------------------------------- download


def test_download_offline_explains_data_dir(tmp_path):
    with pytest.raises(DownloadError, match=r"(?s)could not download http://127.0.0.1:9/ptb.train.txt.*--data-dir"):
        download("ptb", tmp_path / "ptb", url="http://127.0.0.1:9/", timeout=5, log=lambda m: None)
    assert not (tmp_path / "ptb" / "ptb.train.txt").exists()


def test_download_command_exit_status_and_message(tmp_path, capsys):
    rc = main(["data", "download", "ptb", "--to", str(tmp_path), "--url", "http://127.0.0.1:9", "--timeout", "5"])
    err = capsys.readouterr().err
    assert rc == 1 and "no internet access" in err and f"--data-dir {tmp_path}" in err


def test_download_rejects_wrong_checksum(tmp_path):
    served = write(tmp_path / "served", {"ptb.train.txt": "not the corpus\n"})

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(served), **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(DownloadError, match="checksum mismatch"):
            download("ptb", tmp_path / "out", url=f"http://127.0.0.1:{server.server_port}/", log=lambda m: None)
    finally:
        server.shutdown()
    assert not (tmp_path / "out" / "ptb.train.txt").exists()


# --------------------------------------------------------------------------- configs


def test_paper_preset_is_the_papers_command():
    cfg = load_config(CONFIGS / "ptb-paper.yaml")
    learned = {k: v for k, v in cfg.train.to_dict().items() if k not in RUNTIME_FIELDS}
    assert learned == {k: v for k, v in TrainConfig().to_dict().items() if k not in RUNTIME_FIELDS}
    m = cfg.model_config(10000)
    assert (m.emb_size, m.hidden_sizes, m.chunk_size) == (400, [1150, 1150, 400], 10)
    assert (m.dropout_in, m.dropout_hidden, m.dropout_out, m.dropout_emb, m.dropconnect) == (0.5, 0.3, 0.45, 0.1, 0.45)
    t = cfg.train
    assert (t.batch_size, t.bptt, t.lr, t.clip, t.weight_decay, t.alpha, t.beta, t.nonmono, t.seed, t.epochs) == (
        20,
        70,
        30.0,
        0.25,
        1.2e-6,
        2.0,
        1.0,
        5,
        141,
        1000,
    )
    from onlstm.lm import LanguageModel

    n = sum(p.numel() for p in LanguageModel(m).parameters())
    assert round(n / 1e6, 1) == 25.2  # docs/design.md §1.2: 25.2M parameters at vocab 10k


@pytest.mark.parametrize("name", ["ptb-cpu.yaml", "tiny.yaml"])
def test_other_presets_load(name):
    """Every field a preset file sets arrives in the loaded config (a typo'd or dropped key would not)."""
    yaml = pytest.importorskip("yaml")
    cfg, given = load_config(CONFIGS / name), yaml.safe_load((CONFIGS / name).read_text())
    model = cfg.model_config(100)
    for field, value in given.get("model", {}).items():
        assert getattr(model, field) == value, field
    for field, value in given.get("train", {}).items():
        assert getattr(cfg.train, field) == value, field
    assert given.get("model") or given.get("train")  # the check above checked something


def test_config_errors_name_the_field(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  lr: fast\n")
    with pytest.raises(ValueError, match=r"train.lr must be a number"):
        load_config(f)
    f.write_text("train:\n  learning_rate: 1\n")
    with pytest.raises(ValueError, match=r"unknown train fields \['learning_rate'\]"):
        load_config(f)
    f.write_text("model:\n  vocab_size: 10\n")
    with pytest.raises(ValueError, match="taken from the training text"):
        load_config(f)
    f.write_text("model:\n  hidden_sizes: [30, 20]\n  emb_size: 16\n")
    with pytest.raises(ValueError, match="tie_weights needs"):
        load_config(f).model_config(50)


def test_flags_override_the_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  lr: 20\n  weight_decay: 1e-6\nmodel:\n  cell: lstm\n")
    e = explicit_settings(f, {"train": {"lr": 5.0}, "model": {"hidden_sizes": [8, 4]}})
    assert e == {"model": {"cell": "lstm", "hidden_sizes": [8, 4]}, "train": {"lr": 5.0, "weight_decay": 1e-6}}
    cfg = load_config(f, {"train": {"lr": 5.0}})
    assert cfg.train.lr == 5.0 and cfg.train.weight_decay == 1e-6 and cfg.model["cell"] == "lstm"
    assert LMConfig(vocab_size=5, **{**cfg.model, "hidden_sizes": [8, 400]}).cell == "lstm"


def test_oov_unk_without_an_unk_token_says_what_is_missing(tmp_path):
    """--oov unk was passed, but the vocabulary (e.g. a model's) has no <unk>: the message must not ask for it."""
    from onlstm.data.ptb import encode_split
    from onlstm.data.vocab import Vocab

    (tmp_path / "v.txt").write_text("a zebra\n")
    with pytest.raises(CorpusError, match="no <unk> to map it to") as err:
        encode_split("valid", tmp_path / "v.txt", Vocab(["<eos>", "a"]), closed_vocab=False, oov="unk")
    assert "--oov unk" not in str(err.value)
