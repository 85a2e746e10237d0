"""``identity_conv_op``: a copy of ``x`` into a new contiguous tensor.

The simplest op of the library. On CUDA it merges contiguous dims, copies a dense input
with one device-to-device copy, and otherwise passes the shape and strides to its kernel by
value: no host sync, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch

from .. import _library
from . import _checks
from ._spec import EXACT, Autograd, BenchTargets, OpSpec, Primary


def identity_conv(x: torch.Tensor) -> torch.Tensor:
    """Return a new tensor equal to ``x`` (a copy, never an alias).

    Args:
        x: floating point tensor of any shape (at least one dimension) and strides.
    """
    _library.ensure_loaded()
    return torch.ops.my_ops.identity_conv_op(x)


def fake(x: torch.Tensor) -> torch.Tensor:
    return _checks.new_like(x)


def _backward(ctx, grad):
    # The op is a copy, so the gradient passes through unchanged.
    return grad


def reference(x: torch.Tensor) -> torch.Tensor:
    """A contiguous copy (exact in every dtype, so no float64 detour)."""
    return x.clone(memory_format=torch.contiguous_format)


def eager(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


SPEC = OpSpec(
    name="identity_conv_op",
    wrapper=identity_conv,
    fake=fake,
    reference=reference,
    eager=eager,
    arguments={"x": Primary()},
    autograd=Autograd(_backward),
    tolerances=EXACT,
    bench={"cuda": BenchTargets(min_clone_bandwidth=0.8)},
)
