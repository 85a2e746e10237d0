"""Property tests: random shapes, strides and dtypes against the float64 reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import my_ops
from my_ops.ops._spec import Primary
from op_table import assert_matches_reference, by_op
from role_values import values_of
from testing_utils import DEVICES, FLOAT_DTYPES, assert_close, hypothesis_settings, run_this_file

ANY_PRIMARY = Primary()


@st.composite
def strided_tensors(draw, device: str, primary: Primary = ANY_PRIMARY):
    """A float tensor valid as ``primary``, whose memory layout is a random
    permutation/slice of its storage.

    Returns ``(x, generator)``; ``x`` may be non-contiguous, transposed or empty.
    """
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    shape = values_of(primary).strided_shape(draw)
    ndim = len(shape)
    steps = draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim))
    perm = draw(st.permutations(range(ndim)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    # Allocate the storage in permuted order, then slice with steps and permute back so that
    # the logical shape is `shape` but strides are arbitrary.
    storage_shape = [shape[p] * steps[p] for p in perm]
    base = torch.randn(storage_shape, generator=g, dtype=torch.float64) * 2
    base = base.to(device=device, dtype=dtype)
    sliced = base[tuple(slice(None, None, steps[p]) for p in perm)]
    x = sliced.permute([perm.index(i) for i in range(ndim)])
    assert list(x.shape) == shape
    return x, g


@st.composite
def calls(draw, spec, device: str):
    """Valid arguments for ``spec``: a strided primary, the others drawn by their roles to
    fit it."""
    x, g = draw(strided_tensors(device, spec.primary))
    drawn: dict[str, object] = {spec.primary_name: x}
    # Scalars first: a tensor may follow one (a weight scale, its group size).
    for name, role in sorted(spec.arguments.items(), key=lambda item: item[1].is_tensor):
        if name != spec.primary_name:
            drawn[name] = values_of(role).draw_valid_in_call(draw, x, g, drawn)
    return tuple(drawn[name] for name in spec.arguments)


@by_op()
@pytest.mark.parametrize("device", DEVICES)
def test_matches_reference_for_any_strides(spec, device):
    @hypothesis_settings(max_examples=40)
    @given(args=calls(spec, device))
    def check(args):
        out = spec.wrapper(*args)
        for o in out if isinstance(out, tuple) else (out,):
            assert o.is_contiguous()
        assert_matches_reference(spec, args, out)

    check()


@pytest.mark.parametrize("device", DEVICES)
def test_class_property(device):
    @hypothesis_settings(max_examples=25)
    @given(data=strided_tensors(device), eps=st.floats(1e-8, 1.0))
    def check(data, eps):
        x, g = data
        weight = torch.randn(x.shape[-1], generator=g, dtype=torch.float64).to(x.device, x.dtype)
        obj = torch.classes.my_ops.RMSNorm(weight, eps)
        assert_close(obj.forward(x), my_ops.nn.reference(x, weight, eps))

    check()


if __name__ == "__main__":
    run_this_file(__file__)
