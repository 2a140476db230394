"""``report.json`` and ``report.md`` of ``benchmarks/gpu_report.py``: the same facts, for machines and for people."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from onlstm.files import write_text

from .layer import FP32_TOLERANCE, HALF_TOLERANCE

SECTIONS = ("correctness", "step", "pytest", "speed", "training")  # in the order they run

SMOKE_NOTE = (
    "> **Smoke run**: CPU tensors, the Triton kernel in Triton's CPU interpreter, tiny sizes. It checks that "
    "every part of the command runs; **no number here is a GPU figure**, and its timings are not speeds."
)


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Counts and names of the checks (``passed``: True, False, or None: not run), goals and sections not met."""
    checks = [result["kernel"], *(c for n in SECTIONS for c in result.get(n, {}).get("checks", []))]
    failed = [c["name"] for c in checks if c["passed"] is False]
    not_run = [c["name"] for c in checks if c["passed"] is None]
    return {
        "checks": len(checks),
        "passed": sum(c["passed"] is True for c in checks),
        "failed": len(failed),
        "not_run": len(not_run),
        "failed_checks": failed,
        "not_run_checks": not_run,
        "goals_not_met": [
            g["goal"] for n in SECTIONS for g in result.get(n, {}).get("goals", []) if g["status"] == "not met"
        ],
        "sections_not_run": [n for n in SECTIONS if "not_run" in result.get(n, {})],
    }


def _plain(value: Any) -> Any:
    """JSON without NaN or Infinity (which strict readers refuse): those become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def write(out: Path, result: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Write report.json and report.md as the run stands (sections not reached yet say so); returns the summary."""
    full = result | {n: {"not_run": "not reached: the run stopped before it"} for n in SECTIONS if n not in result}
    full["seconds"] = round(seconds, 1)
    full["summary"] = summarize(full)
    # each file replaced in one rename: a refused write (WriteError, exit 4) leaves the report there before whole
    write_text(out / "report.json", json.dumps(_plain(full), indent=1) + "\n")
    write_text(out / "report.md", "\n".join(markdown(full)) + "\n")
    return full["summary"]


def _num(x: Any, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)  # inf and nan as str() writes them


def _verdict(passed: bool | None) -> str:
    return {True: "passed", False: "**FAILED**", None: "not run"}[passed]


def markdown(r: dict[str, Any]) -> list[str]:
    s = r["summary"]
    lines = [f"# `{r['title']}`", ""]
    if r["smoke"]:
        lines += [SMOKE_NOTE, ""]
    lines += [
        f"`{r['command'] or 'benchmarks/gpu_report.py'}`, started {r['started']}, {r['seconds']:.0f} s. "
        f"**{s['passed']} of {s['checks']} checks passed, {s['failed']} failed, {s['not_run']} not run.**",
        "",
    ]
    if s["failed_checks"]:
        lines += ["Failed: " + "; ".join(s["failed_checks"]), ""]
    if s["sections_not_run"]:
        lines += ["Sections not run: " + ", ".join(s["sections_not_run"]) + " (below: why).", ""]
    if s["goals_not_met"]:
        lines += ["Goals not met: " + "; ".join(s["goals_not_met"]), ""]
    lines += _environment(r["environment"]) + [_check(r["kernel"]), ""]
    for name, title, body in _SECTION_MARKDOWN:
        sec = r[name]
        lines += [f"## {title}", ""]
        lines += [f"Not run: {sec['not_run']}.", ""] if "not_run" in sec else body(sec)
    return lines


