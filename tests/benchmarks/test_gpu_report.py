"""``benchmarks/gpu_report.py``: the command itself under --smoke (the kernel in Triton's interpreter, CPU tensors), a
broken kernel found by it, its one-line errors, and the pieces that read or write the report."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch

from gpu_bench import environment, layer, report, step, training
from gpu_report import main
from onlstm.nn import capabilities, kernels, selfcheck

needs_triton = pytest.mark.skipif(
    __import__("importlib").util.find_spec("triton") is None, reason="needs Triton (its CPU interpreter)"
)


def read(out) -> dict:
    return json.loads((out / "report.json").read_text())


@needs_triton
@pytest.mark.slow
def test_smoke_run_writes_every_section_and_passes(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["--smoke", "--out", str(out)]) == 0, capsys.readouterr().err
    assert "no GPU figure" in capsys.readouterr().out
    r = read(out)
    assert r["smoke"] and r["summary"]["failed"] == 0
    names = [c["name"] for c in r["correctness"]["checks"]]
    for wanted in (
        "forward fp32",
        "every gradient fp32",
        "initial state hx given",
        "packed, unsorted lengths",
        "bidirectional",
        "two layers",
        "DropConnect",
        "bf16 autocast",
        "fp16 autocast",
        "self-check",
        "fused step: every gradient fp32",
        "fused step: packed, unsorted lengths",
        "self-check, products float32, fused step",
    ):
        assert any(n.startswith(wanted) for n in names), wanted
    assert all(c["passed"] for c in r["correctness"]["checks"])
    # the step section: eager split and fused (interpreter) and CPU nn.LSTM measured; TF32 and graphs need CUDA
    measured = {(row["model"], row["tf32"], row["graph"]) for row in r["step"]["rows"] if "ms" in row}
    assert measured == {("nn.LSTM", False, False), ("split", False, False), ("fused", False, False)}
    assert all(row["not_run"].startswith("needs CUDA") for row in r["step"]["rows"] if "ms" not in row)
    graphs = [c for c in r["step"]["checks"] if "CUDA graph" in c["name"] or "torch.compile" in c["name"]]
    assert len(graphs) == 6 and all(c["passed"] is None for c in graphs)  # compiled: at the paper's layer only
    assert {g["status"] for g in r["step"]["goals"]} == {"n/a (smoke: the interpreter is no speed)"}
    assert r["pytest"]["checks"][0]["passed"] is None  # no CUDA: recorded as not run, not as passed
    rows = {(row["dtype"], row["impl"]) for row in r["speed"]["rows"] if "tokens_per_s" in row}
    # torch's CPU LSTM under bf16 autocast needs bfloat16 instructions (oneDNN): asked, never failed
    lstm_bf16 = capabilities.lstm_autocast_error("cpu", torch.bfloat16)
    wanted = {(d, i) for d in ("fp32", "bf16") for i in ("nn.LSTM", "triton", "reference")}
    assert rows == wanted - ({("bf16", "nn.LSTM")} if lstm_bf16 else set())
    assert {g["status"] for g in r["speed"]["goals"]} == {"n/a (smoke: the interpreter is no speed)"}
    lm_graphs, lm_eager, lstm_graphs, lstm_eager, logic, logic_eager, syneval = r["training"]["runs"]
    assert logic["graphs"]["replayed"] and logic_eager["graphs"] is None
    assert lm_graphs["impl_used"] == lm_eager["impl_used"] == "triton_interpret"
    assert lstm_graphs["impl_used"] is None and lstm_eager["impl_used"] is None  # nn.LSTM
    assert lm_graphs["seconds_per_epoch"] > 0 and lm_graphs["peak_memory_gib"] is None
    # the graphs' bookkeeping ran (the eager stand-in replays on the CPU); the eager runs had none
    assert lm_graphs["replayed_steps"] and lstm_graphs["replayed_steps"] and not lm_eager["replayed_steps"]
    goals = r["training"]["goals"]
    assert len(goals) == 3 and {g["status"] for g in goals} == {"n/a (smoke: the interpreter is no speed)"}
    assert logic["updates"] == 2 and logic["updates_per_s"] > 0 and syneval["sentences_per_s"] > 0
    assert "no number here is a GPU figure" in (out / "report.md").read_text()
    # the interpreted kernel was first for impl='auto' only during the command
    assert kernels.resolve_impl("auto", torch.device("cpu"), torch.float32) != "triton_interpret"


@needs_triton
def test_a_wrong_kernel_fails_the_correctness_checks_and_the_exit_status(tmp_path, monkeypatch):
    from onlstm.nn.triton_kernel import TritonKernel

    backward = TritonKernel.backward

    def wrong(self, *args, **kwargs):  # every gradient 1% off, the forward right
        grads = backward(self, *args, **kwargs)
        return type(grads)(**{f.name: getattr(grads, f.name) * 1.01 for f in dataclasses.fields(grads)})

    monkeypatch.setattr(TritonKernel, "backward", wrong)
    out = tmp_path / "report"
    argv = ["--smoke", "--out", str(out), "--skip", "step", "pytest", "speed", "training"]
    assert main(argv) == 1
    checks = {c["name"]: c for c in read(out)["correctness"]["checks"]}
    assert checks["forward fp32"]["passed"] and not checks["every gradient fp32"]["passed"]
    assert checks["every gradient fp32"]["worst"].startswith("gradient of")
    assert not checks["self-check, products float32"]["passed"]
    text = (out / "report.md").read_text()
    assert "**FAILED**" in text and "Not run: --skip speed." in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--skip", "speedd"], "--skip: unknown section 'speedd'"),
        (["--syneval-data", "x.tsv"], "--syneval-data needs --lm-data"),
        (["--lm-steps", "1"], "--lm-steps must be at least 2"),
        (["--pytest-timeout", "-5"], "--pytest-timeout must be a positive number of seconds, got -5"),
        (["--pytest-timeout", "0"], "--pytest-timeout must be a positive number of seconds, got 0"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, capsys, argv, message):
    assert main(["--smoke", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_report.py: ") and message in err and "\n" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for a machine without CUDA")
def test_without_a_gpu_it_says_to_use_smoke(tmp_path, capsys):
    assert main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device is visible" in err and "--smoke" in err
    assert not (tmp_path / "report.md").exists()


def test_pytest_run_records_pass_fail_and_the_failing_tests(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "def test_ok():\n    pass\n"
        "def test_wrong():\n    assert 1 == 2\n"
        "@pytest.mark.skip(reason='no')\ndef test_skipped():\n    pass\n"
    )
    run = environment.run_pytest([str(tmp_path / "test_sample.py")], tmp_path / "junit.xml", 120, cwd=tmp_path)
    assert run["status"] == "failed" and run["returncode"] == 1
    assert (run["tests"], run["passed"], run["failures"], run["skipped"]) == (3, 1, 1, 1)
    assert run["failing"] == ["test_sample::test_wrong"]


def test_goals_are_met_or_not_by_the_ratios_of_the_paper_layer():
    paper = (70, 20, 400, 1150, 10)
    shape = "T=70 B=20 in=400 H=1150 C=10"
    rows = [
        {"shape": shape, "dtype": "fp32", "impl": "triton", "x nn.LSTM": 0.6, "x reference": 9.0},
        {"shape": "T=1 B=1 in=1 H=1 C=1", "dtype": "bf16", "impl": "triton", "x nn.LSTM": 9.0, "x reference": 99},
    ]
    status = {g["goal"]: g["status"] for g in layer.goals(rows, paper, smoke=False)}
    assert status == {
        "triton x nn.LSTM >= 0.5 (fp32, paper layer)": "met",
        "triton x reference >= 10 (fp32, paper layer)": "not met",
        "triton x nn.LSTM >= 0.5 (bf16, paper layer)": "not measured",
        "triton x reference >= 10 (bf16, paper layer)": "not measured",
    }


def test_summary_counts_failed_and_not_run_checks_and_json_has_no_nan(tmp_path):
    result = {
        "kernel": {"name": "loads", "passed": True},
        "correctness": {"checks": [{"name": "a", "passed": False, "error": float("inf")}]},
        "pytest": {"checks": [{"name": "pytest -m cuda", "passed": None}]},
        "speed": {"checks": [], "goals": [{"goal": "g", "status": "not met"}]},
        "training": {"not_run": "--skip training"},
    }
    s = report.summarize(result)
    assert (s["checks"], s["passed"], s["failed"], s["not_run"]) == (3, 1, 1, 1)
    assert s["failed_checks"] == ["a"] and s["goals_not_met"] == ["g"] and s["sections_not_run"] == ["training"]
    assert json.loads(json.dumps(report._plain(result), allow_nan=False))["correctness"]["checks"][0]["error"] == "inf"


def test_synthetic_corpus_has_every_word_in_its_training_text(tmp_path):
    folder = training.lm_corpus(tmp_path, tokens=500, vocab=50, seed=3)
    train = set((folder / "ptb.train.txt").read_text().split())
    assert train == {f"w{i}" for i in range(50)}
    assert set((folder / "ptb.valid.txt").read_text().split()) <= train
    assert len((folder / "ptb.train.txt").read_text().split()) == 550


def test_a_primitive_this_cpu_lacks_is_reported_as_not_available_not_failed(tmp_path, monkeypatch):
    """On a CPU without bfloat16 instructions torch's LSTM cannot run under bf16 autocast: forced here, so that a
    machine that has them runs the path the others take. The row says so and the report still passes."""
    import gpu_bench.layer

    why = f"{capabilities.NOT_AVAILABLE}: RuntimeError: could not create a primitive descriptor (forced)"
    monkeypatch.setattr(capabilities, "lstm_autocast_error", lambda device_type, dtype: why)
    rows = gpu_bench.layer.measure((3, 2, 4, 6, 3), "bf16", "reference", torch.device("cpu"), 1)
    lstm = next(r for r in rows if r["impl"] == "nn.LSTM")
    assert lstm == {"shape": "T=3 B=2 in=4 H=6 C=3", "dtype": "bf16", "impl": "nn.LSTM", "not_available": why}
    assert all("tokens_per_s" in r for r in rows if r["impl"] != "nn.LSTM")
    section = gpu_bench.layer.speed(((3, 2, 4, 6, 3),), "reference", torch.device("cpu"), 1, torch.bfloat16)
    assert section["checks"][0]["passed"]
    assert why in "\n".join(report._speed(section | {"seconds": 0.0}))


def test_the_bf16_lstm_probe_answers_without_raising():
    """The probe runs the primitive and answers None or a reason beginning with NOT_AVAILABLE, on any CPU."""
    why = capabilities.lstm_autocast_error("cpu", torch.bfloat16)
    assert why is None or why.startswith(capabilities.NOT_AVAILABLE)


def test_step_rows_say_what_needs_cuda_and_compare_with_cudnn_of_the_same_tf32():
    """The step section's plumbing on the CPU (the reference loop stands in for the kernel: no interpreter):
    the eager rows are timed, cuDNN's own row is 1.00x itself, TF32 and graph rows need CUDA, and so do the
    graphs' checks."""
    rows, checks = step.measure((3, 2, 4, 6, 3), "reference", torch.device("cpu"), 1, compiled=True)
    by = {(r["model"], r["tf32"], r["run"]): r for r in rows}
    assert len(rows) == len(step.VARIANTS) == 12
    assert by[("nn.LSTM", False, "eager")]["x cuDNN same TF32"] == 1.0
    assert all(by[(m, False, "eager")]["ms"] > 0 for m in ("nn.LSTM", "split", "fused"))
    assert by[("fused", True, "eager")]["not_run"] == "needs CUDA (TF32)"
    assert by[("split", False, "CUDA graph")]["not_run"] == "needs CUDA (CUDA graphs)"
    assert by[("split", False, step.COMPILED)]["not_run"] == "needs CUDA (CUDA graphs)"
    assert [c["passed"] for c in checks] == [None] * 6


