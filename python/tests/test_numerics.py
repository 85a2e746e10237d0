"""Numerics of every op against the independent float64 ATen reference."""

from __future__ import annotations

import threading

import pytest
import torch

import my_ops
from my_ops import reference
from testing_utils import (
    APPROXIMATE,
    DEVICES,
    FLOAT_DTYPES,
    LAYOUTS,
    SHAPES,
    assert_close,
    make_input,
    run_this_file,
)

SHAPE_IDS = list(SHAPES)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --- identity_conv ---------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPE_IDS)
def test_identity_conv(device, dtype, layout, shape):
    x = make_input(SHAPES[shape], dtype, device, layout)
    out = my_ops.identity_conv(x)
    assert out.device == x.device and out.dtype == x.dtype and out.shape == x.shape
    # A copy, bit for bit, that never aliases the input.
    torch.testing.assert_close(out, reference.identity(x), rtol=0, atol=0)
    if x.numel():
        # NaN never occurs in the random input, so an output that shares any element with
        # x changes x here, whatever x holds.
        before = x.clone()
        out.fill_(float("nan"))
        assert torch.equal(x, before), "identity_conv returned a tensor that aliases its input"


# --- fused_bias_gelu -------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("approximate", APPROXIMATE)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPE_IDS)
def test_fused_bias_gelu(device, approximate, dtype, layout, shape):
    s = SHAPES[shape]
    x = make_input(s, dtype, device, layout, scale=3.0)
    bias = make_input((s[-1],), dtype, device, "sliced" if layout == "sliced" else "contiguous")
    out = my_ops.fused_bias_gelu(x, bias, approximate)
    assert out.device == x.device
    assert_close(out, reference.bias_gelu(x, bias, approximate), f"{shape} {layout}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_fused_bias_gelu_default_and_extremes(device, approximate):
    # Default approximate is "none"; large magnitudes must not produce inf/nan.
    x = torch.tensor([[-1e4, -30.0, -5.0, -1e-8, 0.0, 1e-8, 5.0, 30.0, 1e4]], device=device)
    bias = torch.zeros(x.shape[-1], device=device)
    out = my_ops.fused_bias_gelu(x, bias, approximate)
    assert torch.isfinite(out).all()
    assert_close(out, reference.bias_gelu(x, bias, approximate))
    if approximate == "none":
        assert_close(my_ops.fused_bias_gelu(x, bias), out)
        assert_close(torch.ops.my_ops.fused_bias_gelu(x, bias), out)
    # And the two modes really differ.
    x = torch.linspace(-3, 3, 64, dtype=torch.float64, device=device).reshape(1, -1)
    b = torch.zeros(64, dtype=torch.float64, device=device)
    none, tanh = (my_ops.fused_bias_gelu(x, b, a) for a in APPROXIMATE)
    assert (none - tanh).abs().max() > 1e-5


# --- fused_add_rms_norm ----------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPE_IDS)
def test_fused_add_rms_norm(device, dtype, layout, shape):
    s = SHAPES[shape]
    x = make_input(s, dtype, device, layout, scale=2.0)
    residual = make_input(s, dtype, device, "contiguous" if layout == "rows" else layout)
    weight = make_input((s[-1],), dtype, device, "sliced" if layout == "sliced" else "contiguous")
    eps = 1e-5
    y, h = my_ops.fused_add_rms_norm(x, residual, weight, eps)
    y_ref, h_ref = reference.add_rms_norm(x, residual, weight, eps)
    assert_close(h, h_ref, f"h: {shape} {layout}")
    assert_close(y, y_ref, f"y: {shape} {layout}")
    assert y.device == x.device and h.device == x.device
    if x.numel():
        assert y.data_ptr() != x.data_ptr() and h.data_ptr() != x.data_ptr()
        assert h.data_ptr() != residual.data_ptr()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_fused_add_rms_norm_eps_and_scale(device, dtype):
    # eps dominates tiny rows; huge rows must not overflow in fp16/bf16 (fp32 accumulation).
    n = 64
    weight = torch.linspace(0.5, 2.0, n, device=device).to(dtype)
    big = 200.0 if dtype == torch.float16 else 1e4  # 200**2 overflows fp16 unless fp32 acc.
    x = torch.stack(
        [
            torch.full((n,), 1e-3),
            torch.full((n,), big),
            torch.linspace(-big, big, n),
            torch.zeros(n),
        ]
    ).to(device=device, dtype=dtype)
    r = torch.zeros_like(x)
    for eps in (0.0, 1e-6, 1.0):
        y, h = my_ops.fused_add_rms_norm(x, r, weight, eps)
        y_ref, h_ref = reference.add_rms_norm(x, r, weight, eps)
        if eps == 0.0:
            # A zero row with eps == 0 is 0/0: only compare the other rows.
            y, y_ref = y[:3], y_ref[:3]
        assert torch.isfinite(y).all(), (eps, y)
        assert_close(y, y_ref, f"eps={eps}")
        assert_close(h, h_ref)
    # Default eps is 1e-6.
    y_default, _ = my_ops.fused_add_rms_norm(x, r, weight)
    assert_close(y_default, reference.add_rms_norm(x, r, weight, 1e-6)[0])


# --- threads ---------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_ops_from_eight_threads(device):
    n_threads, iters = 8, 10
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def worker(tid: int) -> None:
        try:
            g = torch.Generator().manual_seed(1000 + tid)
            barrier.wait()
            for i in range(iters):
                shape = (3 + tid, 17 + i)
                x = make_input(shape, torch.float32, device, LAYOUTS[i % 4], generator=g)
                r = make_input(shape, torch.float32, device, generator=g)
                w = make_input(shape[-1:], torch.float32, device, generator=g)
                approximate = APPROXIMATE[(tid + i) % 2]
                assert_close(my_ops.identity_conv(x), reference.identity(x))
                assert_close(
                    my_ops.fused_bias_gelu(x, w, approximate),
                    reference.bias_gelu(x, w, approximate),
                )
                y, h = my_ops.fused_add_rms_norm(x, r, w, 1e-6)
                y_ref, h_ref = reference.add_rms_norm(x, r, w, 1e-6)
                assert_close(y, y_ref)
                assert_close(h, h_ref)
                obj = torch.classes.my_ops.RMSNorm(w, 1e-6)
                assert_close(obj.forward(x), reference.rms_norm(x, w, 1e-6))
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    if errors:
        raise errors[0]


if __name__ == "__main__":
    run_this_file(__file__)
