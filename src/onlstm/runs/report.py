"""What a run reports between its validation checks: :class:`Report`, the component the engine logs to (the progress
bar of the pass in progress, a plain log line when the bar is not seen, a row of ``steps.csv``, TensorBoard);
docs/design.md §4.6."""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import WriteError
from ..files import write_text
from ..progress import progress_bar
from .dirs import RunDir

#: The least time between two log lines of a run (its ``steps.csv`` has every report).
LINE_SECONDS = 30.0


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


class Report:
    """A run's reports every ``every`` updates (0: the bar only): the figures on the progress bar of each pass (shown
    when ``progress`` is asked for), a plain log line instead when the bar would not be seen beside the log (stderr
    is not a terminal, or the log, stdout, goes elsewhere; at least ``line_seconds`` apart, so that a fast run's log
    stays readable), a row of the run's ``steps.csv`` and, with ``tensorboard`` when the package is installed,
    TensorBoard scalars (``train/...`` and each check's ``check/...``), the files written by the ``main`` process
    only. ``desc``: the words before each line; ``log``: where lines go. A resumed run keeps the rows of
    ``steps.csv`` up to the step it resumes from; a new one starts the file anew. A file that cannot be written is
    reported once and left alone: these figures are a view of the training, which goes on."""

    def __init__(self, run: RunDir, every: int, progress: bool, tensorboard: bool, main=True, desc="", log=print):
        self.every, self.desc, self._log, self.show_bar = every, desc, log, progress and main
        self.lines = self.show_bar and not (_is_terminal(sys.stderr) and _is_terminal(sys.stdout))
        self.csv = run.steps_path if main else None
        self.board = run.tensorboard_path if main and tensorboard else None
        self.line_seconds = LINE_SECONDS
        self.bar: Any = None
        self.last_line = 0.0  # clock of the last log line
        self.columns: list[str] | None = None  # the header of ``steps.csv``
        self.tensorboard: Any = None

    def open(self, from_step: int, clock: float) -> None:
        """A session starts at ``from_step`` after ``clock`` seconds of training (``steps.csv`` kept up to it)."""
        self.last_line = clock
        if self.csv is not None:
            self._keep_until(self.csv, from_step)
        if self.board is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                self._log(
                    "no TensorBoard logs: the tensorboard package is not installed (pip install tensorboard); "
                    f"the training figures are in {self.csv or RunDir.STEPS}"
                )
            else:
                self.tensorboard = SummaryWriter(str(self.board))

    def _keep_until(self, path: Path, step: int) -> None:
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
        if self.lines and (end or elapsed - self.last_line >= self.line_seconds):
            self.last_line = elapsed
            parts = [f"step {step}", f"epoch {epoch:.2f}", *(f"{k} {v}" for k, v in shown.items())]
            parts += [f"elapsed {_duration(elapsed)}", f"left {_duration(left)}"]
            self.write(" | ".join([f"{self.desc} {parts[0]}".strip(), *parts[1:]]))
        if (path := self.csv) is not None:
            row = {"step": step, "epoch": round(epoch, 4), "elapsed_s": round(elapsed, 1)}
            row.update({k: round(v, 6) for k, v in figures.items()})
            lines = [list(row.values())]
            if self.columns != list(row):  # a new file (or other figures than an earlier session's): a header
                lines.insert(0, list(row))
                self.columns = list(row)
                self._guard(lambda: path.unlink(missing_ok=True))
            self._guard(lambda: self._append(_csv_text(lines)))
        self.check(step, figures, "train")

    def _append(self, text: str) -> None:
        if self.csv is not None:  # else given up after a failed write
            with open(self.csv, "a", encoding="utf-8") as f:
                f.write(text)

    def _guard(self, write: Callable[[], None]) -> None:
        try:
            write()
        except OSError as exc:
            if self.csv is not None:
                self.write(f"{WriteError(self.csv, exc, atomic=False)}; the training figures are no longer written")
            self.csv = None

    def check(self, step: int, record: dict[str, Any], prefix: str = "check") -> None:
        """The numbers among ``record`` (a validation check's; finite ints and floats) as TensorBoard scalars
        ``prefix/name``."""
        if self.tensorboard is not None:
            for name, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self.tensorboard.add_scalar(f"{prefix}/{name}", value, step)

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
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None


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


def _csv_text(rows: list[list]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()