def test_step_goals_compare_like_with_like():
    paper = "T=70 B=20 in=400 H=1150 C=10"
    rows = [
        {"shape": paper, "model": "fused", "tf32": False, "run": "eager", "x cuDNN same TF32": 0.8},
        {"shape": paper, "model": "split", "tf32": True, "run": "CUDA graph", "x cuDNN same TF32": 0.9},
        {"shape": "T=1 B=1 in=1 H=1 C=1", "model": "split", "tf32": False, "run": "eager", "x cuDNN same TF32": 9},
    ]
    status = {g["goal"]: g["status"] for g in step.goals(rows, paper, smoke=False)}
    assert status["fused eager x cuDNN >= 0.7 (fp32, TF32 off both sides, paper layer)"] == "met"
    assert status["split graph x cuDNN >= 1 (fp32, TF32 on both sides, paper layer)"] == "not met"
    assert status["split eager x cuDNN >= 0.7 (fp32, TF32 off both sides, paper layer)"] == "not measured"
    assert len(status) == 8


@needs_triton
def test_the_fused_cases_run_the_fused_step(monkeypatch):
    """A fused step with wrong gradients fails the report's fused cases and leaves the split ones passing."""
    from onlstm.nn import kernels as registry
    from onlstm.nn.triton_kernel import TritonKernel, register_interpreter_kernel

    fused_grads = TritonKernel._fused_grads

    def wrong(self, *args):
        dG, dG_mm, dh, dc = fused_grads(self, *args)
        return dG * 1.01, dG_mm * 1.01, dh, dc

    monkeypatch.setattr(TritonKernel, "_fused_grads", wrong)
    monkeypatch.setenv(selfcheck.ENV, "0")  # as the report runs its cases: the kernel itself, not its fallback
    name = register_interpreter_kernel()
    if registry.load_kernel(name) is None:
        pytest.skip(f"Triton interpreter not usable here: {registry.kernel_error(name)}")
    small = (3, 2, 3, 4, 2)
    try:
        split = layer.Case("split", small, compare="gradients")
        fused = dataclasses.replace(split, step="fused")
        for case, fails in ((split, False), (fused, True)):
            errors, allowed = layer._errors(case, name, torch.device("cpu"))
            assert any(errors[k] > allowed[k] for k in errors) == fails, case
    finally:
        registry.unregister_kernel(name)


