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
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0] in cells]
    assert [r[0] for r in rows] == cells and asked.count("mkl") >= 3  # one warm-up step and two timed ones
    assert "GEMM roof on a layer of" in out and all(float(r[3]) > 0 for r in rows)  # the products' GFLOP/s
    # what the onlstm row ran on: the kernel's build and its products
    assert any(ln.startswith("# C++ kernel built ") and "; products: " in ln for ln in out.splitlines())
    # each encoder named for what it is, once, whatever its backends: lstm is nn.LSTM, not the authors' LSTM
    assert "# lstm: torch.nn.LSTM" in out and out.count("# onlstm: Ordered Neurons LSTM") == 1


def test_the_legend_tells_the_two_lstms_apart():
    text = logic_speed.legend(["onlstm", "lstm-std:mkl", "lstm-std@bf16", "lstm"]).splitlines()
    assert [line.split(":")[0] for line in text] == ["# onlstm", "# lstm-std", "# lstm"]
    assert "onlstm's kernels" in text[1] and "torch.nn.LSTM" in text[2]


def test_an_unknown_backend_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        logic_speed.main(["--cells", "onlstm:fast", "lstm"])
    assert exit_.value.code == 2 and "CELL:BACKEND takes one of" in capsys.readouterr().err


def test_the_encoder_flops_count_each_weight_once_forward_and_twice_backward():
    from onlstm.logic.config import LogicModelConfig
    from onlstm.logic.model import LogicClassifier

    onlstm = LogicClassifier(LogicModelConfig(cell="onlstm", hidden_size=20, chunk_size=10))
    lstm = LogicClassifier(LogicModelConfig(cell="lstm", hidden_size=20))
    gates = 4 * 20 + 2 * (20 // 10)  # four gates and the two master gates, one unit per chunk
    assert logic_speed.encoder_flops(onlstm, 7) == 6 * 7 * gates * (128 + 20)
    assert logic_speed.encoder_flops(lstm, 7) == 6 * 7 * 4 * 20 * (128 + 20)


@pytest.mark.parametrize("bf16", ["runs", "absent"])
def test_bf16_rows_train_under_autocast_or_are_left_out_with_the_reason(tmp_path, monkeypatch, capsys, bf16):
    from onlstm.nn import capabilities

    why = None if bf16 == "runs" else "not available on this CPU: (injected)"
    monkeypatch.setattr(capabilities, "bf16_products_error", lambda: why)
    monkeypatch.setenv("ONLSTM_CPU_BF16", "on")
    cells = ["onlstm", "onlstm@bf16", "lstm"]
    argv = ["--data", str(tmp_path / "none"), "--cells", *cells, "--steps", "2", "--repeats", "1", "--warmup", "1"]
    assert logic_speed.main([*argv, "--hidden-size", "20", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines() if line.split()[:1] and line.split()[0] in cells]
    if why is None:
        assert rows == cells
    else:
        assert rows == ["onlstm", "lstm"] and "# onlstm@bf16 left out: train.precision=bf16: not available" in out


def test_an_unknown_precision_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        logic_speed.main(["--cells", "onlstm@fp8", "lstm"])
    assert exit_.value.code == 2 and "CELL@bf16 is the only precision suffix" in capsys.readouterr().err


def test_bucketing_times_every_row_and_the_machine_line_comes_first(tmp_path, capsys):
    from onlstm.logic.generate import GenerateConfig, generate_dataset

    data = tmp_path / "data"
    generate_dataset(data, GenerateConfig(per_length=20, test_count=5), log=None)
    argv = ["--data", str(data), "--bucketing", "--batch-size", "8", "--steps", "2", "--repeats", "2"]
    assert logic_speed.main([*argv, "--warmup", "1", "--hidden-size", "20", "--cells", "onlstm", "lstm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# ") and "CPU" in lines[0]
    assert any(line.split()[1:2] == ["mean"] for line in lines)  # the header says what the column holds
    rows = [line.split() for line in lines if line.split()[:1] in (["onlstm"], ["lstm"])]
    assert [(r[0], r[1]) for r in rows] == [(c, b) for c in ("onlstm", "lstm") for b in ("random", "bucketed")]
