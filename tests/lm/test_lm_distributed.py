"""Two CPU processes (torchrun, gloo) against the single-process run defined to be equivalent.

Equivalence: N processes with a global batch of B columns, each process owning B/N consecutive
columns, compute what ONE process computes with all B columns and the same seed -- same data, same
BPTT lengths, same dropout masks (every process keeps the same random state; locked-dropout masks are
drawn for all B columns and sliced; embedding and DropConnect masks are shared over the batch anyway),
the same mean loss (DDP averages the per-process means of equal shares) and so the same clipped
gradient and update. The two differ only by floating-point reduction order, so the weights must agree
to ~1e-6 after training, while a different seed moves them by orders of magnitude more.

Both sides run one thread (OMP_NUM_THREADS=1 for torchrun, tiny.yaml's ``threads: 1`` in this process).
The rounding differences grow along the trajectory, so the bound is a margin: measured at most 5.1e-7 at
step 40 and 4.8e-7 at the end with ATen's AVX512, AVX2 and plain (ATEN_CPU_CAPABILITY=default) kernels
(issue 20), against 1e-4 here; a different seed moves the weights by 0.9.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from onlstm.checkpoint import read_json
from onlstm.lm.config import explicit_settings
from onlstm.lm.train import train
from support import REPO, TINY_LM, quiet, with_train, write_corpus

TINY = TINY_LM
ROOT = REPO

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo is not available"
)


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.mark.slow  # starts torchrun processes
def test_two_processes_equal_one_process_with_the_whole_batch(tmp_path):
    data = write_corpus(tmp_path / "data", seed=3)
    flags = ["--asgd-start-epoch", "2", "--momentum", "0.5"]
    stop = 40  # epoch 1 has 33 steps: stop in epoch 2, while averaging
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "onlstm",
        "lm",
        "train",
        "--config",
        str(TINY),
        "--data-dir",
        str(data),
        "--out",
        str(tmp_path / "two"),
        "--max-steps",
        str(stop),
        *flags,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "stopped by max_steps after 40 steps" in proc.stdout

    s = explicit_settings(TINY, {"train": {"asgd_start_epoch": 2, "momentum": 0.5}})
    one = train(tmp_path / "one", data, with_train(s, max_steps=stop), log=quiet)
    assert one.progress.epoch == 1 and one.progress.pos > 0 and one.progress.task.averaging  # in epoch 2

    # the checkpoints at step 40: weights, averaged weights, momentum buffers, the carried state of
    # all 4 columns (gathered from both processes) and the random state
    two_ckpt, one_ckpt = (load_file(str(tmp_path / r / "resume.safetensors")) for r in ("two", "one"))
    assert torch.equal(two_ckpt["rng.torch"], one_ckpt["rng.torch"])
    assert two_ckpt["hidden.0.0"].shape[1] == 4
    assert max_diff(two_ckpt, one_ckpt) < 1e-4
    assert two_ckpt.keys() == one_ckpt.keys()

    # both resumed in one process to the end: the checkpoint does not depend on the process count
    train(tmp_path / "two", data, with_train(s, max_steps=None), resume=True, log=quiet)
    train(tmp_path / "one", data, with_train(s, max_steps=None), resume=True, log=quiet)
    final = [load_file(str(tmp_path / r / "model.last.safetensors")) for r in ("two", "one")]
    diff = max_diff(*final)
    assert diff < 1e-4

    other = train(tmp_path / "seed", data, explicit_settings(TINY, {"train": {**s["train"], "seed": 8}}), log=quiet)
    assert other.status == "finished"
    moved = max_diff(final[1], load_file(str(tmp_path / "seed" / "model.last.safetensors")))
    assert moved > 1000 * max(diff, 1e-7)  # the comparison is sensitive

    r2, r1 = (read_json(tmp_path / r / "results.json") for r in ("two", "one"))
    assert abs(r2["test"]["loss"] - r1["test"]["loss"]) < 1e-5


@pytest.mark.skipif(sys.platform == "win32", reason="ulimit -f: a POSIX shell's file-size limit")
def test_a_write_the_disk_refuses_stops_every_process_with_one_line(tmp_path):
    """Only the first process writes the run's files. Under ``ulimit -f 8`` (8 KiB: config.json and the
    vocabulary fit, the tiny model's ~32 KB weights do not) its first save of the best weights fails; every
    process then ends with one line, none with a traceback from a collective its peer has left."""
    data = write_corpus(tmp_path / "data", seed=3)
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "onlstm"]
    run += ["lm", "train", "--config", str(TINY), "--data-dir", str(data), "--out", str(tmp_path / "two")]
    script = "ulimit -f 8 && exec " + " ".join(f"'{word}'" for word in [*run, "--max-steps", "40"])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    err = proc.stderr
    assert proc.returncode != 0
    assert "cannot write" in err and "model.best.safetensors" in err and "EFBIG" in err, err[-3000:]
    assert "process 1: the first process could not write the run's files" in err, err[-3000:]
    assert "[rank1]" not in err and "[rank0]" not in err, err[-3000:]  # torchrun's prefix of a worker's traceback
    assert not (tmp_path / "two" / "model.best.safetensors").exists()
