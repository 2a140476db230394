"""The kernel registry: a kernel registered from outside is chosen by impl='auto' and by name where it
runs, an unavailable one falls back with one warning, and `kernel_status` reports each kernel."""

import warnings

import pytest
import torch

import onlstm
from onlstm.nn import kernels
from onlstm.nn.fused import FusedKernel


class CountingKernel(FusedKernel):
    """A toy kernel: the fused one, counting its calls (so a test can see that it ran)."""

    def __init__(self):
        self.forward_calls = self.backward_calls = 0

    def forward(self, *args):
        self.forward_calls += 1
        return FusedKernel.forward(*args)

    def backward(self, *args):
        self.backward_calls += 1
        return FusedKernel.backward(*args)


@pytest.fixture
def toy():
    """Register 'toy' for float64 on the CPU with the highest priority; unregistered afterwards."""
    kernel = CountingKernel()
    kernels.register_kernel(kernels.KernelSpec("toy", lambda: kernel, ("cpu",), (torch.float64,), priority=100))
    yield kernel
    kernels.unregister_kernel("toy")


def test_impl_choices_are_the_reserved_names_then_the_registry_by_priority():
    names = kernels.kernel_names()
    assert kernels.impl_choices() == ("auto", "reference", *names)
    priorities = [kernels._specs[name].priority for name in names]
    assert priorities == sorted(priorities, reverse=True)
    assert set(onlstm.nn.kernel_status()) == set(names)
    assert onlstm.nn.kernel_status()["fused"]["available"]  # the floor every CPU has


@pytest.mark.parametrize("name", kernels.kernel_names())
def test_every_registered_kernel_is_reported_and_matches_the_reference(name):
    """Each kernel of the registry (a new one is covered when its registration line is added): its status says
    whether it loads and why not; where it runs on the CPU in float64, it computes what the reference does."""
    status = onlstm.nn.kernel_status()[name]
    assert status["available"] == (kernels.load_kernel(name) is not None)
    assert (status["reason"] is None) == status["available"]
    if not (status["available"] and kernels._specs[name].supports(torch.device("cpu"), torch.float64)):
        return
    m = onlstm.ONLSTM(3, 6, chunk_size=2, impl=name).double()
    ref = onlstm.ONLSTM(3, 6, chunk_size=2, impl="reference").double()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    torch.testing.assert_close(m(x)[0], ref(x)[0])


@pytest.mark.cpp  # the CPU's choice under 'auto' is the C++ kernel
def test_registered_kernel_is_chosen_by_auto_where_it_runs(toy):
    m = onlstm.ONLSTM(3, 6, chunk_size=2).double()
    assert m.resolved_impl(torch.device("cpu"), torch.float64) == "toy"
    assert m.resolved_impl(torch.device("cpu"), torch.float32) == "cpp"  # toy: float64 only
    on_cuda = "triton" if kernels.load_kernel("triton") is not None else "reference"
    with warnings.catch_warnings():  # where triton cannot load, 'auto' warns once that it falls back: expected here
        warnings.simplefilter("ignore", RuntimeWarning)
        assert m.resolved_impl(torch.device("cuda"), torch.float64) == on_cuda  # toy: CPU only
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    out, _ = m(x)
    out.sum().backward()
    assert toy.forward_calls == 1 and toy.backward_calls == 1
    ref = onlstm.ONLSTM(3, 6, chunk_size=2, impl="reference").double()
    ref.load_state_dict(m.state_dict())
    torch.testing.assert_close(out, ref(x)[0])


def test_registered_kernel_by_name(toy):
    m = onlstm.ONLSTM(3, 6, chunk_size=2, impl="toy").double()
    m(torch.randn(4, 1, 3, dtype=torch.float64))
    assert toy.forward_calls == 1
    assert m.resolved_impl(torch.device("cpu"), torch.float32) == "reference"  # not a dtype it runs
    assert "toy" in kernels.impl_choices()
    kernels.unregister_kernel("toy")
    with pytest.raises(ValueError, match="impl must be one of"):
        onlstm.ONLSTM(3, 6, chunk_size=2, impl="toy")


@pytest.mark.cpp  # the CPU's choice under 'auto' is the C++ kernel
def test_a_kernel_for_another_device_is_chosen_there():
    # above the built-in Triton kernel (priority 30), so it wins on CUDA whether or not Triton is there
    kernels.register_kernel(kernels.KernelSpec("gpu_toy", CountingKernel, ("cuda",), (torch.float32,), priority=40))
    try:
        m = onlstm.ONLSTM(3, 6, chunk_size=2)
        assert m.resolved_impl(torch.device("cuda"), torch.float32) == "gpu_toy"
        assert m.resolved_impl(torch.device("cuda"), torch.float16) == "reference"
        assert m.resolved_impl(torch.device("cpu"), torch.float32) == "cpp"
    finally:
        kernels.unregister_kernel("gpu_toy")


