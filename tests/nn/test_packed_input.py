"""Issue 35: a malformed ``PackedSequence`` (batch sizes that do not fit the data) is a one-line ``ValueError`` on
every path, as ``nn.LSTM`` gives, checked on the CPU before a kernel trusts the sizes: the C++ kernel wrote out of
bounds (glibc aborted the process) and the reference loop returned extra rows."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.nn.utils.rnn import PackedSequence

from onlstm.nn import ONLSTM
from onlstm.nn.functional import check_batch_sizes
from support import REPO

BAD = {
    "more rows than the data": ([3, 3, 3], "sum to 9 but the packed data has 6 rows"),
    "fewer rows than the data": ([3, 2], "sum to 5 but the packed data has 6 rows"),
    "increasing": ([1, 2, 3], "non-increasing"),
    "negative": ([7, -1], "positive"),
    "zero": ([6, 0], "positive"),
}


def packed(sizes: list[int]) -> PackedSequence:
    torch.manual_seed(0)
    return PackedSequence(torch.randn(6, 4), torch.tensor(sizes, dtype=torch.int64), None, None)


@pytest.mark.parametrize("impl", ["reference", "fused"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_batch_sizes_are_a_value_error(impl, case):
    sizes, message = BAD[case]
    layer = ONLSTM(4, 8, chunk_size=4, impl=impl)
    with pytest.raises(ValueError, match=message):
        layer(packed(sizes))
    layer(packed([3, 2, 1]))  # a good one still runs


@pytest.mark.parametrize("impl", ["reference", "fused"])
def test_packed_data_of_other_than_two_dimensions_is_a_value_error(impl):
    """A PackedSequence's data is (rows, input_size): one of (rows, 1, input_size) was a bare error from deep
    inside the step (a reshape or a matrix product), not one line saying what the data should be."""
    layer = ONLSTM(4, 8, chunk_size=4, impl=impl)
    good = packed([3, 2, 1])
    for data in (good.data[:, None], good.data[:, None, None]):
        with pytest.raises(ValueError, match=r"data must have 2 dimensions \(rows, input_size=4\), got shape"):
            layer(PackedSequence(data, good.batch_sizes, None, None))


def test_the_check_itself():
    check_batch_sizes(torch.tensor([2, 2, 1]), 5)
    with pytest.raises(ValueError, match="1-D integer"):
        check_batch_sizes(torch.tensor([2.0, 1.0]), 3)
    with pytest.raises(ValueError, match="empty"):
        check_batch_sizes(torch.tensor([], dtype=torch.int64), 0)
    with pytest.raises(ValueError, match="sum to 4"):
        check_batch_sizes([2, 2], 3)  # the reference takes a list


_CPP_CASE = """
import torch, sys
from torch.nn.utils.rnn import PackedSequence
from onlstm.nn import ONLSTM
from onlstm.nn.cpp_kernel import load_extension
if load_extension() is None:
    print("SKIP"); sys.exit(0)
layer = ONLSTM(4, 8, chunk_size=4, impl="cpp")
for sizes in ([3, 3, 3], [1, 2, 3], [7, -1]):
    try:
        layer(PackedSequence(torch.randn(6, 4), torch.tensor(sizes), None, None))
    except ValueError as exc:
        print("ValueError", str(exc).splitlines()[0])
"""


def test_the_cpp_kernel_refuses_them_without_crashing():
    # in a child process: before the check the kernel wrote out of bounds and glibc aborted the process (134)
    done = subprocess.run([sys.executable, "-c", _CPP_CASE], capture_output=True, text=True, cwd=REPO, timeout=600)
    if "SKIP" in done.stdout:
        pytest.skip("the C++ kernel cannot be built here")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("ValueError ONLSTM: batch_sizes") == 3, done.stdout
