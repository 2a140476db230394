"""benchmarks/gpu_profile.py off the GPU: its refusal, and the busy-time arithmetic it measures with."""

from __future__ import annotations

import pytest
import torch

import gpu_profile


def test_union_length_merges_overlapping_kernels():
    assert gpu_profile.union_length([]) == 0
    assert gpu_profile.union_length([(0, 2), (1, 3), (5, 6)]) == 4  # [0, 3] and [5, 6]
    assert gpu_profile.union_length([(0, 10), (2, 3), (4, 12)]) == 12  # nested, then extending


def test_rel_error_names_a_missing_gradient_infinite():
    want = torch.tensor([2.0, -4.0])
    assert gpu_profile.rel_error(want.clone(), want) == 0
    assert gpu_profile.rel_error(torch.tensor([2.0, -3.0]), want) == pytest.approx(0.25)
    assert gpu_profile.rel_error(None, want) == float("inf")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no GPU is visible")
def test_without_a_gpu_it_says_so_in_one_line(tmp_path, capsys):
    assert gpu_profile.main(["--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0]
    assert not (tmp_path / "p").exists()


def test_a_refused_write_of_the_profile_is_one_line_exit_4(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_profile, "measure", lambda shape, repeats: {"shape": list(shape)})
    monkeypatch.setattr(gpu_profile, "table", lambda r: [])
    blocker = tmp_path / "file"  # --out names a file: no folder can be made there
    blocker.write_text("kept")
    assert gpu_profile.main(["--out", str(blocker), "--shape", "2", "1", "2", "4", "2"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpu_profile.py: cannot write") and "profile.json" in err[0]
