"""The worked examples of CONTRIBUTING.md ("Where things go") still work: each example's files and its one
registration line are read from the page (by their ``<!-- example ... -->`` markers) and run as written."""

from __future__ import annotations

import ast
import re
import sys
import types

import pytest
import torch

import onlstm
from onlstm import cli, encoders
from onlstm.cli import main
from onlstm.nn import KernelSpec, kernels, register_kernel
from onlstm.parsing import metrics, parse_brackets, register_metric
from support import REPO, TINY_LM, write_corpus

PAGE = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"<!-- example (\w+) (file|registration)(?: (\S+))? -->\n```python\n(.*?)```", re.S)


def examples(kind: str) -> tuple[dict[str, str], str]:
    """``({file name: code}, registration line)`` of the worked example ``kind``."""
    files, registration = {}, []
    for found in BLOCK.finditer(PAGE):
        if found[1] == kind:
            if found[2] == "file":
                files[found[3] or kind] = found[4]
            else:
                registration.append(found[4].strip())
    assert files and len(registration) == 1, f"CONTRIBUTING.md lost the files or the one line of {kind!r}"
    assert "\n" not in registration[0], f"the registration of {kind!r} is more than one line"
    return files, registration[0]


def module(code: str, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(code, f"CONTRIBUTING.md ({name})", "exec"), mod.__dict__)
    return mod


def test_every_example_is_found():
    assert {m[1] for m in BLOCK.finditer(PAGE)} == {"encoder", "kernel", "metric", "experiment"}


def test_the_encoder_example_trains_a_language_model(tmp_path, capsys):
    files, line = examples("encoder")
    mod = module(next(iter(files.values())), "example_encoder")
    exec(line, {"register": encoders.register, **vars(mod)})
    try:
        assert "lstm-nobias" in encoders.names()
        layer = encoders.make_encoder("lstm-nobias", 3, 5)
        assert not any("bias" in name for name, _ in layer.named_parameters())
        corpus, out = write_corpus(tmp_path / "corpus"), tmp_path / "run"
        argv = ["lm", "train", "--config", str(TINY_LM), "--data-dir", str(corpus), "--out", str(out)]
        assert main([*argv, "--cell", "lstm-nobias", "--max-steps", "2", "--no-final-test", "--no-progress"]) == 0
        assert "stopped by max_steps after 2 steps" in capsys.readouterr().out
    finally:
        encoders.unregister("lstm-nobias")


def test_the_kernel_example_computes_what_the_reference_does():
    files, line = examples("kernel")
    mod = module(next(iter(files.values())), "example_kernel")
    exec(line, {"register_kernel": register_kernel, "KernelSpec": KernelSpec, "torch": torch, **vars(mod)})
    try:
        assert "recompute" in kernels.impl_choices()
        torch.manual_seed(0)
        mine = onlstm.ONLSTM(3, 8, chunk_size=2, num_layers=2, impl="recompute").double()
        ref = onlstm.ONLSTM(3, 8, chunk_size=2, num_layers=2, impl="reference").double()
        ref.load_state_dict(mine.state_dict())
        x = torch.randn(6, 2, 3, dtype=torch.float64)
        (a, _), (b, _) = mine(x), ref(x)
        torch.testing.assert_close(a, b)
        a.square().sum().backward()
        b.square().sum().backward()
        for (name, p), q in zip(mine.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
    finally:
        kernels.unregister_kernel("recompute")


def test_the_metric_example_is_reported_by_compare_trees(tmp_path, capsys):
    files, line = examples("metric")
    mod = module(next(iter(files.values())), "example_metric")
    gold = [parse_brackets("((the cat) (sat down))"), parse_brackets("((a dog) barked)")]
    pred = [parse_brackets("(((the cat) sat) down)"), parse_brackets("((a dog) barked)")]
    assert mod.exact_match(gold, pred) == 0.5  # the second sentence only
    exec(line, {"register_metric": register_metric, **vars(mod)})
    try:
        (tmp_path / "gold.txt").write_text("((the cat) (sat down))\n((a dog) barked)\n")
        (tmp_path / "pred.txt").write_text("(((the cat) sat) down)\n((a dog) barked)\n")
        assert main(["parsing", "compare-trees", str(tmp_path / "gold.txt"), str(tmp_path / "pred.txt"), "--json"]) == 0
        assert '"exact_match": 0.5' in capsys.readouterr().out
    finally:
        metrics.unregister_metric("exact_match")


def test_the_experiment_example_is_a_command(tmp_path, monkeypatch, capsys):
    files, line = examples("experiment")
    assert set(files) == {"hello/__init__.py", "hello/evaluate.py", "hello/cli.py"}  # the template's files
    for name, code in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(code, encoding="utf-8")
    monkeypatch.setattr(onlstm, "__path__", [*onlstm.__path__, str(tmp_path)])  # as if in src/onlstm/
    ((module_name, names),) = ast.literal_eval("{" + line + "}").items()
    monkeypatch.setitem(cli.SUBCOMMAND_MODULES, module_name, names)
    try:
        text = tmp_path / "text.txt"
        text.write_text("the cat sat\n\na dog barked at it\n")
        assert main(["hello", "stats", str(text)]) == 0
        assert capsys.readouterr().out == "2 sentences, 4.00 words on average\n"  # (3 + 5) / 2
        assert main(["hello", "stats", str(tmp_path / "none.txt")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("onlstm hello stats: ") and "is not a file" in err and "Traceback" not in err
    finally:
        for name in [n for n in sys.modules if n.startswith("onlstm.hello")]:
            monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize("kind", ["encoder", "kernel", "metric", "experiment"])
def test_a_broken_example_is_caught(kind, monkeypatch):
    """The reader of the page fails when an example loses its registration line (so the tests above cannot pass
    on an empty page)."""
    monkeypatch.setitem(globals(), "PAGE", re.sub(rf"<!-- example {kind} registration -->", "", PAGE))
    with pytest.raises(AssertionError, match="lost the files or the one line"):
        examples(kind)
