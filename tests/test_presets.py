"""The --config presets ship inside the package (issue 13): in the wheel, by name in every command that takes
--config, listed by `onlstm presets`, and one copy of each file (`configs/` at the top is a link)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import onlstm
from onlstm.cli import main
from onlstm.config import PRESET_DIR, ConfigError, find_preset, presets, resolve_config
from support import CONFIGS, REPO

SHIPPED = sorted(f"{p.parent.name}/{p.stem}" for p in CONFIGS.glob("*/*.yaml"))


def test_presets_are_found_by_full_and_short_name():
    assert PRESET_DIR.resolve() == CONFIGS.resolve() and len(SHIPPED) >= 8
    assert list(presets()) == SHIPPED
    assert list(presets("lm")) == ["lm/demo", "lm/ptb-cpu", "lm/ptb-paper", "lm/tiny", "lm/wiki-paper"]
    for value in ("ptb-cpu", "lm/ptb-cpu", "ptb-cpu.yaml", "lm/ptb-cpu.yaml"):
        assert resolve_config(value, "lm") == CONFIGS / "lm" / "ptb-cpu.yaml", value
    assert resolve_config("cpu-1h", "logic") == CONFIGS / "logic" / "cpu-1h.yaml"
    assert find_preset("smoke") == ("logic/smoke", CONFIGS / "logic" / "smoke.yaml")


def test_a_file_wins_over_a_preset_and_bad_names_list_the_presets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("tiny").write_text("model: {}\n")
    assert resolve_config("tiny", "lm") == Path("tiny")  # the user's file of that name, not the preset
    with pytest.raises(ConfigError, match=r"does not exist, and it is not a lm preset.*ptb-cpu, ptb-paper, tiny"):
        resolve_config("ptb-gpu", "lm")
    Path("a-folder").mkdir()  # there, but not a file: said so, not "does not exist"
    with pytest.raises(ConfigError, match=r"config file a-folder is not a regular file, and it is not a lm preset"):
        resolve_config("a-folder", "lm")
    with pytest.raises(ConfigError, match=r"not a lm preset either; did you mean ptb-cpu\? \(lm presets"):
        resolve_config("ptb_cpu", "lm")  # the underscore of a Python name
    with pytest.raises(ConfigError, match=r"not a logic preset either; did you mean cpu-1h\?"):
        resolve_config("cpu1h", "logic")
    with pytest.raises(ConfigError) as far:
        resolve_config("something-else", "lm")
    assert "did you mean" not in str(far.value)
    with pytest.raises(ConfigError, match=r"'logic/smoke' is a preset for `onlstm logic`, not for `onlstm lm`"):
        resolve_config("logic/smoke", "lm")
    with pytest.raises(ConfigError, match="it is not a demo preset either"):
        resolve_config("tiny.yml", "demo")
    with pytest.raises(ConfigError, match="no preset named 'nope'; presets: lm/demo, lm/ptb-cpu"):
        find_preset("nope")


def test_every_command_taking_config_accepts_a_preset_name(tmp_path, monkeypatch, capsys):
    from onlstm.config import Settings
    from onlstm.lm.config import load_config
    from onlstm.logic.config import CONFIG_KEYS, SECTIONS

    def load_yaml(name):
        return Settings.resolve(SECTIONS, name, experiment="logic", keys=CONFIG_KEYS)

    monkeypatch.chdir(tmp_path)  # no checkout here: only the package's own files can be found
    assert load_config(Path("tiny")).model["hidden_sizes"] == [24, 16]
    assert load_yaml(Path("smoke")).keys["data"] == "runs/logic/smoke-data"
    for name in presets("lm"):
        load_config(Path(name))
    for name in presets("logic"):
        load_yaml(Path(name))
    for argv in (
        ["lm", "train", "--config", "nope", "--data-dir", "d", "--out", "o"],
        ["logic", "train", "--config", "nope"],
        ["logic", "compare", "--config", "nope"],
        ["demo", "--config", "nope"],
        ["syneval", "--config", "nope", "--checkpoint", "c", "--data", "d"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "config file nope does not exist, and it is not a" in err and err.count("\n") == 1, err
    assert not Path("o").exists()


def test_presets_command_lists_each_with_its_first_comment_line(capsys):
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in SHIPPED:
        first = (CONFIGS / f"{name}.yaml").read_text().splitlines()[0]
        assert first.startswith("# ")
        row = next(ln for ln in lines if ln.split()[:1] == [name])
        assert row.split(None, 1)[1] == first[2:]
    assert main(["presets", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert sorted(table) == SHIPPED and Path(table["lm/tiny"]["file"]).read_text().startswith("# A few-second")
    assert main(["presets", "tiny"]) == 0
    assert capsys.readouterr().out == (CONFIGS / "lm" / "tiny.yaml").read_text()
    assert main(["presets", "nope"]) == 2


def test_top_level_configs_is_the_package_directory_not_a_copy():
    link = REPO / "configs"
    assert link.is_symlink() and link.resolve() == CONFIGS.resolve()
    assert (link / "lm" / "ptb-cpu.yaml").read_text() == (CONFIGS / "lm" / "ptb-cpu.yaml").read_text()


def test_the_wheel_ships_the_presets_and_the_version(tmp_path):
    """Build the wheel from a copy of the sources (pip leaves build/ and *.egg-info behind) and look inside."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "w")]
    r = subprocess.run([*cmd, str(src)], capture_output=True, text=True, timeout=300)
    # no build tools here (no setuptools, or one older than 70.1 without the wheel package: Python 3.11's own
    # venv with a torch that does not upgrade it), not a fault of the package
    missing = next((why for why in ("No module named", "invalid command 'bdist_wheel'") if why in r.stderr), None)
    if r.returncode and missing:
        pytest.skip(f"cannot build a wheel here: {missing} ({r.stderr.strip().splitlines()[-1]})")
    assert r.returncode == 0, r.stderr
    (wheel,) = (tmp_path / "w").glob("*.whl")
    assert wheel.name.startswith(f"onlstm-{onlstm.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"onlstm/configs/{n}.yaml" for n in SHIPPED} <= names
    assert "onlstm/nn/csrc/onlstm_cpu.cpp" in names
    # installed from the wheel alone (no checkout on the path), a preset name still resolves and loads
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "from onlstm.lm.config import load_config; import onlstm; print(onlstm.__file__, load_config('ptb-cpu').model)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(str(site / "onlstm")) and "'hidden_sizes': [400, 400, 200]" in r.stdout
