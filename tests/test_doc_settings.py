"""The guides name every flag a command takes, and docs/lm.md's table of the recipe's settings holds the values of the
presets it names: a flag added without a word in a guide, or a preset changed without its table, fails here."""

from __future__ import annotations

import argparse
import re

import pytest

from onlstm import cli
from onlstm.lm.config import load_config
from support import REPO, command_parsers

# the guides a user reads (results pages report runs; they are not where a flag is explained)
GUIDES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def flags(parser: argparse.ArgumentParser):
    """(command, long flag, setting name) for every flag of every sub-command, ``--help`` aside."""
    for words, p in command_parsers(parser):
        for action in p._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    yield " ".join(words), flag, action.dest


def named(text: str, flag: str, dest: str) -> bool:
    """A flag is named by itself, by its ``--no-`` twin (one sentence covers a yes/no pair), or as its setting in
    code type (`` `dropout_in` ``, the config file's key, which the guides say is the flag of the same name)."""
    base = flag[len("--no-") :] if flag.startswith("--no-") else flag[2:]
    spelled = [f"--{base}", f"--no-{base}"]
    if any(re.search(re.escape(s) + r"(?![\w-])", text) for s in spelled):
        return True
    return f"`{dest}`" in text or f"`{base.replace('-', '_')}`" in text


def test_every_flag_is_named_in_a_guide():
    text = "\n".join(p.read_text(encoding="utf-8") for p in GUIDES)
    missing = sorted({f"{cmd} {flag}" for cmd, flag, dest in flags(cli.build_parser()) if not named(text, flag, dest)})
    assert not missing, f"flags no guide names (README.md, docs/*.md): {missing}"


def test_the_flag_check_can_fail():
    assert not named("`--dropout-in` and `lr`", "--weight-decay", "weight_decay")
    assert named("a yes/no pair: `--no-tie-weights`", "--tie-weights", "tie_weights")
    assert not named("--dropout-in-extra", "--dropout-in", "dropout_in")  # a longer flag is not this one
    assert same("1.2e-6", 1.2e-6) and same("400 400 200", [400, 400, 200]) and same("true", True)
    assert not same("0.3", 0.2) and not same("400 400", [400, 400, 200]) and not same("raw", "dropped")


def recipe_table() -> dict[str, tuple[str, str]]:
    """docs/lm.md's table of the recipe: setting -> (ptb-paper, ptb-cpu) as written."""
    text = (REPO / "docs" / "lm.md").read_text(encoding="utf-8")
    start = text.index("| setting | `ptb-paper` | `ptb-cpu` |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def same(cell: str, value) -> bool:
    """The table's text against a setting's value: numbers by value (``1.2e-6`` is ``1.2e-06``), lists word by word."""
    if isinstance(value, bool):
        return cell == str(value).lower()
    if isinstance(value, (list, tuple)):
        words = cell.split()
        return len(words) == len(value) and all(same(w, v) for w, v in zip(words, value))
    if isinstance(value, (int, float)):
        try:
            return float(cell) == value
        except ValueError:
            return False
    return cell == str(value)


@pytest.mark.parametrize("column, preset", [(0, "ptb-paper"), (1, "ptb-cpu")])
def test_the_recipe_table_holds_the_presets_values(column, preset):
    cfg = load_config(preset)
    settings = {**cfg.model, **vars(cfg.train)}
    table = recipe_table()
    assert len(table) >= 20, "docs/lm.md's recipe table was not found whole"
    for name, values in table.items():
        assert name in settings, f"docs/lm.md's recipe table names {name}, which is no setting"
        assert same(values[column], settings[name]), (
            f"{preset}'s {name}: {settings[name]!r}, docs/lm.md {values[column]}"
        )
