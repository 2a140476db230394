"""``benchmarks/layer_speed.py`` on a CPU that lacks a primitive: the dtype is left out with one note, never a crash
(forced, so that a machine with bfloat16 instructions runs the path the others take)."""

from __future__ import annotations

import layer_speed
from onlstm.nn import capabilities


def test_bf16_is_left_out_with_a_note_where_the_cpu_lstm_cannot_run_it(monkeypatch, capsys):
    why = f"{capabilities.NOT_AVAILABLE}: RuntimeError: could not create a primitive descriptor (forced)"
    monkeypatch.setattr(capabilities, "lstm_autocast_error", lambda device_type, dtype: why)
    assert layer_speed.main(["--dtypes", "bf16", "--impls", "reference", "--shapes", "3x2x4x6x3"]) == 0
    out = capsys.readouterr().out
    assert f"note: bf16 left out: nn.LSTM under bf16 autocast is {why}" in out


def test_fp32_rows_are_kept_beside_a_dtype_left_out(monkeypatch, capsys):
    monkeypatch.setattr(capabilities, "lstm_autocast_error", lambda device_type, dtype: capabilities.NOT_AVAILABLE)
    argv = ["--dtypes", "fp32,bf16", "--impls", "reference", "--shapes", "3x2x4x6x3", "--repeats", "1"]
    assert layer_speed.main(argv) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("T=3")]
    assert [r.split()[5:7] for r in rows] == [["fp32", "nn.LSTM"], ["fp32", "reference"]]
