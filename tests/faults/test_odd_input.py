"""Issue 48's odd inputs, generated over the readers they reach: a model whose vocabulary lacks ``<eos>``, logic
data files that are dangling links or FIFOs, regular expressions that cannot be compiled, closed standard streams
and a terminal that cannot encode the output. Each ends as docs/cli.md promises: one line, a documented exit
status, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from onlstm.cli import main
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.models import LanguageModel, LMConfig
from support import REPO, WORDS, write_corpus

ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ONLSTM_NO_EXTENSION": "1", "OMP_NUM_THREADS": "1"}


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-2000:]
    return err


def save_model(folder, words: list[str]):
    cfg = LMConfig(vocab_size=len(words), emb_size=8, hidden_sizes=[12, 8], chunk_size=4)
    LanguageModel(cfg).eval().save_pretrained(folder, words)
    return folder


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A model with ``<eos>``, one without, and an input for every reader."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "sentences.txt").write_text("the cat sat\na dog ran\n")
    (d / "pairs.tsv").write_text("simple_agrmt\tthe dog ran\tthe dog ran fast\n")
    suite = {
        "meta": {"name": "s", "metric": "sum"},
        "region_meta": {"1": "a"},
        "predictions": [{"type": "formula", "formula": "(1;%x%) > (1;%y%)"}],
        "items": [{"item_number": 1, "conditions": [{"condition_name": c, "regions": [{"region_number": 1,
                   "content": "the cat"}]} for c in "xy"]}],
    }  # fmt: skip
    (d / "suite.json").write_text(json.dumps(suite))
    write_corpus(d / "corpus")
    save_model(d / "with-eos", ["<eos>", "<unk>", *WORDS])
    save_model(d / "no-eos", ["<unk>", *WORDS])
    return d


#: Every command that reads sentences with a language model (each frames them with <eos>).
SENTENCE_READERS = {
    "parsing parse": lambda d, m: ["parsing", "parse", "--checkpoint", str(m), str(d / "sentences.txt")],
    "lm surprisal": lambda d, m: ["lm", "surprisal", "--checkpoint", str(m), str(d / "sentences.txt")],
    "lm eval": lambda d, m: ["lm", "eval", "--checkpoint", str(m), "--data-dir", str(d / "corpus")],
    "syneval --data": lambda d, m: ["syneval", "--checkpoint", str(m), "--data", str(d / "pairs.tsv")],
    "syneval --suite": lambda d, m: ["syneval", "--checkpoint", str(m), "--suite", str(d / "suite.json")],
}


@pytest.mark.parametrize("reader", SENTENCE_READERS)
def test_a_vocabulary_without_eos_is_refused_by_every_sentence_reader(inputs, capsys, reader):
    argv = SENTENCE_READERS[reader]
    assert main(argv(inputs, inputs / "with-eos")) == 0  # the same command works with <eos>
    capsys.readouterr()
    assert main(argv(inputs, inputs / "no-eos")) == 2
    assert "has no <eos>" in one_line(capsys)


@pytest.fixture(scope="module")
def logic_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("logic")
    generate_dataset(d / "data", GenerateConfig(per_length=6, seed=3, max_ops=4, test_count=2))
    run = d / "run"
    tiny = ["--emb-size", "8", "--hidden-size", "8", "--chunk-size", "4", "--mlp-hidden", "8", "--no-progress"]
    assert main(["logic", "train", "--data", str(d / "data"), "--out", str(run), *tiny, "--epochs", "1"]) == 0
    return d


LOGIC_READERS = {
    "logic train": lambda data, tmp, run: ["logic", "train", "--data", str(data), "--out", str(tmp / "new-run")],
    "logic stats": lambda data, tmp, run: ["logic", "stats", str(data)],
    "logic eval": lambda data, tmp, run: ["logic", "eval", "--checkpoint", str(run), "--data", str(data)],
}


@pytest.mark.parametrize("special", ["dangling link", "fifo"])
@pytest.mark.parametrize("reader", LOGIC_READERS)
@pytest.mark.parametrize("name", ["train2", "test1"])
def test_a_logic_data_file_that_is_no_file_is_refused_by_name(logic_data, tmp_path, capsys, reader, special, name):
    data = tmp_path / "data"
    data.mkdir()
    for f in (logic_data / "data").iterdir():
        (data / f.name).write_bytes(f.read_bytes())
    (data / name).unlink()
    if special == "fifo":
        os.mkfifo(data / name)
    else:
        (data / name).symlink_to(tmp_path / "gone")
    capsys.readouterr()
    assert main(LOGIC_READERS[reader](data, tmp_path, logic_data / "run")) == 2
    assert str(data / name) in one_line(capsys)
    assert not (tmp_path / "new-run").exists()


@pytest.mark.parametrize(
    "pattern", ["a{99999999999}", "(" * 100_000 + ")" * 100_000, "(?:" * 5000 + "a" + ")" * 5000, "["]
)
def test_logic_holdout_refuses_a_pattern_python_cannot_compile(logic_data, tmp_path, capsys, pattern):
    out = tmp_path / "held"
    assert main(["logic", "holdout", "--data", str(logic_data / "data"), "--pattern", pattern, "--out", str(out)]) == 2
    assert "--pattern" in one_line(capsys) and not out.exists()


def test_argparse_refusals_are_one_line(tmp_path, capsys):
    # data download's --timeout and export's --weights are checked by argparse, which printed its usage first
    for argv in (
        ["data", "download", "ptb", "--to", str(tmp_path / "d"), "--timeout", "-1"],
        ["data", "download", "ptb", "--to", str(tmp_path / "d"), "--timeout", "nan"],
        ["export", "--checkpoint", str(tmp_path), "--to", str(tmp_path / "e"), "--weights", "nonsense"],
        ["lm", "train"],
    ):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = one_line(capsys)
        assert "usage:" not in err and "--help" in err
    assert list(tmp_path.iterdir()) == []
    lm_train = ["lm", "train", "--data-dir", str(tmp_path), "--out", str(tmp_path / "o"), "--bogus", "1"]
    for argv, command in ((lm_train, "onlstm lm train"), (["presets", "-z"], "onlstm presets")):
        with pytest.raises(SystemExit):  # refused by the command it was given to, which names its own --help
            main(argv)
        err = one_line(capsys)
        assert err.startswith(f"{command}: unrecognized arguments: ") and f"see {command} --help" in err


def _onlstm(args: list[str], close: tuple[int, ...] = (), env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """The command in a process of its own whose descriptors ``close`` are closed, as the shell's ``<&-``/``>&-``."""
    closer = (lambda: [os.close(fd) for fd in close]) if close else None
    return subprocess.run(
        [sys.executable, "-m", "onlstm", *args], env=env or ENV, preexec_fn=closer, capture_output=not close, **kw
    )


