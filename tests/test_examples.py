"""The examples outside the package (``examples/``): they run as scripts and use the public layer only.

``examples/layer_demo.py`` was ``onlstm layer-demo``; its checks moved here with it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from onlstm.errors import EXPERIMENT_PACKAGES
from support import REPO
from test_light_core import BLOCKER

LAYER_DEMO = REPO / "examples" / "layer_demo.py"


@pytest.fixture(scope="module")
def layer_demo():
    """The example imported by path (it is no module of the package)."""
    spec = importlib.util.spec_from_file_location("layer_demo", LAYER_DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seconds", ["nan", "-5", "inf", "0"])
def test_layer_demo_refuses_a_bad_time_budget_in_one_line(layer_demo, capsys, seconds):
    with pytest.raises(SystemExit) as exc:
        layer_demo.main(["--seconds", seconds])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--seconds: must be a finite number of seconds > 0" in err
    assert "Traceback" not in err


def test_layer_demo_runs_as_a_script_with_the_layer_only(tmp_path):
    """`python examples/layer_demo.py` with the experiments' packages hidden (as `pip install onlstm` without the
    extra): it trains, and prints one JSON object with its numbers."""
    site = tmp_path / "blocker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(EXPERIMENT_PACKAGES)))
    env = dict(os.environ)  # HOME and TORCH_EXTENSIONS_DIR included: the C++ kernel built once is found again
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), str(REPO / "src"), env.get("PYTHONPATH")]))
    argv = [sys.executable, str(LAYER_DEMO), "--seconds", "0.5", "--json"]
    r = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["steps"] >= 1 and len(result["examples"]) <= 3
    assert -1.0 <= result["corr_distance_depth"] <= 1.0 and result["held_out_perplexity"] >= 1.0


def test_logic_mix_counts_a_file_written_by_hand(tmp_path):
    """``examples/logic_mix.py`` on a file whose shares are known: 3 pairs, 2 of them '#', 1 'not' of 3 operators."""
    spec = importlib.util.spec_from_file_location("logic_mix", REPO / "examples" / "logic_mix.py")
    mix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mix)
    lines = ["#\t( a ( and b ) )\tc", "#\t( not d )\te", ">\t( a ( or b ) )\ta"]
    (tmp_path / "train1").write_text("\n".join(lines) + "\n")
    (row,) = mix.describe(str(tmp_path), "train", 1, 1)
    assert row.startswith("train1: n=3 '#'=0.667 '<'+'>'=0.333 ")
    assert "not-share=0.333" in row and "smaller-side 0/1=1.00/0.00" in row
