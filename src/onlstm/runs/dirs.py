"""Run directories (:class:`RunDir`: what a training does with its files: its header, what it holds, its output
check); docs/design.md §4.6. The files' names, opening a run and the registry of run kinds are :mod:`onlstm.saved`'s, the lock :mod:`onlstm.lock`'s, sharing a model :mod:`onlstm.sharing`'s."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..checkpoint import CheckpointError, read_json
from ..errors import RunDirError
from ..files import check_work_folder
from ..lock import RunLock, live_holder
from ..saved import RunFiles, find_kind, json_dict, kind_names


class RunDir(RunFiles):
    """A run directory, the one place that knows what a training does with its files (docs/design.md §4.6); their
    names are :class:`~onlstm.saved.RunFiles`'."""

    # -- the header ---------------------------------------------------------------------------------
    def write_header(self, header: dict, vocab: Callable[[Path], None]) -> None:
        """A new run's vocabulary (``vocab(path)`` writes it), then ``config.json``, which makes the folder a run: a
        failed write (a full disk) takes both away again, so that the same command runs again into the folder."""
        try:
            vocab(self.vocab_path)
            self.write_config(header)
        except OSError:
            for path in (self.vocab_path, self.config_path):
                path.unlink(missing_ok=True)
            raise

    @property
    def kind(self) -> str | None:
        kind = self.header().get("kind")
        return None if kind is None else str(kind)

    def results(self) -> dict | None:
        """The run's result record (``results.json``: :class:`~onlstm.runs.engine.TrainResult`'s, written when a
        training stops), None while there is none; a logic run of an earlier version kept it in its header. A
        record that is not a JSON object is refused (:class:`CheckpointError`): the file is damaged or was edited."""
        if self.results_path.exists():
            record, where = read_json(self.results_path), str(self.results_path)
        else:
            header = self.header()
            old, where = header.get("result"), f"{self.config_path} (result)"
            record = None if old is None else {"status": header.get("status"), **old} if isinstance(old, dict) else old
        if (record is not None or self.results_path.exists()) and not isinstance(record, dict):
            raise CheckpointError(f"{where} is not a JSON object of results: the file is damaged or was edited")
        return record

    def describe(self) -> str | None:
        """What the directory holds, in words (``"a finished logic run"``), or None when it holds no run."""
        resume = self.resume_path.exists()
        if not resume and not self.config_path.exists():
            return None
        header = self.header()
        kind = str(header.get("kind", "unknown"))
        status = (json_dict(self.results_path) or {}).get("status", header.get("status"))
        # a finished or stopped run may keep its resume file (a larger budget trains it further)
        state = (
            f"a {status}" if status in ("finished", "stopped", "diverged") else ("an interrupted" if resume else "a")
        )
        title = find_kind(kind).title if kind in kind_names() else kind  # a kind not imported yet: by its name
        holder = live_holder(self.path)
        if holder is not None:  # an interrupted-looking run that a live process is training
            return f"a {title} run training now ({holder})"
        return f"{state} {title} run" + (f" ({self.RESUME})" if resume else "")

    # -- as the output of a command -------------------------------------------------------------
    def check_output(
        self,
        *,
        resume: bool = False,
        command: str = "",
        flag: str = "--out",
        replace_kind: str | None = None,
        keep: tuple[str, ...] = (),
    ) -> RunDir:
        """Checked before any work as a training's output (:func:`onlstm.files.check_work_folder`): holding no run
        unless ``resume`` or a run of ``replace_kind`` (``logic compare`` retrains its own); a new run needs a new or
        empty directory (but for its lock, and the names in ``keep``: the demo's corpus). Nothing is created."""
        held = self.describe()
        replacing = held is not None and replace_kind is not None and self.kind == replace_kind
        options = {"command": command, "flag": flag, "ignore": (self.LOCK, *keep), "error": RunDirError}
        check_work_folder(self.path, held, resume=resume or replacing, **options)
        return self

    def lock(self, command: str, log: Callable[[str], None] | None = None, enabled: bool = True) -> RunLock:
        return RunLock(self.path, command, log, enabled)


def check_output_dir(path: str | Path, **options) -> Path:
    return RunDir(path).check_output(**options).path
