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


# (exponent bits, mantissa bits) of each dtype's IEEE-style encoding.
_ENCODINGS = {
    torch.float16: (5, 10),
    torch.bfloat16: (8, 7),
    torch.float32: (8, 23),
    torch.float64: (11, 52),
}


def _special_values(dtype: torch.dtype) -> torch.Tensor:
    """Values a copy must keep bit for bit, built from their encodings: signed zeros and
    infinities, NaNs with either sign, a payload or the quiet bit clear (signaling), the
    smallest subnormal and the largest finite values."""
    e, m = _ENCODINGS[dtype]
    bits = 1 + e + m
    sign, inf, quiet = 1 << (bits - 1), ((1 << e) - 1) << m, 1 << (m - 1)
    patterns = [
        0,
        sign,
        inf,
        sign | inf,
        inf | quiet,
        sign | inf | quiet,
        inf | quiet | 0b101,
        inf | 1,
        1,
        sign | 1,
        inf - 1,
        sign | (inf - 1),
    ]
    signed = [p - (1 << bits) if p & sign else p for p in patterns]
    ints = {16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]
    return torch.tensor(signed, dtype=ints).view(dtype)


def _edge_samples(device: str) -> list[tuple]:
    # Each layout takes a different path on CUDA: one device-to-device copy (contiguous),
    # the strided kernel (transposed), an unaligned start (offset by one element).
    samples = []
    for dtype in _ENCODINGS:
        v = _special_values(dtype).to(device)
        grid = v.repeat(3, 1)  # (3, 12)
        samples += [(v,), (grid.t(),), (torch.cat([v[:1], v])[1:],)]
    return samples


SPEC = OpSpec(
    name="identity_conv_op",
    wrapper=identity_conv,
    fake=fake,
    reference=reference,
    eager=eager,
    arguments={"x": Primary()},
    autograd=Autograd(_backward),
    tolerances=EXACT,
    edge_samples=_edge_samples,
    bench={"cuda": BenchTargets(min_clone_bandwidth=0.8)},
)