#: The commands that read text from standard input and print their results on standard output.
STREAM_COMMANDS = {
    "lm surprisal": lambda m: ["lm", "surprisal", "--checkpoint", str(m)],
    "parsing parse": lambda m: ["parsing", "parse", "--checkpoint", str(m)],
}


@pytest.mark.slow  # processes of their own, each importing torch
@pytest.mark.parametrize("command", STREAM_COMMANDS)
def test_closed_standard_streams_are_one_line(inputs, tmp_path, command):
    base, text = STREAM_COMMANDS[command](inputs / "with-eos"), str(inputs / "sentences.txt")
    stdin_arg = ["-"] if command == "lm surprisal" else []
    err = tmp_path / "err"
    with open(err, "w") as sink:  # stdin closed, input read from standard input: one line, exit 2
        rc = _onlstm([*base, *stdin_arg], close=(0,), stderr=sink).returncode
    assert rc == 2 and "standard input is closed" in err.read_text() and len(err.read_text().splitlines()) == 1
    with open(err, "w") as sink:  # stdout closed: the output would be lost, one line, exit 2
        rc = _onlstm([*base, text], close=(1,), stderr=sink).returncode
    assert rc == 2 and "standard output is closed" in err.read_text(), err.read_text()
    assert "Traceback" not in err.read_text()
    # stdin closed, input from a file: works, the output whole
    out = tmp_path / "out"
    with open(out, "w") as sink:
        assert _onlstm([*base, text], close=(0,), stdout=sink, stderr=subprocess.DEVNULL).returncode == 0
    assert len(out.read_text().splitlines()) >= 2
    # the reader of a pipe goes away after one line (`| head -1`): quietly, exit 0
    many = tmp_path / "many.txt"
    many.write_text("the cat sat\n" * 3000)
    proc = subprocess.Popen([sys.executable, "-m", "onlstm", *base, str(many)], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=600) == 0
    assert "Traceback" not in proc.stderr.read().decode()


@pytest.mark.slow  # a process of its own
def test_the_cpp_kernel_loads_with_closed_standard_streams(tmp_path):
    code = "from onlstm.nn import cpp_kernel; m = cpp_kernel.load_extension(); " + (
        f"open({str(tmp_path / 'r')!r}, 'w').write(str(m is not None) + ' ' + str(cpp_kernel.extension_error()))"
    )
    env = {k: v for k, v in ENV.items() if k != "ONLSTM_NO_EXTENSION"}
    for close in ((1,), (0,), (0, 1, 2)):
        closer = lambda close=close: [os.close(fd) for fd in close]
        subprocess.run([sys.executable, "-c", code], env=env, preexec_fn=closer, timeout=1200, check=True)
        assert (tmp_path / "r").read_text() == "True None", close


@pytest.mark.slow  # a process of its own
def test_logic_eval_on_a_terminal_that_cannot_encode_the_table(logic_data):
    env = {**ENV, "LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii"}
    run, data = str(logic_data / "run"), str(logic_data / "data")
    proc = _onlstm(["logic", "eval", "--checkpoint", run, "--data", data], env=env, timeout=600)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert b"\\u2013" in proc.stdout  # the dash of an empty column, escaped
