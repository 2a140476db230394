"""``benchmarks/logic_speed.py``: the training step of every encoder asked for, ``CELL:BACKEND`` rows on their C++
backend in the same process, and one line for a backend it does not know."""

from __future__ import annotations

import pytest

import logic_speed


def test_backend_rows_train_on_their_backend_beside_the_others(tmp_path, monkeypatch, capsys):
    from onlstm.nn.cpp_kernel import extension_error, load_extension

    ext = load_extension()
    if ext is None:
        pytest.skip(f"the C++ kernel is not available: {extension_error()}")
    asked: list[str] = []
    real = ext.set_gemm_backend
    monkeypatch.setattr(ext, "set_gemm_backend", lambda name: asked.append(name) or real(name))
    cells = ["onlstm", "onlstm:mkl", "lstm"]
    argv = ["--data", str(tmp_path / "none"), "--cells", *cells, "--steps", "2", "--repeats", "1", "--warmup", "1"]
    try:
        assert logic_speed.main([*argv, "--hidden-size", "20", "--batch-size", "4"]) == 0
    finally:
        real(ext.gemm_backends()[0])
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[-len(cells) :]]
    assert rows == cells and asked.count("mkl") >= 3  # one warm-up step and two timed ones


def test_an_unknown_backend_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        logic_speed.main(["--cells", "onlstm:fast", "lstm"])
    assert exit_.value.code == 2 and "CELL:BACKEND takes one of" in capsys.readouterr().err
