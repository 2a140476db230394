"""The runtime every experiment shares (one module per concern, re-exported here); docs/design.md §4.6.

* :class:`RunDir` (``dirs``) -- a run directory, the one place that knows its files (``run.config_path``,
  ``run.weights("best")``, ``run.resume_path``, ...): the header, what it holds (``describe``), its checks as a
  command's output (``check_output``), its lock (:class:`RunLock`: one training at a time; a lock left by a process
  that died on this host is taken over) and export (``save_pretrained``: Hugging Face's layout, docs/sharing.md).
  :class:`RunKind`: each experiment registers the kind of its runs (:func:`register_kind`) when imported.
  :func:`check_output_folder` / :func:`check_output_file` check other outputs before any work is done.
* :func:`load_run` (``loading``) opens a run of any kind; the experiment says how to build its model.
* :func:`write_resume` / :func:`read_resume` (``resume``) -- the resume file of every trainer: tensors in one
  safetensors file, the rest as JSON in its metadata, never pickled; :func:`training_tensors` and
  :func:`restore_training` do the part every trainer shares (model, optimizer, random state). Resume files keep
  their format names (``onlstm-lm-resume/1``, ``onlstm-logic-resume-1``), so a file written before loads.
* :class:`StopRequest`, :func:`resolve_device`, :func:`setup_torch` (``device``) -- Ctrl-C / SIGTERM ask a
  trainer to stop after the current step and save; device names, thread count, denormals.
* :func:`progress_bar` (``progress``); :func:`pretrained_path`, :func:`model_card` (``pretrained``).
"""

from .device import StopRequest, resolve_device, setup_torch
from .dirs import (
    LOCK_FILE,
    RunDir,
    RunDirError,
    RunKind,
    RunLock,
    check_output_dir,
    check_output_file,
    check_output_folder,
    find_kind,
    kind_names,
    register_kind,
)
from .loading import LoadedRun, load_run
from .pretrained import model_card, pretrained_path
from .progress import progress_bar
from .resume import (
    optimizer_from_data,
    optimizer_to_data,
    read_resume,
    restore_training,
    training_tensors,
    write_resume,
)

__all__ = [
    "LOCK_FILE",
    "LoadedRun",
    "RunDir",
    "RunDirError",
    "RunKind",
    "RunLock",
    "StopRequest",
    "check_output_dir",
    "check_output_file",
    "check_output_folder",
    "find_kind",
    "kind_names",
    "load_run",
    "model_card",
    "optimizer_from_data",
    "optimizer_to_data",
    "pretrained_path",
    "progress_bar",
    "read_resume",
    "register_kind",
    "resolve_device",
    "restore_training",
    "setup_torch",
    "training_tensors",
    "write_resume",
]