def _environment(env: dict[str, Any]) -> list[str]:
    lines = ["## Environment", "", "| | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in env.items() if k != "distributions"]
    have = ", ".join(f"{d} {v or '(missing)'}" for d, v in env["distributions"].items())
    return lines + [f"| other distributions | {have} |", ""]


def _check(c: dict[str, Any]) -> str:
    return f"{c['name']}: {_verdict(c['passed'])}" + (f" ({c['worst']})" if c.get("worst") else "")


def _correctness(sec: dict[str, Any]) -> list[str]:
    lines = [
        "Error: per tensor (outputs, final states, distances, every gradient), the largest difference over the",
        "largest magnitude of the reference; the worst tensor is named. The reference runs in float32",
        f"(tolerance {FP32_TOLERANCE:g}); under autocast the kernel's products are bf16/fp16 and the tolerance is",
        f"the larger of {HALF_TOLERANCE:g} and twice the reference loop's own error under the same autocast. The",
        "self-checks are the kernel's first-use check (nn/selfcheck.py), against the reference in float64.",
        "",
        "| check | sizes | max error (tensor) | tolerance | result |",
        "| --- | --- | --- | ---: | --- |",
    ]
    for c in sec["checks"]:
        err = f"{_num(c['error'], '.1e')} ({c['worst']})" if c.get("error") is not None else str(c.get("worst"))
        lines.append(f"| {c['name']} | {c['detail']} | {err} | {c['tolerance']:g} | {_verdict(c['passed'])} |")
    return lines + ["", f"{sec['seconds']:.0f} s.", ""]


def _pytest(sec: dict[str, Any]) -> list[str]:
    (check,) = sec["checks"]
    lines = [f"Result: {_verdict(check['passed'])}; {check['worst'] or ''}"]
    if "tests" in sec:
        counts = ", ".join(f"{sec[k]} {k}" for k in ("passed", "failures", "errors", "skipped"))
        lines.append(f"{sec['tests']} tests: {counts}; exit status {sec['returncode']}, {sec['seconds']:.0f} s.")
    return lines + [""]


def _speed(sec: dict[str, Any]) -> list[str]:
    lines = [
        "tokens/s = T*B / median time of one forward+backward (`out.sum().backward()`);",
        "`nn.LSTM` of the same size (cuDNN on a GPU, which rounds fp32 products to TF32 by default; the row",
        "`nn.LSTM no TF32` turns that off), all measured in this run, interleaved.",
        "",
        "| shape | dtype | impl | tokens/s | x nn.LSTM | x nn.LSTM no TF32 | x reference |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in sec["rows"]:
        if "error" in row or "not_available" in row:
            why = row.get("error") or row["not_available"]
            lines.append(f"| {row['shape']} | {row['dtype']} | {row['impl']} | {why} | | | |")
            continue
        ratios = " | ".join(_num(row.get(key), ".2f") for key in ("x nn.LSTM", "x nn.LSTM no TF32", "x reference"))
        lines.append(f"| {row['shape']} | {row['dtype']} | {row['impl']} | {_num(row['tokens_per_s'])} | {ratios} |")
    return lines + _goals(sec["goals"], "#10") + ["", f"{sec['seconds']:.0f} s.", ""]


def _goals(goals: list[dict[str, Any]], issue: str) -> list[str]:
    lines = ["", f"| goal (issue {issue}) | value | status |", "| --- | ---: | --- |"]
    return lines + [f"| {g['goal']} | {_num(g['value'], '.2f')} | {g['status']} |" for g in goals]


def _step(sec: dict[str, Any]) -> list[str]:
    lines = [
        "One forward+backward (`out.sum().backward()`, fp32) per row, the median of the timed rounds after a",
        "warm-up, every row of a shape timed in alternation. TF32: both `torch.backends.cuda.matmul.allow_tf32`",
        "(the ON-LSTM's products, cuBLAS or the fused kernel's `tl.dot`) and `torch.backends.cudnn.allow_tf32`",
        "(nn.LSTM) set as the row says; PyTorch's defaults are matmul off, cuDNN on. `split`: a torch product and",
        "a Triton kernel per step; `fused`: one Triton launch per step (ONLSTM_TRITON_STEP=fused); `torch.compile`:",
        "the layer's kernel as one operator, the step replayed as CUDA graphs by the compiler. Ratios are",
        "against eager cuDNN `nn.LSTM` of the same size: with the same TF32 setting, and with TF32 on.",
        "",
        "| shape | model | TF32 | run | ms | tokens/s | x cuDNN same TF32 | x cuDNN TF32 on |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in sec["rows"]:
        head = f"| {row['shape']} | {row['model']} | {'on' if row['tf32'] else 'off'} | "
        head += row["run"]
        if "ms" not in row:
            lines.append(f"{head} | {row.get('not_run') or row.get('error')} | | | |")
            continue
        ratios = " | ".join(_num(row.get(k), ".2f") for k in ("x cuDNN same TF32", "x cuDNN TF32 on"))
        lines.append(f"{head} | {row['ms']:.2f} | {_num(row['tokens_per_s'])} | {ratios} |")
    lines += _goals(sec["goals"], "#49") + ["", "Checks:", "", *(f"- {_check(c)}" for c in sec["checks"])]
    return lines + ["", f"{sec['seconds']:.0f} s.", ""]


def _training(sec: dict[str, Any]) -> list[str]:
    lines = []
    for run in sec["runs"]:
        lines += [f"### {run['name']}", ""]
        if "error" in run:
            lines += [f"**FAILED**: {run['error']}", ""]
            continue
        lines += [f"`{run['command']}`", ""] + [f"- {line}" for line in _figures(run)] + [""]
    lines += [
        "Issue #49's goals for `lm train`: the mean seconds of the steps where the ON-LSTM run replayed a CUDA graph",
        "(one seed, one schedule: the same segments in every run), the ON-LSTM graph run against each other run.",
        *_goals(sec.get("goals", []), "#49"),
        "",
    ]
    lines += ["Checks:", "", *(f"- {_check(c)}" for c in sec["checks"])]
    lines += ["", "The kernel's self-checks during these runs:", ""]
    lines += [f"- {line}" for line in sec["selfchecks"]] or ["- none ran"]
    return lines + ["", f"{sec['seconds']:.0f} s.", ""]


def _figures(run: dict[str, Any]) -> list[str]:
    if "seconds_per_step" in run:
        memory = "-" if run["peak_memory_gib"] is None else f"{run['peak_memory_gib']:.2f} GiB"
        return [
            # a run stopped before its first step has no layer, epoch or timing facts: "-" for each
            f"layers ran `{run.get('impl_used', '-') or 'nn.LSTM'}`; {run['steps']} steps, "
            f"the last {run['timed_steps']} timed",
            f"{_num(run['seconds_per_step'], '.4f')} s/step; {_num(run['seconds_per_epoch'], ',.1f')} s/epoch "
            f"({run.get('steps_per_epoch', '-')} steps: {run.get('epoch_of', '-')})",
            f"peak GPU memory: {memory}",
            f"CUDA graphs: {_graphs(run)}; TF32 for matrix products {_on(run.get('tf32_matmul'))}, "
            f"for cuDNN {_on(run.get('tf32_cudnn'))}",
        ]
    if "updates_per_s" in run:
        g = run.get("graphs")
        graphs = (
            "not used"
            if g is None
            else f"turned off ({g['off']})"
            if g["off"]
            else (f"{g['replayed']} of {run['updates']} updates replayed one, {g['lengths']} padded lengths recorded")
        )
        return [
            f"{run['updates']} updates in {run['seconds']:.2f} s: {_num(run['updates_per_s'], '.2f')} updates/s "
            "(the command's clock: the updates and one validation)",
            f"CUDA graphs: {graphs}",
        ]
    return [
        f"{run['items']} pairs scored in {run['seconds']:.2f} s: {_num(run['sentences_per_s'], ',.1f')} sentences/s"
    ]


def _graphs(run: dict[str, Any]) -> str:
    g = run.get("graphs")
    if g is None:
        return "not used"
    if g["off"]:
        return f"turned off during the run ({g['off']})"
    return f"{len(run['replayed_steps'])} of {run['steps']} steps replayed one, {g['lengths']} lengths recorded"


def _on(flag: bool | None) -> str:
    return "-" if flag is None else "on" if flag else "off"


_SECTION_MARKDOWN = (
    ("correctness", "Correctness: the Triton kernel against the reference loop", _correctness),
    ("step", "The step: split, fused and CUDA graphs against cuDNN", _step),
    ("pytest", "CUDA-only tests (`pytest -m cuda`)", _pytest),
    ("speed", "Speed: forward+backward of one layer", _speed),
    ("training", "Training: the experiments' commands", _training),
)