def _fake_lm_train(status: str):
    """``onlstm.lm.train.train`` that stops before its first step with ``status`` (as Ctrl-C makes it)."""
    import types

    return lambda *a, **kw: types.SimpleNamespace(status=status)


@needs_triton
def test_ctrl_c_in_the_training_section_stops_the_report_with_130(tmp_path, monkeypatch, capsys):
    import onlstm.lm.train

    monkeypatch.setattr(onlstm.lm.train, "train", _fake_lm_train("interrupted"))
    out = tmp_path / "report"
    argv = ["--smoke", "--out", str(out), "--skip", "correctness", "step", "pytest", "speed"]
    assert main(argv) == 130
    assert "interrupted" in capsys.readouterr().err
    r = read(out)  # the sections before were kept; the training section is not recorded as a failure
    assert r["speed"] == {"not_run": "--skip speed"} and r["summary"]["failed"] == 0
    assert r["training"]["not_run"].startswith("not reached")


@needs_triton
def test_ctrl_c_at_a_trainers_last_step_stops_the_report_too(tmp_path, monkeypatch):
    """A stop asked during the last step ends the run as its budget does (status stopped): still exit 130."""
    import types

    import onlstm.lm.train
    from onlstm.device import StopRequest

    def last_step_interrupted(*a, **kw):
        with StopRequest() as stop:
            stop.requested = True  # as its SIGINT handler does
        return types.SimpleNamespace(status="stopped")

    monkeypatch.setattr(onlstm.lm.train, "train", last_step_interrupted)
    out = tmp_path / "report"
    assert main(["--smoke", "--out", str(out), "--skip", "correctness", "step", "pytest", "speed"]) == 130
    assert read(out)["training"]["not_run"].startswith("not reached")


