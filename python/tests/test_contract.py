"""Operator contract: opcheck, gradcheck, torch.compile and torch.export."""

from __future__ import annotations

import warnings

import pytest
import torch

import my_ops
from my_ops import reference
from testing_utils import (
    APPROXIMATE,
    DEVICES,
    FLOAT_DTYPES,
    LAYOUTS,
    assert_close,
    make_input,
    run_this_file,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _sample_inputs(device: str):
    """(op, args) pairs covering layouts, dtypes and requires_grad for opcheck."""
    samples = []
    for dtype, layout, rg in (
        (torch.float32, "contiguous", True),
        (torch.float32, "transposed", False),
        (torch.float64, "sliced", True),
        (torch.bfloat16, "contiguous", False),
    ):
        x = make_input((4, 9), dtype, device, layout)
        samples.append((torch.ops.my_ops.identity_conv_op.default, (x,)))
        x = x.detach().requires_grad_(rg)
        b = make_input((9,), dtype, device).requires_grad_(rg)
        r = make_input((4, 9), dtype, device, layout).detach().requires_grad_(rg)
        w = make_input((9,), dtype, device).requires_grad_(rg)
        for approximate in APPROXIMATE:
            samples.append((torch.ops.my_ops.fused_bias_gelu.default, (x, b, approximate)))
        samples.append((torch.ops.my_ops.fused_add_rms_norm.default, (x, r, w, 1e-5)))
    # Empty and 3-D inputs.
    x = make_input((0, 5), torch.float32, device)
    samples.append((torch.ops.my_ops.identity_conv_op.default, (x,)))
    samples.append(
        (torch.ops.my_ops.fused_bias_gelu.default, (x, make_input((5,), torch.float32, device)))
    )
    x3 = make_input((2, 3, 5), torch.float32, device, "sliced")
    w = make_input((5,), torch.float32, device)
    samples.append(
        (torch.ops.my_ops.fused_add_rms_norm.default, (x3, torch.randn_like(x3), w, 1e-6))
    )
    return samples


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    samples = _sample_inputs(device)
    ops_seen = set()
    for op, args in samples:
        ops_seen.add(op)
        result = torch.library.opcheck(op, args)
        failures = {k: v for k, v in result.items() if v != "SUCCESS"}
        assert not failures, f"{op} {[(a.shape, a.dtype) for a in args if torch.is_tensor(a)]}"
    assert len(ops_seen) == 3


def _requires_grad_samples(device: str) -> dict[str, list[tuple]]:
    """Every op's arguments as training code passes them: every tensor requires grad."""
    samples: dict[str, list[tuple]] = {
        "identity_conv_op": [],
        "fused_bias_gelu": [],
        "fused_add_rms_norm": [],
    }
    for dtype, layout in (
        (torch.float32, "contiguous"),
        (torch.float32, "transposed"),
        (torch.float64, "sliced"),
        (torch.float64, "rows"),
    ):

        def leaf(shape, layout=layout, dtype=dtype):
            return make_input(shape, dtype, device, layout).detach().requires_grad_()

        x, r = leaf((4, 9)), leaf((4, 9))
        b, w = leaf((9,), "contiguous"), leaf((9,), "contiguous")
        samples["identity_conv_op"].append((x,))
        for approximate in APPROXIMATE:
            samples["fused_bias_gelu"].append((x, b, approximate))
        samples["fused_add_rms_norm"].append((x, r, w, 1e-5))
    x3 = make_input((2, 3, 5), torch.float32, device).requires_grad_()
    samples["identity_conv_op"].append((x3,))
    return samples


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_name", ["identity_conv_op", "fused_bias_gelu", "fused_add_rms_norm"])
def test_opcheck_requires_grad(device, op_name):
    op = getattr(torch.ops.my_ops, op_name).default
    for args in _requires_grad_samples(device)[op_name]:
        result = torch.library.opcheck(op, args)
        failures = {k: v for k, v in result.items() if v != "SUCCESS"}
        assert not failures, f"{op} {[(a.shape, a.dtype) for a in args if torch.is_tensor(a)]}"


def _autograd_fallback_warnings(caught) -> list[str]:
    # torch's fallback for an op without an autograd kernel warns and may be wrong.
    messages = [str(w.message) for w in caught]
    return [m for m in messages if "autograd kernel was not registered" in m]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck_identity_conv(device, layout):
    x = make_input((3, 7), torch.float64, device, layout).detach().requires_grad_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.autograd.gradcheck(my_ops.identity_conv, (x,))
        assert torch.autograd.gradgradcheck(my_ops.identity_conv, (x,))
    assert not _autograd_fallback_warnings(caught)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_identity_conv_backward_matches_reference(device, dtype):
    x = make_input((5, 33), dtype, device, "transposed").detach().requires_grad_()
    gy = make_input((5, 33), dtype, device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (gx,) = torch.autograd.grad(my_ops.identity_conv(x), x, gy)
    assert not _autograd_fallback_warnings(caught)
    x64 = x.detach().double().requires_grad_()
    (g_ref,) = torch.autograd.grad(reference.identity(x64), x64, gy.double())
    # The gradient of a copy is the incoming gradient itself: exact in every dtype.
    assert gx.dtype == dtype and gx.shape == x.shape
    torch.testing.assert_close(gx, g_ref.to(dtype), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_gradcheck_fused_bias_gelu(device, approximate):
    x = make_input((3, 7), torch.float64, device, "transposed").requires_grad_()
    bias = make_input((7,), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, b: my_ops.fused_bias_gelu(x, b, approximate), (x, bias)
    )
    # Second call through a 3-D input: bias grad sums over all leading dims.
    x3 = make_input((2, 3, 4), torch.float64, device).requires_grad_()
    b3 = make_input((4,), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, b: my_ops.fused_bias_gelu(x, b, approximate), (x3, b3)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_fused_add_rms_norm(device):
    x = make_input((3, 8), torch.float64, device).requires_grad_()
    r = make_input((3, 8), torch.float64, device, "sliced").requires_grad_()
    w = make_input((8,), torch.float64, device).requires_grad_()

    # Both outputs carry gradient.
    assert torch.autograd.gradcheck(
        lambda x, r, w: my_ops.fused_add_rms_norm(x, r, w, 1e-5), (x, r, w)
    )
    # Only the normalized output used (grad of h is None).
    assert torch.autograd.gradcheck(
        lambda x, r, w: my_ops.fused_add_rms_norm(x, r, w, 1e-5)[0], (x, r, w)
    )
    # Only h used.
    assert torch.autograd.gradcheck(
        lambda x, r, w: my_ops.fused_add_rms_norm(x, r, w, 1e-5)[1], (x, r, w)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_backward_matches_reference_autograd(device, dtype):
    # Gradients in low precision against autograd through the float64 reference.
    x = make_input((5, 33), dtype, device).requires_grad_()
    r = make_input((5, 33), dtype, device).requires_grad_()
    w = make_input((33,), dtype, device).requires_grad_()
    gy, gh = torch.randn(5, 33, device=device), torch.randn(5, 33, device=device)

    y, h = my_ops.fused_add_rms_norm(x, r, w, 1e-6)
    grads = torch.autograd.grad((y, h), (x, r, w), (gy.to(dtype), gh.to(dtype)))

    x64, r64, w64 = (t.detach().double().requires_grad_() for t in (x, r, w))
    h64 = x64 + r64
    y64 = h64 * torch.rsqrt(h64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64
    ref = torch.autograd.grad((y64, h64), (x64, r64, w64), (gy.double(), gh.double()))
    for g, g_ref in zip(grads, ref, strict=True):
        assert g.dtype == dtype
        assert_close(g, g_ref.to(dtype))

    b = make_input((33,), dtype, device).requires_grad_()
    out = my_ops.fused_bias_gelu(x, b, "tanh")
    gx, gb = torch.autograd.grad(out, (x, b), gy.to(dtype))
    x64, b64 = x.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    ref = torch.autograd.grad(
        torch.nn.functional.gelu(x64 + b64, approximate="tanh"), (x64, b64), gy.double()
    )
    assert_close(gx, ref[0].to(dtype))
    assert_close(gb, ref[1].to(dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (7,), (2, 3, 5)], ids=str)
def test_backward_edge_shapes(device, shape):
    # Empty, zero-width, 1-D and 3-D inputs: gradients have the input shapes and match
    # autograd through the reference.
    x = make_input(shape, torch.float64, device).requires_grad_()
    r = make_input(shape, torch.float64, device).requires_grad_()
    v = make_input(shape[-1:], torch.float64, device).requires_grad_()
    gy = torch.randn(shape, dtype=torch.float64, device=device)

    got = torch.autograd.grad(my_ops.fused_bias_gelu(x, v), (x, v), gy)
    ref = torch.autograd.grad(reference.bias_gelu(x, v), (x, v), gy)
    for g, e in zip(got, ref, strict=True):
        assert_close(g, e)

    y, h = my_ops.fused_add_rms_norm(x, r, v, 1e-6)
    got = torch.autograd.grad((y, h), (x, r, v), (gy, gy))
    y_ref, h_ref = reference.add_rms_norm(x, r, v, 1e-6)
    ref = torch.autograd.grad((y_ref, h_ref), (x, r, v), (gy, gy))
    for g, e in zip(got, ref, strict=True):
        assert_close(g, e)


def _composite(x, bias, residual, weight):
    a = my_ops.identity_conv(x)
    g = my_ops.fused_bias_gelu(a, bias, "tanh")
    y, h = my_ops.fused_add_rms_norm(g, residual, weight, 1e-5)
    return y * 2 + h, my_ops.fused_bias_gelu(h, bias)


def _composite_ref(x, bias, residual, weight):
    g = reference.bias_gelu(x, bias, "tanh")
    y, h = reference.add_rms_norm(g, residual, weight, 1e-5)
    return y * 2 + h, reference.bias_gelu(h, bias)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph(device, backend):
    torch._dynamo.reset()
    x = make_input((6, 40), torch.float32, device)
    bias = make_input((40,), torch.float32, device)
    residual = make_input((6, 40), torch.float32, device)
    weight = make_input((40,), torch.float32, device)
    compiled = torch.compile(_composite, fullgraph=True, backend=backend)
    got = compiled(x, bias, residual, weight)
    eager = _composite(x, bias, residual, weight)
    expected = _composite_ref(x, bias, residual, weight)
    for g, e, r in zip(got, eager, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
        assert_close(g, r)
    # No graph breaks (fullgraph would have raised) and a single graph was captured.
    explanation = torch._dynamo.explain(_composite)(x, bias, residual, weight)
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1


@pytest.mark.parametrize("device", DEVICES)
def test_compile_backward(device):
    torch._dynamo.reset()
    x = make_input((4, 16), torch.float32, device).requires_grad_()
    b = make_input((16,), torch.float32, device).requires_grad_()
    r = make_input((4, 16), torch.float32, device).requires_grad_()
    w = make_input((16,), torch.float32, device).requires_grad_()

    def loss_fn(x, b, r, w):
        g = my_ops.fused_bias_gelu(my_ops.identity_conv(x), b)
        y, h = my_ops.fused_add_rms_norm(g, r, w)
        return (y * h).sum()

    compiled = torch.compile(loss_fn, fullgraph=True, backend="aot_eager")
    g_c = torch.autograd.grad(compiled(x, b, r, w), (x, b, r, w))
    g_e = torch.autograd.grad(loss_fn(x, b, r, w), (x, b, r, w))
    for a, e in zip(g_c, g_e, strict=True):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_dynamic_shapes(device):
    torch._dynamo.reset()
    compiled = torch.compile(my_ops.fused_bias_gelu, fullgraph=True, dynamic=True, backend="eager")
    for rows, cols in ((2, 8), (5, 8), (3, 12)):
        x = make_input((rows, cols), torch.float32, device)
        b = make_input((cols,), torch.float32, device)
        assert_close(compiled(x, b), reference.bias_gelu(x, b))


def test_export_ops():
    class M(torch.nn.Module):
        def forward(self, x, bias, residual, weight):
            return _composite(x, bias, residual, weight)

    args = (torch.randn(3, 8), torch.randn(8), torch.randn(3, 8), torch.randn(8))
    ep = torch.export.export(M(), args, strict=False)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {
        "my_ops.identity_conv_op.default",
        "my_ops.fused_bias_gelu.default",
        "my_ops.fused_add_rms_norm.default",
    } <= targets, targets
    for g, e in zip(ep.module()(*args), _composite_ref(*args), strict=True):
        assert_close(g, e)


if __name__ == "__main__":
    run_this_file(__file__)
