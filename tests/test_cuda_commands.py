"""Every experiment's command on CUDA gives what it gives on the CPU (run only where CUDA is visible), and
asking for CUDA where there is none is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onlstm.cli import main
from onlstm.logic.generate import GenerateConfig, generate_dataset
from support import TINY_LM, write_corpus

MRG = """( (S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat))))) )
( (S (NP (DT a) (JJ big) (NN dog)) (VP (VBD ran) (ADVP (RB fast)))) )
"""


def run_json(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    assert main(argv) == 0, argv
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("cuda-lm")
    corpus = write_corpus(base / "corpus")
    run = base / "run"
    argv = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--out", str(run)]
    assert main([*argv, "--epochs", "1", "--device", "cuda"]) == 0
    return run, corpus


@pytest.mark.cuda
def test_lm_eval_on_cuda_equals_cpu(lm_run, capsys):
    run, corpus = lm_run
    base = ["lm", "eval", "--checkpoint", str(run), "--data-dir", str(corpus), "--json", "--no-progress"]
    cpu = run_json(capsys, [*base, "--device", "cpu"])
    cuda = run_json(capsys, [*base, "--device", "cuda"])
    assert cuda["paper"]["loss"] == pytest.approx(cpu["paper"]["loss"], rel=1e-4)


@pytest.mark.cuda
def test_parse_and_eval_parse_on_cuda_equal_cpu(lm_run, tmp_path, capsys):
    run, _ = lm_run
    text = tmp_path / "s.txt"
    text.write_text("the cat sat on the mat\na big dog ran fast\n")
    parsed = {}
    for device in ("cpu", "cuda"):
        capsys.readouterr()
        assert main(["parsing", "parse", "--checkpoint", str(run), str(text), "--device", device]) == 0
        parsed[device] = capsys.readouterr().out
    assert parsed["cuda"] == parsed["cpu"] and parsed["cpu"].strip()
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "wsj_0001.mrg").write_text(MRG)
    base = ["parsing", "eval-parse", "--checkpoint", str(run), "--treebank", str(bank), "--json"]
    cpu, cuda = (run_json(capsys, [*base, "--device", d]) for d in ("cpu", "cuda"))
    assert cuda["layers"] == cpu["layers"]


@pytest.mark.cuda
def test_syneval_on_cuda_equals_cpu(lm_run, tmp_path, capsys):
    run, _ = lm_run
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("simple_agrmt\tthe cat sat\tthe cat sat sat\nsimple_agrmt\tthe dog ran\tdog the ran\n")
    base = ["syneval", "--checkpoint", str(run), "--data", str(pairs), "--json", "--no-progress"]
    cpu, cuda = (run_json(capsys, [*base, "--device", d]) for d in ("cpu", "cuda"))
    assert cuda["models"][0]["cases"] == cpu["models"][0]["cases"]


@pytest.mark.cuda
def test_logic_train_eval_compare_on_cuda(tmp_path, capsys):
    data = tmp_path / "data"
    generate_dataset(data, GenerateConfig(per_length=16, seed=3, max_ops=6, test_count=4))
    sizes = ["--emb-size", "8", "--hidden-size", "16", "--mlp-hidden", "8", "--chunk-size", "4"]
    run = tmp_path / "run"
    argv = ["logic", "train", "--data", str(data), "--out", str(run), *sizes, "--epochs", "1", "--batch-size", "16"]
    assert main([*argv, "--no-progress", "--device", "cuda"]) == 0
    base = ["logic", "eval", "--checkpoint", str(run), "--data", str(data), "--lengths", "1-6", "--json"]
    cpu, cuda = (run_json(capsys, [*base, "--device", d]) for d in ("cpu", "cuda"))
    assert cuda == cpu
    out = tmp_path / "compare"
    argv = ["logic", "compare", "--data", str(data), "--out", str(out), "--cells", "onlstm", "lstm", "--seeds", "0"]
    assert main([*argv, *sizes, "--epochs", "1", "--batch-size", "16", "--device", "cuda"]) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["parsing", "parse", "--checkpoint", "RUN", "TEXT"],
        ["parsing", "eval-parse", "--checkpoint", "RUN", "--treebank", "BANK"],
    ],
)
def test_asking_for_cuda_without_it_is_a_clear_error(argv, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = tmp_path / "run"
    corpus = write_corpus(tmp_path / "corpus")
    base = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--out", str(run)]
    assert main([*base, "--epochs", "1", "--max-steps", "2", "--no-final-test"]) == 0
    (tmp_path / "s.txt").write_text("the cat sat\n")
    (tmp_path / "bank").mkdir()
    (tmp_path / "bank" / "wsj_0001.mrg").write_text(MRG)
    subs = {"RUN": str(run), "TEXT": str(tmp_path / "s.txt"), "BANK": str(tmp_path / "bank")}
    capsys.readouterr()
    assert main([subs.get(a, a) for a in argv] + ["--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert "CUDA is not available" in err and "--device cpu" in err and "\n" not in err
