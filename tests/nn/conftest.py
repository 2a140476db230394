"""Fixtures of the layer's tests."""

import pytest

from onlstm.nn import kernels


@pytest.fixture(scope="module")
def interpreter():
    """``impl='triton_interpret'``, the Triton kernel on CPU tensors in Triton's interpreter (tests/conftest.py sets
    ``TRITON_INTERPRET=1`` where no GPU is visible), registered for the module; skips where it cannot run."""
    pytest.importorskip("triton")
    from onlstm.nn.triton_kernel import register_interpreter_kernel

    name = register_interpreter_kernel()
    if kernels.load_kernel(name) is None:
        kernels.unregister_kernel(name)
        pytest.skip(f"Triton interpreter not usable here: {kernels.kernel_error(name)}")
    yield name
    kernels.unregister_kernel(name)