@pytest.mark.cpp  # the CPU's choice under 'auto' is the C++ kernel
def test_unavailable_kernel_falls_back_with_one_warning():
    def load():
        raise kernels.KernelUnavailable("needs a driver this machine lacks")

    kernels.register_kernel(
        kernels.KernelSpec("broken", load, ("cpu",), (torch.float64,), priority=100, label="broken test kernel")
    )
    try:
        m = onlstm.ONLSTM(3, 6, chunk_size=2).double()
        x = torch.randn(4, 2, 3, dtype=torch.float64)
        with pytest.warns(
            RuntimeWarning,
            match=r"broken test kernel unavailable \(needs a driver this machine "
            r"lacks\); impl='auto' uses 'cpp' instead",
        ):
            m(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the second call must not warn again
            m(x)
            assert m.resolved_impl(torch.device("cpu"), torch.float64) == "cpp"
        assert kernels.kernel_status()["broken"] == {"available": False, "reason": "needs a driver this machine lacks"}
        m.impl = "broken"
        with pytest.raises(
            RuntimeError, match="impl='broken' but the broken test kernel is unavailable: needs a driver"
        ):
            m(x)
    finally:
        kernels.unregister_kernel("broken")


def test_registering_bad_names_is_refused():
    spec = kernels.KernelSpec("fused", FusedKernel, ("cpu",), (torch.float64,))
    with pytest.raises(ValueError, match="already registered; pass replace=True"):
        kernels.register_kernel(spec)
    for name in ("auto", "reference", "not a name"):
        with pytest.raises(ValueError, match=f"cannot register a kernel named '{name}'"):
            kernels.register_kernel(kernels.KernelSpec(name, FusedKernel, ("cpu",), (torch.float64,)))


def test_an_unregistered_kernel_name_is_a_key_error_not_a_failed_load():
    with pytest.raises(KeyError):
        kernels.load_kernel("no-such-kernel")
    assert kernels.kernel_error("no-such-kernel") is None  # nothing recorded as a load failure


def test_kernel_records_unpack_in_field_order():
    import dataclasses

    fields = [f.name for f in dataclasses.fields(kernels.KernelGrads)]
    grads = kernels.KernelGrads(*[torch.full((1,), float(i)) for i in range(len(fields))])
    assert [float(t) for t in grads] == [float(i) for i in range(len(fields))]


def test_packed_row_helpers_agree_with_torch_packing():
    """``last_rows`` and ``reversed_rows`` checked against torch's own packing of tagged values: every (t, b) holds
    1000 t + b, so a packed row's value says which step of which sequence it is."""
    from torch.nn.utils.rnn import pack_padded_sequence

    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        batch = int(torch.randint(1, 8, (1,), generator=gen))
        lengths = torch.randint(1, 10, (batch,), generator=gen).sort(descending=True).values
        steps = int(lengths[0])
        tags = (1000 * torch.arange(steps).unsqueeze(1) + torch.arange(batch)).double()  # (T, B)
        packed = pack_padded_sequence(tags, lengths)
        bs = packed.batch_sizes.tolist()
        assert kernels.sequence_lengths(bs).tolist() == lengths.tolist()
        assert packed.data[kernels.last_rows(bs)].tolist() == [1000 * (n - 1) + b for b, n in enumerate(lengths)]
        backwards = tags.clone()
        for b, n in enumerate(lengths.tolist()):
            backwards[:n, b] = tags[:n, b].flip(0)  # each sequence read backwards within its own length
        assert torch.equal(packed.data[kernels.reversed_rows(bs)], pack_padded_sequence(backwards, lengths).data)


@pytest.mark.cpp  # the CPU's choice under 'auto' is the C++ kernel
def test_a_kernels_first_use_draws_no_random_numbers():
    """A kernel's first use (loading, probing its backend, its self-check) must leave torch's generator alone: it
    ran at::randn once, so a resumed run (first use after the saved generator state is restored) drew different
    dropout masks from an uninterrupted one. In a fresh process, since the kernel loads once per process."""
    import subprocess
    import sys

    code = (
        "import torch, onlstm\n"
        "torch.manual_seed(0); before = torch.get_rng_state()\n"
        "m = onlstm.ONLSTM(4, 8, chunk_size=2); torch.manual_seed(0)\n"
        "for impl in ('cpp', 'fused'):\n"
        "    m.impl = impl\n"
        "    with torch.no_grad(): m(torch.ones(3, 2, 4))\n"
        "m.impl = 'cpp'\n"  # the first call under bfloat16 autocast times its products
        "with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16): m(torch.ones(3, 2, 4))\n"
        "assert torch.equal(torch.get_rng_state(), before), 'a first use drew random numbers'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize(
    "which, shape, named",
    [(1, (18, 3), "w_ih"), (2, (20, 5), "w_hh"), (3, (18,), "bias"), (5, (2, 6), "c0"), (0, (5, 3, 1), "x must")],
)
def test_fused_layer_refuses_tensors_that_disagree_before_any_kernel_reads_them(toy, which, shape, named):
    """The kernels index a layer's tensors by its sizes without looking (a wrong one read past a buffer: the
    interpreted Triton kernel aborted the process); ``fused_layer`` names the tensor and the shape it needs."""
    g = torch.Generator().manual_seed(0)
    draw = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    args = [draw(5, 3), draw(20, 3), draw(20, 4), draw(20), draw(2, 4), draw(2, 4)]  # hidden 4, chunks of 2
    assert kernels.fused_layer(*args, torch.tensor([2, 2, 1]), 2, False, toy)[0].shape == (5, 4)
    args[which] = draw(*shape)
    with pytest.raises(ValueError, match=named) as err:
        kernels.fused_layer(*args, torch.tensor([2, 2, 1]), 2, False, toy)
    assert "\n" not in str(err.value) and toy.forward_calls == 1
