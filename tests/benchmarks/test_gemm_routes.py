"""``benchmarks/gemm_routes.py``: every product of a layer call on every route, checked against the plain product
(a route that computed something else would make its rate meaningless), and the script's table on a tiny shape."""

import pytest
import torch

import gemm_routes


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")
def test_each_route_of_a_product_computes_the_same_product():
    torch.manual_seed(0)
    results: dict[str, list] = {}
    for product, route, flops, fn in gemm_routes.product_routes(3, 4, 5, 6, 3):
        assert flops > 0
        out = fn()
        if product == "weight gradient" and route == "mm blocks":
            continue  # writes its result in place (compared through "mm" and "oneDNN ip")
        if isinstance(out, tuple):  # oneDNN's backward: (weight gradient, bias gradient), oneDNN tensors
            out = out[0].to_dense() if out[0].is_mkldnn else out[0]
        if isinstance(out, list):  # per step (the same product T times) or per block of rows
            out = out[0] if product.startswith("step") else torch.cat(out)
        results.setdefault(product, []).append(out)
    assert set(results) == {"step forward", "step backward", "input projection", "d_x", "weight gradient"}
    for product, outs in results.items():
        for other in outs[1:]:
            torch.testing.assert_close(other, outs[0], rtol=1e-4, atol=1e-5, msg=product)


def test_the_blocked_routes_cover_every_row_of_a_long_sequence(monkeypatch):
    """Over 1,024 rows the products run in blocks: each block must read its own rows (one shape holds 2,500)."""
    monkeypatch.setattr(gemm_routes, "BLOCK", 1000)  # three blocks of 12 x 210 rows, the last short
    torch.manual_seed(0)
    results: dict[str, list] = {}
    for product, route, _, fn in gemm_routes.product_routes(210, 12, 5, 6, 3):
        if product.startswith("step") or route == "mm blocks":
            continue
        out = fn()
        if isinstance(out, tuple):
            out = out[0].to_dense() if out[0].is_mkldnn else out[0]
        results.setdefault(product, []).append(torch.cat(out) if isinstance(out, list) else out)
    for product, outs in results.items():
        assert len(outs) >= 2, product
        for other in outs[1:]:
            torch.testing.assert_close(other, outs[0], rtol=1e-4, atol=1e-4, msg=product)


def test_the_table_names_every_product_and_both_layers(capsys):
    assert gemm_routes.main(["--shapes", "3x4x5x6x3", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    for word in ("step forward", "weight gradient", "nn.LSTM forward+backward", "ON-LSTM forward"):
        assert word in out


@pytest.mark.cpp
def test_in_situ_puts_every_operator_of_a_call_in_one_kind():
    rows = gemm_routes.in_situ(3, 4, 5, 6, 3, repeats=1)
    assert [kind for kind, _ in rows] == [kind for kind, _ in gemm_routes.IN_SITU_KINDS]
    assert all(s >= 0 for _, s in rows) and sum(s for _, s in rows) > 0
    own = dict(rows)[gemm_routes.OWN]
    assert own > 0  # the autograd function's own time: the element-wise work is counted, not lost in "the rest"


def test_in_situ_kinds_read_the_operator_names_the_kernel_calls():
    kind = lambda op: next(k for k, test in gemm_routes.IN_SITU_KINDS if test(op))
    assert kind("mkldnn::_linear_pointwise").startswith("products")
    assert kind("aten::addmm_") == kind("aten::mm") == "products: ATen GEMM (MKL)"
    assert kind("_KernelFunctionBackward") == kind("onlstm_cpu_d054bcaf0213::backward") == gemm_routes.OWN
    assert kind("aten::view") == "the rest (autograd, Python, views)"


@pytest.mark.parametrize("bad", ["70,20,400,650,10", "70x20x400", "70x0x400x650x10"])
def test_a_bad_shape_is_one_line_and_exit_2(bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        gemm_routes.main(["--shapes", bad])
    assert exit_.value.code == 2 and "TxBxINxHxC" in capsys.readouterr().err


def test_mkl_packed_steps_are_a_route_where_torch_exports_them_and_left_out_where_not(monkeypatch):
    """MKL's packed GEMM is weighed beside the others (issue #46); a torch without it (forced) simply lacks the row."""
    routes = lambda: {(p, r) for p, r, _, _ in gemm_routes.product_routes(3, 4, 5, 6, 3)}
    if gemm_routes.MklPacked.find() is not None:
        assert {("step forward", "mkl packed"), ("step backward", "mkl packed")} <= routes()
    monkeypatch.setattr(gemm_routes.MklPacked, "find", classmethod(lambda cls: None))
    assert not any(r == "mkl packed" for _, r in routes())
