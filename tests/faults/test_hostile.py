"""Issue 35's harness, the rest: special files where run files should be, closed pipes, SIGTERM, non-UTF-8 input,
a tampered resume position and an alias bomb, each one line with a documented exit status (docs/cli.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from onlstm.checkpoint import config_header, save_weights
from onlstm.cli import main
from onlstm.data.vocab import Vocab
from onlstm.files import write_json
from onlstm.models import LanguageModel, LMConfig
from support import REPO, WORDS

ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ONLSTM_NO_EXTENSION": "1"}


def lm_run(run: Path) -> Path:
    cfg = LMConfig(vocab_size=len(WORDS), emb_size=8, hidden_sizes=[12, 8], chunk_size=4, cell="onlstm")
    model = LanguageModel(cfg)
    save_weights(run / "model.best.safetensors", model)
    Vocab(WORDS).save(run / "vocab.json")
    write_json(run / "config.json", config_header("lm", model.config.to_dict()))
    return run


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-2000:]
    return err


@pytest.mark.parametrize("name", ["config.json", "vocab.json", "model.best.safetensors"])
@pytest.mark.parametrize("special", ["fifo", "dev-zero", "directory"])
def test_a_special_file_in_place_of_a_run_file_is_refused_without_hanging(tmp_path, capsys, name, special):
    run = lm_run(tmp_path / "run")
    (run / name).unlink()
    if special == "fifo":
        os.mkfifo(run / name)
    elif special == "dev-zero":
        (run / name).symlink_to("/dev/zero")
    else:
        (run / name).mkdir()
    (tmp_path / "in.txt").write_text("the cat sat\n")
    assert main(["parsing", "parse", "--checkpoint", str(run), str(tmp_path / "in.txt")]) == 2
    one_line(capsys)


def test_non_utf8_config_and_data_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"train:\n  lr: \xff\xfe\n")
    assert main(["lm", "train", "--config", str(bad), "--data-dir", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "not UTF-8" in one_line(capsys)
    assert not (tmp_path / "r").exists()


def test_an_alias_bomb_gives_a_short_message(tmp_path, capsys):
    bomb = tmp_path / "bomb.yaml"
    rows = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]" for p, c in zip("abcdefgh", "bcdefghi")
    ]
    bomb.write_text("\n".join(rows) + "\ntrain:\n  lr: *i\n")
    assert main(["lm", "train", "--config", str(bomb), "--data-dir", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    err = one_line(capsys)
    assert len(err) < 1500, len(err)


def test_yaml_errors_say_first_what_is_wrong(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  lr: [1, 2\n")
    assert main(["lm", "train", "--config", str(bad), "--data-dir", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "is not valid YAML: line " in one_line(capsys)


@pytest.mark.parametrize("argv", [["presets"], ["presets", "lm/ptb-cpu"], ["presets", "--json"]])
def test_a_closed_pipe_ends_quietly(argv):
    # `onlstm presets | head -1`: the reader leaves after one line; no BrokenPipeError traceback
    cmd = f"{sys.executable} -m onlstm {' '.join(argv)} | head -c 1 >/dev/null; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", cmd], env=ENV, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr[-2000:]


def test_sigterm_is_a_message_and_exit_130(tmp_path):
    out = tmp_path / "data"
    cmd = [sys.executable, "-m", "onlstm", "logic", "generate", "--out", str(out), "--per-length", "1000000"]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        time.sleep(0.1)  # started generating
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err[-2000:]
    assert list(tmp_path.iterdir()) == []  # no partial data set, not even a hidden one


def test_download_bad_timeout_and_a_missing_local_url(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["data", "download", "ptb", "--to", str(tmp_path / "d"), "--timeout", "nan"])
    assert exc.value.code == 2 and "--timeout" in capsys.readouterr().err
    url = f"file://{tmp_path}/nowhere"
    assert main(["data", "download", "ptb", "--to", str(tmp_path / "d"), "--url", url]) == 2
    err = one_line(capsys)
    assert "check --url" in err and "internet" not in err


def test_a_lock_with_an_impossible_pid_is_stale(tmp_path):
    import json
    import socket

    from onlstm.lock import RunLock

    run = tmp_path / "run"
    run.mkdir()
    (run / "onlstm.lock").write_text(json.dumps({"pid": 10**20, "host": socket.gethostname(), "command": "x"}))
    said = []
    with RunLock(run, "test", log=said.append):
        pass
    assert said and "stale lock" in said[0]
