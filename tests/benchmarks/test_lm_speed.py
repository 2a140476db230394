"""``benchmarks/lm_speed.py``: the layer implementation asked for is the one timed, and each ON-LSTM row has its
ratio to the LSTM."""

from __future__ import annotations

import pytest

import lm_speed
import onlstm

TINY = "--emb-size 8 --hidden-sizes 8 --chunk-size 2 --batch-size 2 --bptt 5 --vocab 30 --steps 1 --repeats 1"


def timed_impls(monkeypatch, argv: list[str]) -> tuple[int, list[str | None]]:
    """Exit status, and the impl of the ON-LSTM layers of each model built."""
    built: list[str | None] = []
    build = lm_speed.build

    def spy(*a, **kw):
        run = build(*a, **kw)
        built.extend(m.impl for m in run[0].modules() if isinstance(m, onlstm.ONLSTM))
        return run

    monkeypatch.setattr(lm_speed, "build", spy)
    code = lm_speed.main(["--config", "ptb-cpu", *TINY.split(), "--warmup", "0", *argv])
    return code, built


def test_onlstm_impl_is_the_implementation_timed(monkeypatch, capsys):
    code, built = timed_impls(monkeypatch, ["--onlstm-impl", "reference"])
    out = capsys.readouterr().out
    assert code == 0 and built and set(built) == {"reference"}
    assert "| onlstm/reference |" in out and "ON-LSTM/reference / LSTM tokens/s:" in out


def test_each_onlstm_row_has_its_ratio(monkeypatch, capsys):
    code, _ = timed_impls(monkeypatch, ["--onlstm-impls", "reference,auto"])
    out = capsys.readouterr().out
    assert code == 0
    assert "ON-LSTM/reference / LSTM tokens/s:" in out and "ON-LSTM/auto / LSTM tokens/s:" in out


def test_both_impl_options_are_one_line_exit_2(monkeypatch, capsys):
    code, _ = timed_impls(monkeypatch, ["--onlstm-impl", "reference", "--onlstm-impls", "auto"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "give one of them" in err[0]


@pytest.mark.parametrize("impls", ["", "auto"])
def test_one_onlstm_row_without_impls(monkeypatch, capsys, impls):
    code, _ = timed_impls(monkeypatch, ["--onlstm-impls", impls] if impls else [])
    out = capsys.readouterr().out
    assert code == 0 and ("ON-LSTM / LSTM tokens/s:" in out if not impls else "ON-LSTM/auto / LSTM" in out)


def test_compile_adds_a_compiled_row_beside_each_model_with_its_ratio(monkeypatch, capsys):
    # aot_eager: the plumbing, in seconds (inductor's code generation is what a real run measures)
    compile_ = lm_speed.torch.compile
    monkeypatch.setattr(lm_speed.torch, "compile", lambda m: compile_(m, backend="aot_eager"))
    code, _ = timed_impls(monkeypatch, ["--compile"])
    out = capsys.readouterr().out
    assert code == 0
    for name in ("onlstm", "onlstm+compile", "lstm", "lstm+compile"):
        assert f"| {name} |" in out
    assert "onlstm+compile / onlstm tokens/s:" in out and "lstm+compile / lstm tokens/s:" in out
