"""Issue 35, nothing the user owns is overwritten: a command writes only into a folder that is new or empty, that
it wrote and marked itself, or that ``--overwrite`` says to replace; a multi-file result appears all at once or not
at all (onlstm.files.check_output_owner / publish_folder; docs/cli.md, "Output folders"). Each case here lost a
user's files before."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch

import onlstm.files as files
from onlstm.checkpoint import config_header, save_weights
from onlstm.cli import main
from onlstm.data.vocab import Vocab
from onlstm.files import MARKER, check_output_owner, publish_folder, write_json
from onlstm.models import LanguageModel, LMConfig
from support import TINY_LM, WORDS, write_corpus


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def siblings(folder: Path) -> list[str]:
    """Names beside ``folder`` other than its own: a temporary folder left behind shows here."""
    return sorted(p.name for p in folder.parent.iterdir() if p.name != folder.name)


def lm_run(run: Path, **extra) -> Path:
    words = ["<unk>", "<eos>", *WORDS]
    cfg = LMConfig(vocab_size=len(words), emb_size=8, hidden_sizes=[12, 8], chunk_size=4, cell="onlstm")
    model = LanguageModel(cfg)
    save_weights(run / "model.best.safetensors", model)
    Vocab(words).save(run / "vocab.json")
    write_json(run / "config.json", config_header("lm", model.config.to_dict(), text_normalisation="lower", **extra))
    return run


def run_main(argv, capsys) -> tuple[int, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr().err


# -- the rule itself ---------------------------------------------------------------------------------------------
def test_the_rule_new_empty_own_or_overwrite(tmp_path):
    check_output_owner(tmp_path / "new", "k")  # absent: fine, nothing created
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    check_output_owner(tmp_path / "empty", "k")
    publish_folder(tmp_path / "mine", "k", lambda tmp: (tmp / "a.txt").write_text("1"))
    check_output_owner(tmp_path / "mine", "k")  # its own: replaced as a whole
    with pytest.raises(ValueError, match="not empty and was not written by this command"):
        check_output_owner(tmp_path / "mine", "other-kind")
    (tmp_path / "mine" / "notes.txt").write_text("the user's")  # added since: no longer the command's alone
    with pytest.raises(ValueError, match=r"'notes.txt'.*--overwrite"):
        check_output_owner(tmp_path / "mine", "k")
    check_output_owner(tmp_path / "mine", "k", overwrite=True)
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="symbolic link to nothing"):
        check_output_owner(tmp_path / "link", "k")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        check_output_owner(tmp_path / "f", "k")
    with pytest.raises(ValueError, match="would replace"):
        check_output_owner(Path.home(), "k", overwrite=True)


def test_publish_is_all_or_nothing(tmp_path, monkeypatch):
    out = tmp_path / "out"
    publish_folder(out, "k", lambda tmp: (tmp / "a.txt").write_text("old"))
    before = snapshot(out)

    def half(tmp: Path) -> None:
        (tmp / "a.txt").write_text("new")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp / "b.txt"))

    with pytest.raises(OSError, match=r"cannot write .*out/b.txt: No space left"):
        publish_folder(out, "k", half)
    assert snapshot(out) == before and siblings(out) == []

    def interrupted(tmp: Path) -> None:
        (tmp / "a.txt").write_text("new")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        publish_folder(out, "k", interrupted)
    assert snapshot(out) == before and siblings(out) == []
    publish_folder(out, "k", lambda tmp: (tmp / "c.txt").write_text("new"))
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "c.txt"] and siblings(out) == []


# -- each command -------------------------------------------------------------------------------------------------
def test_export_never_overwrites_the_users_files(tmp_path, capsys):
    run = lm_run(tmp_path / "run")
    to = tmp_path / "to"
    to.mkdir()
    (to / "README.md").write_text("my notes")
    (to / "config.json").write_text('{"mine": 1}')
    before = snapshot(to)
    rc, err = run_main(["export", "--checkpoint", run, "--to", to], capsys)
    assert rc == 2 and "not empty and was not written by this command" in err and "'README.md'" in err
    assert snapshot(to) == before
    assert run_main(["export", "--checkpoint", run, "--to", to, "--overwrite"], capsys)[0] == 0
    assert (to / "model.safetensors").exists() and "my notes" not in (to / "README.md").read_text()
    # an earlier export is replaced without --overwrite
    assert run_main(["export", "--checkpoint", run, "--to", to], capsys)[0] == 0


def test_an_export_that_fails_half_way_leaves_the_earlier_export_whole(tmp_path, capsys, monkeypatch):
    torch.manual_seed(0)
    run = lm_run(tmp_path / "run")
    to = tmp_path / "shared" / "to"
    assert run_main(["export", "--checkpoint", run, "--to", to], capsys)[0] == 0
    before = snapshot(to)
    torch.manual_seed(1)  # other weights, so that a half-replaced folder would show
    lm_run(tmp_path / "run2")
    real = files.write_text

    def full_disk(path, text):  # the card is written last: the weights are already saved
        if Path(path).name == "README.md":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text)

    monkeypatch.setattr("onlstm.sharing.write_text", full_disk)
    rc, err = run_main(["export", "--checkpoint", tmp_path / "run2", "--to", to], capsys)
    assert rc == 4 and f"cannot write {to / 'README.md'}" in err
    assert snapshot(to) == before and siblings(to) == []
    # the earlier export still opens with the first run's weights, not the second's
    first, second = LanguageModel.from_pretrained(run), LanguageModel.from_pretrained(tmp_path / "run2")
    shared = LanguageModel.from_pretrained(to).state_dict()
    assert all(torch.equal(v, shared[k]) for k, v in first.state_dict().items())
    assert any(not torch.equal(v, shared[k]) for k, v in second.state_dict().items())


def test_lm_train_refuses_an_ordinary_folder_and_a_restart_over_results(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "log.csv").write_text("my measurements\n")
    (out / "vocab.json").write_text("[]")
    before = snapshot(out)
    argv = ["lm", "train", "--config", TINY_LM, "--data-dir", corpus, "--out", out, "--max-steps", "2"]
    rc, err = run_main(argv, capsys)
    assert rc == 2 and "is not empty and holds no run" in err and "'log.csv'" in err
    assert snapshot(out) == before
    run = tmp_path / "run"
    argv[argv.index(out)] = run
    assert run_main(argv, capsys)[0] == 0
    (run / "resume.safetensors").unlink()  # a finished run whose resume file was deleted
    before = snapshot(run)
    rc, err = run_main([*argv, "--resume"], capsys)
    assert rc == 2 and "has no resume.safetensors" in err and "overwrite them" in err
    assert snapshot(run) == before


def test_logic_generate_never_mixes_with_files_already_there(tmp_path, capsys):
    out = tmp_path / "bowman"
    out.mkdir()
    (out / "train0").write_text("original\n")
    before = snapshot(out)
    argv = ["logic", "generate", "--out", out, "--per-length", "4", "--max-ops", "2", "--quiet"]
    rc, err = run_main(argv, capsys)
    assert rc == 2 and "'train0'" in err and snapshot(out) == before
    fresh = tmp_path / "fresh"
    assert run_main([*argv[:3], fresh, *argv[4:]], capsys)[0] == 0
    assert run_main([*argv[:3], fresh, *argv[4:]], capsys)[0] == 0  # its own earlier set: replaced
    assert (fresh / MARKER).exists() and (fresh / "train0").exists()


def test_an_interrupted_logic_generate_leaves_nothing(tmp_path, capsys, monkeypatch):
    import onlstm.logic.generate as generate

    real, calls = generate.generate_bucket, []

    def stop_in_the_second_bucket(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(generate, "generate_bucket", stop_in_the_second_bucket)
    out = tmp_path / "data"
    rc, err = run_main(["logic", "generate", "--out", out, "--per-length", "4", "--max-ops", "3"], capsys)
    assert rc == 130 and "interrupted" in err
    assert list(tmp_path.iterdir()) == []  # no partial data set, marked or not


def test_syneval_out_never_replaces_a_runs_results(tmp_path, capsys):
    run = lm_run(tmp_path / "run")
    write_json(run / "results.json", {"test": {"ppl": 99.0}})
    before = snapshot(run)
    (tmp_path / "pairs.tsv").write_text("simple_agrmt\tthe cat sat\tthe cat sat sat\n")
    argv = ["syneval", "--checkpoint", run, "--data", tmp_path / "pairs.tsv", "--no-progress"]
    rc, err = run_main([*argv, "--out", run], capsys)
    assert rc == 2 and "which the command reads" in err and snapshot(run) == before
    rc, err = run_main([*argv, "--out", run, "--overwrite"], capsys)
    assert rc == 2 and "which the command reads" in err and snapshot(run) == before
    rc, err = run_main([*argv, "--out", tmp_path / "ev"], capsys)
    assert rc == 0, err
    assert {"results.json", "items.tsv", MARKER} <= {p.name for p in (tmp_path / "ev").iterdir()}


def test_demo_refuses_an_ordinary_folder_and_foreign_files(tmp_path, capsys):
    out = tmp_path / "mine"
    (out / "data").mkdir(parents=True)
    (out / "data" / "ptb.train.txt").write_text("my corpus\n")
    before = snapshot(out)
    rc, err = run_main(["demo", "--out", out, "--seconds", "1"], capsys)
    assert rc == 2 and "holds no demo" in err and snapshot(out) == before


# -- what --overwrite never deletes, and what counts as an earlier output ------------------------------------------
def test_overwrite_never_deletes_a_training_run_or_what_the_command_reads(tmp_path, capsys):
    """`export --to runs --overwrite` deleted every run kept below runs/, the exported one included; `logic holdout
    --overwrite` deleted its --data folder when it lay inside --out."""
    runs = tmp_path / "runs"
    lm_run(runs / "r1")
    lm_run(runs / "deeper" / "r2")
    before = snapshot(runs)
    rc, err = run_main(["export", "--checkpoint", runs / "r1", "--to", runs, "--overwrite"], capsys)
    assert rc == 2 and "which the command reads" in err and snapshot(runs) == before
    rc, err = run_main(["export", "--checkpoint", lm_run(tmp_path / "run"), "--to", runs, "--overwrite"], capsys)
    assert rc == 2 and "would delete the training run in" in err and snapshot(runs) == before
    shared = tmp_path / "box" / "model"  # a shared model (no training files) read from inside --to
    assert run_main(["export", "--checkpoint", runs / "r1", "--to", shared], capsys)[0] == 0
    rc, err = run_main(["export", "--checkpoint", shared, "--to", tmp_path / "box", "--overwrite"], capsys)
    assert rc == 2 and "which the command reads" in err and (shared / "model.safetensors").exists()
    data = tmp_path / "wrap" / "logic"
    data.mkdir(parents=True)
    (data / "train1").write_text("=\t( a ( and ( not b ) ) )\t( b ( or a ) )\n")
    rc, err = run_main(["logic", "holdout", "--data", data, "--split", "B", "--out", tmp_path / "wrap",
                        "--overwrite"], capsys)  # fmt: skip
    assert rc == 2 and "which the command reads" in err and (data / "train1").exists()


def test_every_command_that_may_overwrite_has_the_training_run_guard():
    """The guard lives in onlstm.saved (files is below it): a command whose modules do not import it would lose it."""
    import subprocess
    import sys

    code = "import sys; from onlstm.cli import build_parser; build_parser(); print('onlstm.saved' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.strip() == "True", r.stderr
    from onlstm.saved import _training_run_below

    assert _training_run_below in files.REPLACE_GUARDS


def test_a_marked_output_whose_file_the_user_changed_is_theirs(tmp_path):
    out = tmp_path / "out"
    publish_folder(out, "k", lambda tmp: (tmp / "README.md").write_text("the card"))
    assert check_output_owner(out, "k") == out  # untouched: replaced without --overwrite
    (out / "README.md").write_text("the card, with my notes")
    with pytest.raises(files.InputError, match="not written by this command"):
        check_output_owner(out, "k")
    assert check_output_owner(out, "k", overwrite=True) == out


def test_only_an_onlstm_export_written_before_markers_is_replaced_without_overwrite(tmp_path, capsys):
    run = lm_run(tmp_path / "run")
    mine = tmp_path / "mine"  # the user's own folder that only looks like an export
    mine.mkdir()
    (mine / "config.json").write_text('{"kind": "whatever"}')
    (mine / "model.safetensors").write_text("my model")
    (mine / "README.md").write_text("my notes")
    before = snapshot(mine)
    rc, _ = run_main(["export", "--checkpoint", run, "--to", mine], capsys)
    assert rc == 2 and snapshot(mine) == before
    old = tmp_path / "old"  # a real export, its marker gone as before markers existed
    assert run_main(["export", "--checkpoint", run, "--to", old], capsys)[0] == 0
    (old / MARKER).unlink()
    assert run_main(["export", "--checkpoint", run, "--to", old], capsys)[0] == 0


def test_the_exported_kinds_are_the_registered_ones():
    import onlstm.lm
    import onlstm.logic  # noqa: F401
    from onlstm.saved import find_kind, kind_names
    from onlstm.sharing import EXPORTED_KINDS

    # the package's own kinds: an example or a test registers its own in the same process (copy_task.py)
    ours = {k for k in kind_names() if find_kind(k).model.__module__.startswith("onlstm.")}
    assert set(EXPORTED_KINDS) == ours and {"lm", "logic-classifier"} <= ours


def test_a_write_killed_by_kill_9_is_cleared_by_the_next_one_and_a_live_ones_is_not(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that no longer runs
    host = files._writer().rpartition("-")[0]
    dead = tmp_path / f".out.{host}-{child.pid}.abcd1234.tmp"
    alive = tmp_path / f".out.{host}-{os.getppid()}.abcd1234.tmp"
    elsewhere = tmp_path / f".out.otherhost-{child.pid}.abcd1234.tmp"
    for folder in (dead, alive, elsewhere):
        folder.mkdir()
        (folder / "model.safetensors").write_text("half")
    publish_folder(out, "k", lambda tmp: (tmp / "a.txt").write_text("new"))
    assert not dead.exists() and alive.exists() and elsewhere.exists()
