"""The ``onlstm`` command as a whole: the one error handler, the exit-status convention (onlstm.errors) and
the ``onlstm parsing ...`` group with its old top-level spellings."""

from __future__ import annotations

import json

import pytest
import torch

from onlstm import errors
from onlstm.checkpoint import CheckpointError
from onlstm.cli import build_parser, command_path, main
from onlstm.config import ConfigError
from onlstm.data.download import DownloadError
from onlstm.data.ptb import CorpusError
from onlstm.data.treebank import TreebankError
from onlstm.data.trees import TreeFormatError
from onlstm.lm.train import RunDirError
from onlstm.logic.data import LogicDataError
from onlstm.logic.formulas import FormulaSyntaxError
from onlstm.parsing.cli import InputError


@pytest.mark.parametrize(
    "cls, second",
    [
        (CheckpointError, ValueError),
        (CorpusError, ValueError),
        (TreebankError, ValueError),
        (DownloadError, RuntimeError),
        (RunDirError, ValueError),
        (InputError, ValueError),
        (ConfigError, ValueError),
        (TreeFormatError, ValueError),
        (LogicDataError, ValueError),
        (FormulaSyntaxError, ValueError),
    ],
)
def test_every_user_error_has_the_one_base_and_keeps_its_old_base(cls, second):
    assert issubclass(cls, errors.OnlstmError) and issubclass(cls, second)


def test_exit_codes():
    assert (errors.EXIT_BAD_INPUT, errors.EXIT_INTERRUPTED) == (2, 130)
    assert errors.OnlstmError.exit_code == 2 and CheckpointError("x").exit_code == 2
    assert DownloadError.exit_code == 1  # the network failed, not the input (as before)


def test_command_error_keeps_the_message_and_passes_onlstm_errors_through():
    e = CheckpointError("bad file")
    assert errors.command_error(e) is e
    c = errors.command_error(ValueError("--bptt must be positive"))
    assert isinstance(c, errors.OnlstmError) and str(c) == "--bptt must be positive"


def test_command_path_names_what_was_typed():
    p = build_parser()
    assert command_path(p, ["lm", "train", "--out", "x"]) == "onlstm lm train"
    assert command_path(p, ["parsing", "compare-trees", "a", "b"]) == "onlstm parsing compare-trees"
    assert command_path(p, ["logic", "check", "lm"]) == "onlstm logic check"  # a positional named like a command