def test_a_run_stopped_before_a_timed_step_is_a_failed_check_not_a_crash(tmp_path, monkeypatch):
    import argparse

    import gpu_report
    import onlstm.lm.train

    monkeypatch.setattr(onlstm.lm.train, "train", _fake_lm_train("stopped"))
    args = argparse.Namespace(lm_data=None, lm_steps=None)
    record, check = training._lm(gpu_report.SMOKE, args, tmp_path, "onlstm, eager", ("--no-cuda-graphs",), 3)
    assert "error" not in record and record["seconds_per_step"] is None and record["seconds_per_epoch"] is None
    assert check["passed"] is False and check["worst"] == "stopped after 0 steps"
    assert "- s/step" in "\n".join(report._figures(record))
    assert training.seconds_per_step([1.0], 1) is None and training.seconds_per_step([1.0, 2.0, 4.0], 1) == 1.5


@needs_triton
def test_a_refused_write_is_one_line_exit_4_and_keeps_the_report_there_before(tmp_path):
    import resource
    import subprocess
    import sys

    from support import REPO

    out = tmp_path / "report"
    out.mkdir()
    before = json.dumps({"complete": "x" * 4000})  # the new report is larger than the limit below, this one too
    (out / "report.json").write_text(before)
    skip = ["--skip", "correctness", "step", "pytest", "speed", "training"]
    script = [sys.executable, str(REPO / "benchmarks" / "gpu_report.py"), "--smoke", "--out", str(out), *skip]

    def limit_file_size() -> None:  # as `ulimit -f 1`: a write past 1 KiB fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    done = subprocess.run(script, capture_output=True, text=True, preexec_fn=limit_file_size, timeout=300)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 4, done.stderr
    assert len(err) == 1 and err[0].startswith("gpu_report.py: cannot write") and "EFBIG" in err[0]
    assert (out / "report.json").read_text() == before


