"""Property tests: random shapes, strides and dtypes against the float64 reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import my_ops
from my_ops import reference
from testing_utils import (
    APPROXIMATE,
    DEVICES,
    FLOAT_DTYPES,
    assert_close,
    hypothesis_settings,
    run_this_file,
)


@st.composite
def strided_tensors(draw, device: str, min_dims: int = 1, max_dims: int = 4):
    """A float tensor whose memory layout is a random permutation/slice of its storage.

    Returns ``(x, dtype, seed)``; ``x`` may be non-contiguous, transposed or empty.
    """
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    ndim = draw(st.integers(min_dims, max_dims))
    shape = draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim))
    if draw(st.booleans()):
        shape[-1] = draw(st.integers(1, 300))  # a wide last dim for vectorized paths
    steps = draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim))
    perm = draw(st.permutations(range(ndim)))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    # Allocate the storage in permuted order, then slice with steps and permute back so that
    # the logical shape is `shape` but strides are arbitrary.
    storage_shape = [shape[p] * steps[p] for p in perm]
    base = torch.randn(storage_shape, generator=g, dtype=torch.float64) * 2
    base = base.to(device=device, dtype=dtype)
    sliced = base[tuple(slice(None, None, steps[p]) for p in perm)]
    inverse = [perm.index(i) for i in range(ndim)]
    x = sliced.permute(inverse)
    assert list(x.shape) == shape
    return x, g


def _like(x: torch.Tensor, g: torch.Generator, shape=None) -> torch.Tensor:
    shape = x.shape if shape is None else shape
    return torch.randn(shape, generator=g, dtype=torch.float64).to(device=x.device, dtype=x.dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_identity_conv_property(device):
    @hypothesis_settings(max_examples=40)
    @given(data=strided_tensors(device))
    def check(data):
        x, _ = data
        out = my_ops.identity_conv(x)
        assert out.shape == x.shape and out.dtype == x.dtype
        torch.testing.assert_close(out, x, rtol=0, atol=0)

    check()


@pytest.mark.parametrize("device", DEVICES)
def test_fused_bias_gelu_property(device):
    @hypothesis_settings(max_examples=50)
    @given(data=strided_tensors(device), approximate=st.sampled_from(APPROXIMATE))
    def check(data, approximate):
        x, g = data
        bias = _like(x, g, (x.shape[-1],))
        out = my_ops.fused_bias_gelu(x, bias, approximate)
        assert out.is_contiguous()
        assert_close(out, reference.bias_gelu(x, bias, approximate))

    check()


@pytest.mark.parametrize("device", DEVICES)
def test_fused_add_rms_norm_property(device):
    @hypothesis_settings(max_examples=50)
    @given(
        data=strided_tensors(device),
        residual_transposed=st.booleans(),
        eps=st.sampled_from([0.0, 1e-6, 1e-3, 1.0]),
    )
    def check(data, residual_transposed, eps):
        x, g = data
        residual = _like(x, g)
        if residual_transposed and x.dim() >= 2:
            residual = residual.transpose(0, -1).contiguous().transpose(0, -1)
        weight = _like(x, g, (x.shape[-1],))
        y, h = my_ops.fused_add_rms_norm(x, residual, weight, eps)
        y_ref, h_ref = reference.add_rms_norm(x, residual, weight, eps)
        assert_close(h, h_ref)
        if eps == 0.0:
            # Rows that are all zero are 0/0 with eps == 0; compare the others only.
            keep = (h_ref.double() != 0).any(-1, keepdim=True).expand_as(y)
            y, y_ref = y[keep], y_ref[keep]
        assert_close(y, y_ref)

    check()


@pytest.mark.parametrize("device", DEVICES)
def test_class_property(device):
    @hypothesis_settings(max_examples=25)
    @given(data=strided_tensors(device), eps=st.floats(1e-8, 1.0))
    def check(data, eps):
        x, g = data
        weight = _like(x, g, (x.shape[-1],))
        obj = torch.classes.my_ops.RMSNorm(weight, eps)
        assert_close(obj.forward(x), reference.rms_norm(x, weight, eps))

    check()


if __name__ == "__main__":
    run_this_file(__file__)
