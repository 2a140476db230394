"""The benchmark scripts' bad arguments: one line and exit status 2 (argparse's for a count out of range, the
script's name and the message for an onlstm error), never a traceback (benchmarks/bench_cli.py)."""

from __future__ import annotations

import argparse
import importlib

import pytest
import torch

import bench_cli
from onlstm.errors import InputError, WriteError


def test_counts_must_be_integers_in_range():
    assert bench_cli.positive_int("3") == 3 and bench_cli.nonnegative_int("0") == 0
    for text in ("0", "-1", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
            bench_cli.positive_int(text)


def test_a_user_error_is_one_line_with_its_exit_status(capsys):
    def main(argv=None) -> int:
        raise {"bad": InputError("no such preset"), "disk": WriteError("f", OSError(28, "No space left"))}[argv[0]]

    main.__module__ = __name__
    assert bench_cli.command(main)(["bad"]) == 2
    assert bench_cli.command(main)(["disk"]) == 4
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "test_bench_cli.py: no such preset" and err[1].startswith("test_bench_cli.py: cannot write f")


@pytest.mark.parametrize(
    "script, argv, message",
    [
        ("layer_speed", ["--repeats", "0"], "argument --repeats: must be an integer of at least 1"),
        ("layer_speed", ["--threads", "-1"], "argument --threads: must be an integer of at least 1"),
        ("layer_speed", ["--impls", "bogus"], "--impls: unknown bogus"),
        ("layer_speed", ["--shapes", "5x2x4x11x5"], "H=11 is not a multiple of C=5"),
        ("surprisal_speed", ["--ptb", "0"], "argument --ptb"),
        ("logic_speed", ["--repeats", "0"], "argument --repeats"),
        ("gemm_routes", ["--threads", "0"], "argument --threads"),
        ("memory", ["--threads", "0"], "argument --threads"),
        ("corpus_memory", ["--words", "0"], "argument --words"),
        ("lm_speed", ["--steps", "0"], "argument --steps"),
    ],
)
def test_a_count_out_of_range_is_argparses_error(capsys, script, argv, message):
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(script).main(argv)
    err = capsys.readouterr().err.strip().splitlines()  # one line: the usage is left to --help
    assert exit_.value.code == 2 and len(err) == 1 and message in err[0] and "--help" in err[0], err


@pytest.mark.parametrize(
    "script, argv, message",
    [
        ("lm_speed", ["--config", "nope"], "config file nope does not exist"),
        ("surprisal_speed", ["--config", "nope"], "config file nope does not exist"),
        ("encoders", ["--encoders", "bogus"], "unknown encoder 'bogus'"),
        ("logic_trees", ["/nonexistent", "--data", "/nonexistent"], "data directory /nonexistent does not exist"),
        ("logic_yardstick", ["/nonexistent", "--draws", "10"], "/nonexistent is neither a run directory"),
        ("logic_speed", ["--hidden-size", "55", "--batch-size", "2", "--steps", "1"], "not divisible by chunk_size"),
    ],
)
def test_an_onlstm_error_is_one_line_and_exit_2(capsys, script, argv, message):
    assert importlib.import_module(script).main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{script}.py: ") and message in err[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_memory_on_cuda_without_a_gpu_is_one_line_and_exit_2(capsys):
    import memory

    assert memory.main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device is visible" in err[0]


def test_memory_with_one_step_records_the_early_step_too(monkeypatch, capsys):
    import json

    import memory

    def one_step(model, args, device, report):
        report(0)
        report(1)
        return torch.nn.Module()

    monkeypatch.setattr(memory, "eval_steps", one_step)
    try:
        assert memory.main(["--child", "eval", "cpp", "--steps", "1", "--early", "1"]) == 0
    finally:
        torch.set_flush_denormal(False)  # the child sets it for its whole process; False is torch's default
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"start", "early", "end"} <= set(result)


def test_layer_speed_without_the_cpp_kernel_says_so_and_leaves_it_out(monkeypatch, capsys):
    import layer_speed
    from onlstm.nn import cpp_kernel, kernels

    monkeypatch.setattr(cpp_kernel, "load_extension", lambda: None)
    monkeypatch.setattr(cpp_kernel, "extension_error", lambda: "disabled by ONLSTM_NO_EXTENSION")
    monkeypatch.setattr(kernels, "load_kernel", lambda name: None)
    assert not layer_speed.runs_here("cpp", False)
    assert "cpp left out: the C++ kernel is not available (disabled by ONLSTM_NO_EXTENSION)" in capsys.readouterr().out
    ran: list[int] = []
    layer_speed.on_backend(lambda: ran.append(1), None)()  # an auto row: runs, no backend to set
    assert ran == [1]


@pytest.mark.parametrize(
    "script, argv",
    [("parse_speed", ["--batch-size", "0"]), ("master_input", ["--steps", "0"]), ("syneval_speed", ["--repeats", "0"])],
)
def test_the_other_scripts_refuse_a_zero_count_too(capsys, script, argv):
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(script).main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and f"argument {argv[0]}: must be an integer of at least 1" in err[0]


def test_every_script_main_is_wrapped():
    """A script's user errors are one line (CONTRIBUTING.md); gpu_report and gpu_profile print theirs themselves."""
    from support import REPO

    for path in sorted((REPO / "benchmarks").glob("*.py")):
        if path.stem in ("bench_cli", "gpu_report", "gpu_profile"):
            continue
        assert "@command\ndef main(" in path.read_text(), path.name


def test_every_script_parses_its_arguments_with_one_line_refusals():
    """argparse's own refusal is the usage (two to twenty lines) and then the error; the scripts' parser says the error
    alone, as the commands do (docs/cli.md)."""
    from support import REPO

    for path in sorted((REPO / "benchmarks").rglob("*.py")):
        assert "argparse.ArgumentParser(" not in path.read_text() or path.stem == "bench_cli", path.name
