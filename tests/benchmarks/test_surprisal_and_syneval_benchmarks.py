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


def test_the_machine_line_is_the_first_line_of_every_speed_benchmark(capsys, tmp_path):
    import corpus_memory
    import lm_speed

    args = ["--config", str(CONFIGS / "lm" / "tiny.yaml"), "--repeats", "1", "--reference-items", "2"]
    assert syneval_speed.main([*args, "--threads", "1"]) == 0
    assert capsys.readouterr().out.startswith("CPU: ")
    tiny = "--emb-size 8 --hidden-sizes 8 --chunk-size 2 --batch-size 2 --bptt 5 --vocab 30 --steps 1 --repeats 1"
    assert lm_speed.main(["--config", "ptb-cpu", *tiny.split(), "--warmup", "0"]) == 0
    assert capsys.readouterr().out.startswith("# CPU: ")
    assert corpus_memory.main(["--words", "200", "--types", "20"]) == 0
    assert capsys.readouterr().out.startswith("# CPU: ")