def test_the_recorded_command_keeps_the_pytest_timeout():
    import gpu_report

    args = gpu_report.build_parser().parse_args(["--out", "r", "--pytest-timeout", "60", "--skip", "speed"])
    assert gpu_report._command(args) == "python benchmarks/gpu_report.py --out r --pytest-timeout 60 --skip speed"
    default = gpu_report.build_parser().parse_args(["--out", "r"])
    assert "--pytest-timeout" not in gpu_report._command(default)


def test_isolated_step_rows_match_the_in_process_ones_and_a_dead_child_fails_only_its_row(monkeypatch):
    """Each row in a child process (the default on CUDA): the same rows as in one process, and a child that dies
    (as one did on an H200 with an illegal memory access, which ends a process's CUDA context) makes its own row
    an error naming the error line, while every other row is still measured."""
    from gpu_bench import isolate

    shape, cpu = (3, 2, 4, 6, 3), torch.device("cpu")
    here = step.step_section((shape,), "reference", cpu, 1)
    apart = step.step_section((shape,), "reference", cpu, 1, isolate.measure)
    key = ("model", "tf32", "run", "not_run")
    assert [tuple(r.get(k) for k in key) for r in apart["rows"]] == [tuple(r.get(k) for k in key) for r in here["rows"]]
    assert all(r["ms"] > 0 for r in apart["rows"] if "not_run" not in r)
    fused = step.VARIANTS.index(step.Variant("fused", False, False))
    run_child = isolate.run_child

    def fused_dies(spec):
        if spec["variant"] != fused:
            return run_child(spec)
        die = "import sys; sys.stderr.write('torch.AcceleratorError: CUDA error: an illegal memory access\\n'); sys.exit(6)"
        return run_child(spec, [sys.executable, "-c", die])

    monkeypatch.setattr(isolate, "run_child", fused_dies)
    got = step.step_section((shape,), "reference", cpu, 1, isolate.measure)
    by = {(r["model"], r["tf32"], r["run"]): r for r in got["rows"]}
    assert by[("fused", False, "eager")]["error"] == (
        "its process ended (exit status 6): torch.AcceleratorError: CUDA error: an illegal memory access"
    )
    assert by[("split", False, "eager")]["ms"] > 0 and by[("nn.LSTM", False, "eager")]["ms"] > 0
    measured = next(c for c in got["checks"] if c["name"] == "every step row that can run here measured")
    assert measured["passed"] is False and "fused, TF32 off, eager" in measured["worst"]
