"""``benchmarks/layer_speed.py`` on a CPU that lacks a primitive: the dtype is left out with one note, never a crash
(forced, so that a machine with bfloat16 instructions runs the path the others take)."""

from __future__ import annotations

import pytest

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


def test_each_cpp_backend_row_runs_on_its_backend_in_one_process(monkeypatch, capsys):
    """``cpp:BACKEND`` rows set their backend before each call and a ``cpp`` row the kernel's own choice, so the
    backends alternate in one process; a backend that does not run here is left out with a note."""
    import pytest

    from onlstm.nn.cpp_kernel import extension_error, load_extension

    ext = load_extension()
    if ext is None:
        pytest.skip(f"the C++ kernel is not available: {extension_error()}")
    runs = ext.gemm_backends()
    asked: list[str] = []
    real = ext.set_gemm_backend
    monkeypatch.setattr(ext, "set_gemm_backend", lambda name: asked.append(name) or real(name))
    impls = ["cpp", "cpp:mkl", "cpp:onednn"]
    argv = ["--impls", ",".join(impls), "--shapes", "3x2x4x6x3", "--repeats", "2"]
    try:
        assert layer_speed.main(argv) == 0
    finally:
        real(runs[0])  # leave the process on a backend that runs here
    out = capsys.readouterr().out
    rows = [line.split()[6] for line in out.splitlines() if line.startswith("T=3")]
    assert rows == ["nn.LSTM", *(i for i in impls if i == "cpp" or i.split(":")[1] in runs)]
    assert asked.count("mkl") >= 3  # warm-up and two timed calls
    if "onednn" not in runs:
        assert "note: cpp:onednn left out: onednn does not run here" in out


def test_an_unknown_cpp_backend_is_one_line_and_exit_2(capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_:
        layer_speed.main(["--impls", "cpp:fast", "--shapes", "3x2x4x6x3"])
    assert exit_.value.code == 2 and "cpp:BACKEND takes one of" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["70,20,400,650,10", "70x20x400", "70x0x400x650x10"])
def test_a_bad_shape_is_one_line_and_exit_2(bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        layer_speed.main(["--shapes", bad])
    assert exit_.value.code == 2 and "TxBxINxHxC" in capsys.readouterr().err


def test_the_rows_that_run_the_cpp_kernel_get_a_backend():
    assert [layer_speed.runs_cpp(k) for k in ("cpp", "auto", "cpp:avx2", "fused", "reference")] == [1, 1, 1, 0, 0]


def test_avx2_tile_rows_run_the_avx2_backend_with_their_orientation_forced():
    assert [layer_speed.backend_of(k) for k in ("cpp:avx2-rows", "cpp:avx2-outputs", "cpp:avx2", "cpp:mkl")] == [
        "avx2",
        "avx2",
        "avx2",
        "mkl",
    ]
    assert [layer_speed.tiles_of(k) for k in ("cpp:avx2-rows", "cpp:avx2-outputs", "cpp:avx2", "cpp")] == [
        "rows",
        "outputs",
        "auto",
        "auto",
    ]


def test_each_tile_row_is_timed_with_its_orientation(monkeypatch):
    from onlstm.nn.cpp_kernel import extension_error, load_extension

    ext = load_extension()
    if ext is None or "avx2" not in ext.gemm_backends():
        pytest.skip(f"the avx2 backend does not run here: {extension_error() or ext.gemm_backends()}")
    asked: list[str] = []
    real = ext.set_avx2_tiles
    monkeypatch.setattr(ext, "set_avx2_tiles", lambda mode: asked.append(mode) or real(mode))
    argv = ["--impls", "cpp:avx2-rows,cpp:avx2-outputs", "--shapes", "3x20x4x6x3", "--repeats", "1"]
    try:
        assert layer_speed.main(argv) == 0
    finally:
        real("auto")
    assert {"rows", "outputs"} <= set(asked) and ext.avx2_tiles() == "auto"


def test_compile_adds_each_row_under_torch_compile_and_says_what_compiling_took(monkeypatch, capsys):
    # aot_eager instead of inductor: the rows' modules are compiled and run, without generating C++ (seconds)
    import functools

    import torch

    compiled = []
    real = torch.compile

    def spy(module, **kw):
        compiled.append(type(module).__name__)
        return real(module, backend="aot_eager", **kw)

    monkeypatch.setattr(torch, "compile", functools.wraps(real)(spy))
    argv = ["--compile", "--impls", "reference", "--shapes", "3x2x4x6x3", "--repeats", "1"]
    assert layer_speed.main(argv) == 0
    out = capsys.readouterr().out
    assert compiled == ["ONLSTM"]
    rows = [r.split()[6] for r in out.splitlines() if r.startswith("T=3")]
    assert rows == ["nn.LSTM", "reference", "reference+compile"]
    assert out.count("first call (compiling)") == 1


def test_the_products_alone_line_gives_each_backend_its_ceiling_against_nn_lstm(monkeypatch, capsys):
    """Injected product timings: each backend's line is nn.LSTM's call over its products' time (a layer of nothing
    but products), fastest first; a run with a ``cpp`` row prints the line and each shape's backend choice, one
    without it neither."""
    from onlstm.nn import cpp_gemm
    from onlstm.nn.cpp_kernel import extension_error, load_extension

    ext = load_extension()
    if ext is None:
        pytest.skip(f"the C++ kernel is not available: {extension_error()}")
    backends = [b for b in ext.gemm_backends() if b in cpp_gemm.BACKENDS]
    fake = {b: 0.1 * (i + 1) for i, b in enumerate(backends)}
    asked = []
    monkeypatch.setattr(
        cpp_gemm, "time_backends", lambda m, bs, sizes, timer, block_rows: asked.append((sizes, block_rows)) or fake
    )
    line = layer_speed.products_ceiling((3, 2, 4, 6, 3), 0.2)
    assert asked == [((4, 6, 3, 2, 3), 1024)]  # input, hidden, chunk, batch, steps; the kernel's blocks, not a sample
    assert line.endswith(", ".join(f"{b} {1e3 * t:.4g} ms ({0.2 / t:.2f}x)" for b, t in fake.items()))
    monkeypatch.undo()  # the runs below time for real: the kernel times each new layer size with it too
    assert layer_speed.main(["--impls", "reference", "--shapes", "3x2x4x6x3", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "Products alone" not in out and "The C++ kernel's products" not in out
    assert layer_speed.main(["--impls", "cpp", "--shapes", "3x2x4x6x3", "4x3x4x8x4", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "Products alone of T=3 B=2 H=6" in out
    for label in ("T=3 B=2 in=4 H=6 C=3", "T=4 B=3 in=4 H=8 C=4"):  # each layer size's own choice, under its rows
        assert f"The C++ kernel's products at {label}: " in out
