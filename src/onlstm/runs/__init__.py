"""The runtime every training shares, re-exported here (docs/design.md §4.6): run directories (``dirs``), the resume
file (``resume``), the training loop (``engine``), several processes (``dist``). Every trainer's resume file has one
format (``resume.RESUME_FORMAT``). What a run needs from below lives in its own module: device set-up and Ctrl-C
(``onlstm.device``), opening a run (``onlstm.saved``), the output checks (``onlstm.files``), the lock (``onlstm.lock``)."""

# each name imported `as` itself: re-exported (the project's way)
from ..saved import RunKind as RunKind
from ..saved import find_kind as find_kind
from ..saved import kind_names as kind_names
from ..saved import register_kind as register_kind
from .dirs import RunDir as RunDir
from .dirs import check_output_dir as check_output_dir
from .engine import TrainResult as TrainResult
from .resume import RESUME_FORMAT as RESUME_FORMAT
from .resume import not_a_run as not_a_run
from .resume import read_training as read_training
from .resume import restart_refusal as restart_refusal
from .resume import restore_training as restore_training
from .resume import resume_settings as resume_settings
from .resume import save_training as save_training
