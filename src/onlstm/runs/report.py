"""What a run reports between its validation checks: :class:`Report`, the component the engine logs to (the progress
bar of the pass in progress, a plain log line when the bar is not seen, a row of ``steps.csv``, TensorBoard), set up
by :class:`Reporting` (docs/design.md §4.6)."""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import WriteError
from ..files import write_text
from ..progress import progress_bar
from .dirs import RunDir

#: The least time between two log lines of a run (its ``steps.csv`` has every report).
LINE_SECONDS = 30.0


@dataclass(frozen=True)
class Reporting:
    """What a run reports between validation checks, every ``every`` updates: the progress bar's figures, a
    plain log line instead when the bar is not on a terminal (``lines``), a row of ``csv`` and, with
    ``tensorboard`` (a folder), TensorBoard scalars. Off (``every=0``): the bar only. Log lines are kept at
    least ``line_seconds`` apart, so that a fast run's log stays readable (``steps.csv`` has every report)."""

    every: int = 0
    lines: bool = False
    csv: Path | None = None
    tensorboard: Path | None = None
    line_seconds: float = LINE_SECONDS  # at least this long between two log lines (a pass's end always has one)

    @classmethod
    def for_run(cls, run: RunDir, every: int, progress: bool, tensorboard: bool, main: bool = True) -> Reporting:
        """A run's reporting: its ``steps.csv`` (and ``tensorboard/``) written by the main process only; log
        lines when ``progress`` is asked for and the bar would not be seen beside the log (stderr is not a
        terminal, or the log, stdout, goes elsewhere)."""
        lines = progress and main and not (_is_terminal(sys.stderr) and _is_terminal(sys.stdout))
        board = run.tensorboard_path if main and tensorboard else None
        return cls(every, lines, run.steps_path if main else None, board, LINE_SECONDS)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


class Report:
    """A run's reports (``desc``: the words before each line; ``bar``: show a progress bar; ``log``: where lines
    go): :meth:`log` after every ``reporting.every`` updates, the bar of each pass, :meth:`check` after a check."""

    def __init__(self, reporting: Reporting, desc: str, bar: bool, log: Callable[[str], None]):
        self.reporting, self.desc, self.show_bar, self._log = reporting, desc, bar, log
        self.bar: Any = None
        self.last_line = 0.0  # clock of the last log line
        self.steps: StepLog | None = None

    def open(self, from_step: int, clock: float) -> None:
        """A session starts at ``from_step`` after ``clock`` seconds of training (``steps.csv`` kept up to it)."""
        self.last_line, self.steps = clock, StepLog(self.reporting, from_step, self.write)

    def start_pass(self, total: int, done: int, title: str) -> None:
        desc = f"{self.desc} {title}".strip()
        bar = {"total": total, "initial": done, "desc": desc, "leave": False, "dynamic_ncols": True}
        self.bar = progress_bar(self.show_bar, **bar)

    def advance(self) -> None:
        self.bar.update(1)

    def log(
        self, step: int, figures: dict[str, float], *, epoch: float, elapsed: float, left: float | None, end: bool
    ) -> None:
        """The figures since the last report at ``step`` on the bar, in a log line (when the bar is not seen: at
        the pass's ``end`` always, else at most one in ``line_seconds``), in ``steps.csv`` and TensorBoard."""
        shown = {name.replace("_per_s", "/s"): _figure(name, value) for name, value in figures.items()}
        self.bar.set_postfix({**shown, "left": _duration(left)})
        if self.reporting.lines and (end or elapsed - self.last_line >= self.reporting.line_seconds):
            self.last_line = elapsed
            parts = [f"step {step}", f"epoch {epoch:.2f}", *(f"{k} {v}" for k, v in shown.items())]
            parts += [f"elapsed {_duration(elapsed)}", f"left {_duration(left)}"]
            self.write(" | ".join([f"{self.desc} {parts[0]}".strip(), *parts[1:]]))
        if self.steps is not None:
            self.steps.add(step, epoch, elapsed, figures)

    def check(self, step: int, record: dict[str, Any]) -> None:
        """A validation check's numeric figures as TensorBoard scalars."""
        if self.steps is not None:
            self.steps.scalars("check", step, record)

    def write(self, msg: str) -> None:
        if self.bar is not None and self._log is print:
            self.bar.write(msg)  # keeps a progress bar intact
        else:
            self._log(msg)

    def end_pass(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def close(self) -> None:
        self.end_pass()
        if self.steps is not None:
            self.steps.close()


def _figure(name: str, value: float) -> str:
    if name.endswith("_per_s"):
        return f"{value:,.0f}"
    if name == "accuracy":
        return f"{100 * value:.1f}%"
    return f"{value:.4g}"


def _duration(seconds: float | None) -> str:
    """``1:02:03`` or ``2:03``; ``?`` when not known."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class StepLog:
    """A run's figures between validation checks: rows of ``steps.csv`` (step, epoch, elapsed_s, the task's
    figures) and, when asked for and installed, TensorBoard scalars (``train/...`` and each check's ``check/...``).
    A resumed run keeps the rows up to the step it resumes from; a new one starts the file anew. A file that
    cannot be written is reported once and left alone: these figures are a view of the training, which goes on."""

    def __init__(self, report: Reporting, from_step: int, log: Callable[[str], None]):
        self.path, self.log, self.columns = report.csv, log, None
        self.tensorboard: Any = None
        if self.path is not None:
            self._keep_until(from_step)
        if report.tensorboard is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                log(
                    "no TensorBoard logs: the tensorboard package is not installed (pip install tensorboard); "
                    f"the training figures are in {report.csv or RunDir.STEPS}"
                )
            else:
                self.tensorboard = SummaryWriter(str(report.tensorboard))

    def _keep_until(self, step: int) -> None:
        if self.path is None:
            return
        path = self.path
        try:
            rows = list(csv.reader(io.StringIO(path.read_text()))) if path.exists() else []
            kept = [r for r in rows[1:] if r and int(r[0]) <= step] if step else []
        except (OSError, ValueError):  # unreadable or not ours: begun anew
            rows, kept = [], []
        if rows and kept:
            self.columns = rows[0]
            self._guard(lambda: write_text(path, _csv_text([rows[0], *kept])))
        else:
            self._guard(lambda: path.unlink(missing_ok=True))

    def add(self, step: int, epoch: float, elapsed: float, figures: dict[str, float]) -> None:
        path = self.path
        if path is not None:
            row = {"step": step, "epoch": round(epoch, 4), "elapsed_s": round(elapsed, 1)}
            row.update({k: round(v, 6) for k, v in figures.items()})
            lines = [list(row.values())]
            if self.columns != list(row):  # a new file (or other figures than an earlier session's): a header
                lines.insert(0, list(row))
                self.columns = list(row)
                self._guard(lambda: path.unlink(missing_ok=True))
            self._guard(lambda: self._append(_csv_text(lines)))
        self.scalars("train", step, figures)

    def _append(self, text: str) -> None:
        if self.path is None:  # given up after a failed write
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)

    def _guard(self, write: Callable[[], None]) -> None:
        try:
            write()
        except OSError as exc:
            if self.path is not None:
                self.log(f"{WriteError(self.path, exc, atomic=False)}; the training figures are no longer written")
            self.path = None

    def scalars(self, prefix: str, step: int, values: dict[str, Any]) -> None:
        """The numbers among ``values`` (finite ints and floats) as TensorBoard scalars ``prefix/name``."""
        if self.tensorboard is not None:
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self.tensorboard.add_scalar(f"{prefix}/{name}", value, step)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None


def _csv_text(rows: list[list]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()
