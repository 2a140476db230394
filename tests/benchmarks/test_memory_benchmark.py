"""benchmarks/memory.py: each row measures the implementation its label names."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

import memory


@pytest.mark.parametrize("model", ["reference", "reference@bf16"])
def test_a_child_records_what_its_layers_ran(capsys, model):
    # the reference loop, one batch (under bfloat16 autocast too: the same impl): the record, not the figures
    try:
        assert memory.main(["--child", "eval", model, "--steps", "1", "--early", "1", "--device", "cpu"]) == 0
    finally:
        torch.set_flush_denormal(False)  # the child sets it for its whole process; False is torch's default
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["ran"] == ["reference"] and result["end"]["rss"] > 0 and "products" not in result


@pytest.mark.cpp
def test_a_cpp_row_names_the_backend_its_products_ran(monkeypatch):
    # in a process of its own, as every row runs: the backend is forced (read once per process), so the record
    # must name it, whatever a timing would have chosen here
    monkeypatch.setenv("ONLSTM_CPU_GEMM", "mkl")
    args = argparse.Namespace(batch=256, eval_every=0, threads=1, device="cpu")
    result = memory.run_child("eval", "cpp", 1, 1, args)
    assert result.get("ran") == ["cpp"] and result["products"] == "mkl", result


def test_a_row_whose_layers_ran_another_kernel_is_left_out():
    # injected: what a child reports when the kernel asked for failed its self-check (the layers ran the reference)
    peaks = {"start": {"rss": 100.0}, "early": {"rss": 200.0}, "end": {"rss": 210.0}, "seconds": 1.0}
    lstm = {**peaks, "ran": []}
    assert "left out: the layers ran reference" in memory.row(
        "eval", "triton", {**peaks, "ran": ["reference"]}, lstm, "rss"
    )
    kept = memory.row("eval", "triton", {**peaks, "ran": ["triton"]}, lstm, "rss")
    assert "left out" not in kept and "+5.0%" in kept
    assert memory.row("eval", "cpp", {**peaks, "ran": ["cpp"], "products": "linear"}, lstm, "rss").endswith("  linear")
    assert "left out" not in memory.row("eval", "lstm", lstm, lstm, "rss")


def test_a_bf16_row_is_measured_against_the_bf16_lstm_or_left_out_with_the_reason(capsys, monkeypatch):
    assert memory.reference("cpp@bf16", ["cpp@bf16", "lstm", "lstm@bf16"]) == "lstm@bf16"
    assert memory.reference("cpp@bf16", ["cpp@bf16", "lstm"]) == "lstm"
    assert memory.reference("cpp", ["cpp", "lstm", "lstm@bf16"]) == "lstm"
    from onlstm.nn import capabilities

    monkeypatch.setattr(capabilities, "bf16_products_error", lambda: "not available on this CPU: (injected)")
    monkeypatch.setattr(memory, "run_child", lambda *a: {"error": "not run in this test"})
    assert memory.main(["--impls", "cpp@bf16,lstm", "--scenarios", "eval", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "# cpp@bf16 left out: train.precision=bf16: not available on this CPU: (injected)" in out
    assert "cpp@bf16 " not in out.split("left out")[-1]  # no row for it
    with pytest.raises(SystemExit):
        memory.main(["--impls", "cpp@fp16"])