def test_one_handler_prints_one_line_without_traceback(tmp_path, capsys):
    rc = main(["lm", "eval", "--checkpoint", str(tmp_path / "none"), "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("onlstm lm eval: ") and "neither a run directory nor a .safetensors file" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_ctrl_c_exits_130(monkeypatch, capsys):
    import onlstm.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda argv=None: parser)
    parser._subparsers._group_actions[0].choices["info"].set_defaults(func=interrupted)
    assert main(["info"]) == 130
    assert capsys.readouterr().err.strip() == "onlstm info: interrupted"


def test_logic_check_bad_input_is_2_and_a_finding_is_1(tmp_path, capsys):
    assert main(["logic", "check", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onlstm logic check: ") and "Traceback" not in err
    bad = tmp_path / "train1"
    bad.write_text("this is not a pair\n")
    assert main(["logic", "check", str(bad)]) == 2
    assert "onlstm logic check: " in capsys.readouterr().err


# --------------------------------------------------------------------------- the parsing group


def _tree_files(tmp_path):
    gold = tmp_path / "gold.txt"
    pred = tmp_path / "pred.txt"
    gold.write_text("((the cat) (sat down))\n((a dog) barked)\n")
    pred.write_text("(((the cat) sat) down)\n((a dog) barked)\n")
    return gold, pred


def test_compare_trees(tmp_path, capsys):
    gold, pred = _tree_files(tmp_path)
    assert main(["parsing", "compare-trees", str(gold), str(pred), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # sentence 1: gold spans {(0,2), (2,4)} (root excluded), predicted {(0,2), (0,3)}: P = R = 1/2;
    # sentence 2: identical trees, one span (0,2): P = R = 1. Sentence F1 averages 0.5 and 1; corpus F1 pools
    # the spans: 2 matched of 3 gold and 3 predicted.
    assert out["sentence_f1"]["f1"] == pytest.approx(0.75)
    assert out["corpus_f1"]["f1"] == pytest.approx(2 / 3)


def test_compare_trees_names_a_missing_file(tmp_path, capsys):
    gold, pred = _tree_files(tmp_path)
    assert main(["parsing", "compare-trees", str(gold), str(pred)]) == 0
    assert "F1" in capsys.readouterr().out
    assert main(["parsing", "compare-trees", str(gold), str(tmp_path / "nope.txt")]) == 2
    err = capsys.readouterr().err
    assert err == f"onlstm parsing compare-trees: prediction file {tmp_path / 'nope.txt'} does not exist\n"


@pytest.mark.parametrize("command", ["parse", "eval-parse", "plot", "compare-trees"])
def test_every_parsing_command_is_in_the_group_only(command):
    top = build_parser()._subparsers._group_actions[0].choices
    assert command in top["parsing"]._subparsers._group_actions[0].choices
    assert command not in top  # the 0.1 top-level spellings are gone


def test_parse_without_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert main(["parsing", "parse", "--checkpoint", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onlstm parsing parse: ") and "Traceback" not in err


def test_parsing_evaluate_is_the_function_and_the_module_still_imports():
    """``onlstm.parsing.evaluate`` (the metrics function, public since the start) shares its name with the
    submodule of eval-parse; in a fresh process, importing the CLI and the submodule must not rebind it."""
    import os
    import subprocess
    import sys

    import onlstm

    code = (
        "import onlstm.parsing.cli\nfrom onlstm.parsing.evaluate import score_treebank\n"
        "from onlstm.parsing import evaluate\n"
        "assert evaluate.__module__ == 'onlstm.parsing.metrics', evaluate\nprint('ok')"
    )
    src = os.path.dirname(os.path.dirname(onlstm.__file__))
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": src}
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_info_names_the_cpu_and_the_instruction_set_limits_set(capsys, monkeypatch):
    import json

    from onlstm.nn import cpp_gemm

    for name in cpp_gemm.ISA_LIMITS:
        monkeypatch.delenv(name, raising=False)
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["isa_limits"] == "none" and info["cpu"].startswith(cpp_gemm.cpu_name())
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")  # read by MKL at its start; here only reported
    assert main(["info"]) == 0
    assert "isa_limits: MKL_ENABLE_INSTRUCTIONS=AVX2" in capsys.readouterr().out.splitlines()


def test_the_benchmarks_machine_line_names_cpu_capability_limits_torch_and_threads(monkeypatch):
    from onlstm.device import SPEED_SETTINGS, machine_line
    from onlstm.nn import cpp_gemm

    for name in (*cpp_gemm.ISA_LIMITS, *SPEED_SETTINGS):
        monkeypatch.delenv(name, raising=False)
    plain = machine_line()
    assert "set:" not in plain
    capability = torch.backends.cpu.get_cpu_capability()
    assert plain.startswith(f"CPU: {cpp_gemm.cpu_name()} (ATen capability {capability})")
    assert f"torch {torch.__version__}, {torch.get_num_threads()} threads" in plain
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert f"(ATen capability {capability}, ONEDNN_MAX_CPU_ISA=AVX2)" in machine_line()
    assert {cpp_gemm.ENV, cpp_gemm.BF16_ENV} <= set(SPEED_SETTINGS)  # the kernel's own names, not copies gone stale
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1")  # nn.LSTM, the reference of every ratio, 1.5x slower with it
    monkeypatch.setenv("ONLSTM_CPU_GEMM", "avx2")
    assert machine_line().endswith("threads; set: THP_MEM_ALLOC_ENABLE=1, ONLSTM_CPU_GEMM=avx2")


def test_info_lists_every_registered_kernel(capsys):
    import json

    from onlstm.nn import kernels

    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert set(info["kernels"]) == set(kernels.kernel_names()) >= {"fused", "cpp"}
    assert info["kernels"]["fused"] == {"available": True, "reason": None}  # pure PyTorch: always there
    assert info["cpp_kernel"] == info["kernels"]["cpp"]["available"]
    assert info["cpp_build"] in (("native", "portable") if info["cpp_kernel"] else (None,))
    assert info["triton_kernel"] == info["kernels"]["triton"]["available"]
    if not info["cuda"]:  # the CUDA path says why it is off
        assert not info["triton_kernel"] and "no CUDA device" in info["triton_kernel_error"]
    assert main(["info"]) == 0  # for people: one line a kernel, not the JSON's dict
    text = capsys.readouterr().out
    assert "kernel fused: available" in text.splitlines() and "kernels:" not in text and "{'" not in text
