"""The runtime every experiment shares (one module per concern, re-exported here): opening a saved run, resume state, Ctrl-C, device and threads.

* :func:`load_run` (``loading``) opens a run directory (``config.json`` + vocabulary + ``model.<tag>.safetensors``)
  for any kind of model; the experiment says how to build its model from the saved config, so this
  module imports no experiment.
* :func:`write_resume` / :func:`read_resume` (``resume``) -- the resume file of both trainers: tensors (weights,
  optimizer state, random state, anything else a trainer carries) in one safetensors file, the rest as
  JSON in its metadata, written atomically, never pickled. :func:`training_tensors` and
  :func:`restore_training` do the part both trainers share (model, optimizer, random state).
* :class:`StopRequest` (``device``) -- Ctrl-C / SIGTERM ask a trainer to stop after the current step and save.
* :func:`resolve_device` and :func:`setup_torch` -- device names, thread count, denormals.
* :func:`progress_bar` (``progress``) -- the one progress bar, shown on a terminal only.
* :func:`check_output_dir` / :func:`check_output_file` (``dirs``) -- an output path is checked (not a file where a
  directory goes, writable, not holding another run unless resuming) before any work is done.
* :class:`RunLock` -- one training at a time in a run directory (``onlstm.lock`` with the owner's pid and
  host; a lock left by a process that died on this host is detected, explained and taken over).
* :func:`save_pretrained` / :func:`pretrained_path` (``pretrained``) -- a model to share, in Hugging Face's layout
  (``config.json``, ``model.safetensors``, ``vocab.json``, a ``README.md`` model card); :func:`load_run`
  reads that layout as well as a run directory (docs/sharing.md).

Resume files keep the format names they had before this module existed (``onlstm-lm-resume/1``,
``onlstm-logic-resume-1``) and the same layout, so a file written by an older version loads.
"""

from .device import StopRequest, resolve_device, setup_torch
from .dirs import (
    LOCK_FILE,
    RunDirError,
    RunLock,
    check_output_dir,
    check_output_file,
    check_output_folder,
    describe_run,
    run_kind,
)
from .loading import LoadedRun, load_run
from .pretrained import model_card, pretrained_path, save_pretrained
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
    "RunDirError",
    "RunLock",
    "StopRequest",
    "check_output_dir",
    "check_output_file",
    "check_output_folder",
    "describe_run",
    "load_run",
    "model_card",
    "optimizer_from_data",
    "optimizer_to_data",
    "pretrained_path",
    "progress_bar",
    "read_resume",
    "resolve_device",
    "restore_training",
    "run_kind",
    "save_pretrained",
    "setup_torch",
    "training_tensors",
    "write_resume",
]
