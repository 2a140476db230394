"""benchmarks/lm_speed.py: each row is timed with the kernel its label names."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch

from support import REPO


def _lm_speed():
    spec = importlib.util.spec_from_file_location("lm_speed", REPO / "benchmarks" / "lm_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_impl_the_device_cannot_run_is_refused_not_timed_as_the_reference(capsys):
    # Triton kernels are registered for CUDA only: on the CPU the layer would quietly run its reference loop,
    # and the row "onlstm/triton" would show the reference loop's speed
    bench = _lm_speed()
    small = ["--config", "tiny", "--steps", "1", "--repeats", "1", "--warmup", "0", "--vocab", "50", "--device", "cpu"]
    assert bench.main([*small, "--onlstm-impls", "fused,triton"]) == 2
    err = capsys.readouterr().err
    assert "--onlstm-impls triton" in err and "would run reference instead" in err
    assert bench.main([*small, "--onlstm-impls", "nope"]) == 2
    assert "no longer a registered kernel" in capsys.readouterr().err
    assert bench.main([*small, "--onlstm-impls", "fused,reference,auto"]) == 0
    out = capsys.readouterr().out
    assert all(f"| {name} |" in out for name in ("onlstm/fused", "onlstm/reference", "onlstm/auto", "lstm"))


def test_a_kernel_that_fails_its_self_check_is_refused_not_timed_as_the_reference(monkeypatch, capsys):
    # the device can run the kernel, but the layers would fall back to the reference loop after the kernel's
    # self-check: the row labelled with the kernel would time the reference loop
    pytest.importorskip("triton")
    from onlstm.nn import kernels, selfcheck
    from onlstm.nn.triton_kernel import TritonKernel, register_interpreter_kernel

    name = register_interpreter_kernel()
    try:
        if kernels.load_kernel(name) is None:
            pytest.skip(f"Triton interpreter not usable here: {kernels.kernel_error(name)}")
        forward = TritonKernel.forward
        monkeypatch.setattr(
            TritonKernel,
            "forward",
            lambda self, inputs: dataclasses.replace(r := forward(self, inputs), out=r.out * 1.01),
        )
        selfcheck.reset()
        small = ["--config", "tiny", "--steps", "1", "--repeats", "1", "--warmup", "0", "--vocab", "50"]
        with pytest.warns(RuntimeWarning, match="self-check"):
            assert _lm_speed().main([*small, "--device", "cpu", "--onlstm-impls", name]) == 2
        err = capsys.readouterr().err
        assert f"--onlstm-impls {name}: the layers run reference" in err and "self-check" in err
    finally:
        selfcheck.reset()
        kernels.unregister_kernel(name)


@pytest.mark.parametrize("cpu_bf16", [None, "not available on this CPU: (injected)"])
def test_precision_bf16_times_the_autocast_step_or_is_refused_as_the_trainer_refuses(monkeypatch, capsys, cpu_bf16):
    from onlstm.nn import capabilities

    # nn.LSTM's step is timed where this CPU runs it under bfloat16 autocast: oneDNN refuses it without AVX-512
    # ("could not create a primitive descriptor"), which no injected answer can change
    lstm = ["lstm"] if capabilities.lstm_autocast_error("cpu", torch.bfloat16) is None else []
    monkeypatch.setattr(capabilities, "bf16_products_error", lambda: cpu_bf16)
    monkeypatch.setenv("ONLSTM_CPU_BF16", "on")
    bench = _lm_speed()
    seen = []
    real = bench.update
    monkeypatch.setattr(bench, "update", lambda opt, loss, *a: seen.append(loss.dtype) or real(opt, loss, *a))
    small = ["--config", "tiny", "--steps", "1", "--repeats", "1", "--warmup", "0", "--vocab", "50", "--device", "cpu"]
    small += ["--cells", "onlstm", *lstm]
    rc = bench.main([*small, "--precision", "bf16"])
    if cpu_bf16 is None:
        assert rc == 0 and "precision bf16" in capsys.readouterr().out and seen
    else:
        assert rc == 2 and "train.precision=bf16: not available on this CPU" in capsys.readouterr().err
