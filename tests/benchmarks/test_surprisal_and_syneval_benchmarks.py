"""benchmarks/surprisal_speed.py and benchmarks/syneval_speed.py run end to end on a tiny model (a smoke test:
a benchmark that no test runs stops working unnoticed, as syneval_speed.py did when Encoder.tokens went)."""

from __future__ import annotations

import surprisal_speed
import syneval_speed
from support import CONFIGS


def test_surprisal_benchmark_runs(capsys):
    args = ["--config", str(CONFIGS / "lm" / "tiny.yaml"), "--ptb", "20", "--reference", "2", "--repeats", "1"]
    assert surprisal_speed.main([*args, "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU: ") and out.count("sentences/s") == 4


def test_syneval_benchmark_runs(capsys):
    args = ["--config", str(CONFIGS / "lm" / "tiny.yaml"), "--repeats", "1", "--reference-items", "2"]
    assert syneval_speed.main([*args, "--threads", "1"]) == 0
    assert "ratio new / old" in capsys.readouterr().out
