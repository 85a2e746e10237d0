"""Every op inside a CUDA graph: captured once, replayed on new input values.

A captured op must not synchronize the host or copy from pageable memory (both are
illegal during capture and raise), and must read its inputs through the pointers it was
captured with, so that writing new values into the static inputs and replaying
recomputes the outputs. The cases need a GPU: Bazel builds only this file's ``_cuda``
target (python/BUILD.bazel), and a run without cuda under test skips the module.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import my_ops
from op_table import (
    as_tuple,
    assert_matches_reference,
    by_op,
    make_args,
    scalar_variants,
    tensor_args,
)
from testing_utils import DEVICES, LAYOUTS, run_this_file

CUDA_DEVICES = [d for d in DEVICES if d.startswith("cuda")]
if not CUDA_DEVICES:
    pytest.skip("no cuda device under test (MY_OPS_TEST_DEVICES)", allow_module_level=True)

# Float32 for exactness of the comparison, bfloat16 for a 2-byte dtype.
DTYPES = [torch.float32, torch.bfloat16]
# A 3-D shape so that the layouts leave dims for identity_conv to merge (or not).
SHAPES = [(5, 33), (4, 6, 33)]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _capture(fn, *static_args):
    """(graph, outputs) of ``fn(*static_args)`` captured once, after the warm-up on a side
    stream that torch's CUDA graph docs require (lazy initialization, allocator pools)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*static_args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn(*static_args)
    return graph, outputs


def _write_new_values(static: list[torch.Tensor], new: list[torch.Tensor]) -> None:
    """Copy ``new`` into the captured inputs, in place: the graph reads their storage."""
    for s, n in zip(static, new, strict=True):
        assert not torch.equal(s, n), "the new values must differ from the captured ones"
        s.copy_(n)


@by_op()
@pytest.mark.parametrize("device", CUDA_DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_replay_matches_reference(spec, device, dtype, layout):
    # Contiguous, sliced, every-other-row and transposed inputs: for identity_conv the
    # first is its memcpy path and the others its strided kernel, captured in the graph.
    g = torch.Generator().manual_seed(1)
    for shape, scalars in itertools.product(SHAPES, scalar_variants(spec)):
        static_args = make_args(spec, shape, dtype, device, layout, scalars)
        graph, outputs = _capture(spec.wrapper, *static_args)
        for replay in range(2):
            new_args = make_args(spec, shape, dtype, device, layout, scalars, generator=g)
            _write_new_values(tensor_args(static_args), tensor_args(new_args))
            graph.replay()
            where = f"{shape} {layout} {scalars} replay {replay}"
            assert_matches_reference(spec, static_args, as_tuple(outputs), where)


# identity_conv's own layouts beyond LAYOUTS, each a view of a base tensor: the graph
# reads the view, the test writes new values into the base.
IDENTITY_VIEWS = {
    # Contiguous at a storage offset: the memcpy path must copy from the offset.
    "offset": ((61,), lambda b: b[5:45].view(5, 8)),
    # A permutation over three dims: no dims merge.
    "permuted": ((4, 6, 10), lambda b: b.permute(2, 0, 1)),
    # Stride 0 (a broadcast): one merged dim, but not stride 1, so the kernel.
    "expanded": ((1, 33), lambda b: b.expand(7, 33)),
    # Slicing an inner dim: (4, 6, 4, 10) merges to two dims of (24, 40).
    "inner_slice": ((4, 6, 8, 10), lambda b: b[:, :, 2:6]),
    # Twelve dims, none mergeable: the kernel's layout holds many dims.
    "reversed_12d": ((2,) * 12, lambda b: b.permute(*reversed(range(12)))),
}


@pytest.mark.parametrize("device", CUDA_DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("view", list(IDENTITY_VIEWS))
def test_identity_conv_views_replay(device, dtype, view):
    spec = my_ops.ops.SPECS["identity_conv_op"]
    base_shape, make_view = IDENTITY_VIEWS[view]
    base = torch.randn(base_shape, dtype=torch.float64).to(device=device, dtype=dtype)
    x = make_view(base)
    graph, out = _capture(spec.wrapper, x)
    for replay in range(2):
        _write_new_values([base], [torch.randn_like(base)])
        graph.replay()
        assert_matches_reference(spec, (x,), out, f"{view} replay {replay}")


if __name__ == "__main__":
    run_this_file(__file__)
