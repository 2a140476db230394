"""benchmarks/memory.py: each row measures the implementation its label names."""

from __future__ import annotations

import json

import torch

import memory


def test_a_child_records_what_its_layers_ran(capsys):
    # the reference loop, one batch: what matters is the record, not the figures
    try:
        assert memory.main(["--child", "eval", "reference", "--steps", "1", "--early", "1", "--device", "cpu"]) == 0
    finally:
        torch.set_flush_denormal(False)  # the child sets it for its whole process; False is torch's default
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["ran"] == ["reference"] and result["end"]["rss"] > 0


def test_a_row_whose_layers_ran_another_kernel_is_left_out():
    # injected: what a child reports when the kernel asked for failed its self-check (the layers ran the reference)
    peaks = {"start": {"rss": 100.0}, "early": {"rss": 200.0}, "end": {"rss": 210.0}, "seconds": 1.0}
    lstm = {**peaks, "ran": []}
    assert "left out: the layers ran reference" in memory.row(
        "eval", "triton", {**peaks, "ran": ["reference"]}, lstm, "rss"
    )
    kept = memory.row("eval", "triton", {**peaks, "ran": ["triton"]}, lstm, "rss")
    assert "left out" not in kept and "+5.0%" in kept
    assert "left out" not in memory.row("eval", "lstm", lstm, lstm, "rss")
