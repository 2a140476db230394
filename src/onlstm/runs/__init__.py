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
  :func:`restore_training` do the part every trainer shares (model, optimizer, random state); :func:`resume_clash`
  says which settings a resumed run may not change. Resume files keep their format names
  (``onlstm-lm-resume/1``, ``onlstm-logic-resume-1``), so a file written before loads.
* :class:`StopRequest`, :func:`resolve_device`, :func:`setup_torch` (``device``) -- Ctrl-C / SIGTERM ask a
  trainer to stop after the current step and save; device names, thread count, denormals.
* :func:`progress_bar` (``progress``); :func:`pretrained_path`, :func:`model_card` (``pretrained``).
"""

# each name imported `as` itself: re-exported (the project's way, as in onlstm.checkpoint)
from .device import StopRequest as StopRequest
from .device import resolve_device as resolve_device
from .device import setup_torch as setup_torch
from .dirs import RunDir as RunDir
from .dirs import RunDirError as RunDirError
from .dirs import RunKind as RunKind
from .dirs import RunLock as RunLock
from .dirs import check_output_dir as check_output_dir
from .dirs import check_output_file as check_output_file
from .dirs import check_output_folder as check_output_folder
from .dirs import find_kind as find_kind
from .dirs import kind_names as kind_names
from .dirs import register_kind as register_kind
from .loading import LoadedRun as LoadedRun
from .loading import load_run as load_run
from .pretrained import model_card as model_card
from .pretrained import pretrained_path as pretrained_path
from .progress import progress_bar as progress_bar
from .resume import optimizer_from_data as optimizer_from_data
from .resume import optimizer_to_data as optimizer_to_data
from .resume import read_resume as read_resume
from .resume import restore_training as restore_training
from .resume import resume_clash as resume_clash
from .resume import training_tensors as training_tensors
from .resume import write_resume as write_resume
