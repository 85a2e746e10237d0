"""``linear_packed``: a float linear layer on a weight packed once, for inference.

The weight is ``nn.Linear``'s ``[N, K]`` in panels of 32 output channels, K-major within a
panel (``ops/packed_linear/packed_linear.h``): :func:`pack_linear_weight` makes it, once, at
export, and a package holds it so. The kernels stream each panel once for every row of ``x``
they hold in registers, which is what a product of a few rows is bound by.
"""

from __future__ import annotations

import torch

from .. import _library
from ._checks import PANEL_CHANNELS
from ._spec import FLOAT32_SUMS, INFERENCE_ONLY, OpSpec, OptionalBias, PackedWeight, Primary


def pack_linear_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` (``[N, K]``, N a multiple of 32) as linear_packed's float32 ``[N / 32, K,
    32]``: ``packed[p, k, j] = weight[32 p + j, k]``."""
    if weight.dim() != 2 or weight.shape[0] % PANEL_CHANNELS:
        raise ValueError(
            f"pack_linear_weight: expected a 2-D weight [out_features, in_features] with "
            f"out_features a multiple of {PANEL_CHANNELS}, got shape {list(weight.shape)}"
        )
    n, k = weight.shape
    w = weight.detach().to(torch.float32)
    return w.reshape(n // PANEL_CHANNELS, PANEL_CHANNELS, k).transpose(1, 2).contiguous()


def unpack_linear_weight(packed: torch.Tensor) -> torch.Tensor:
    """The ``[N, K]`` weight of linear_packed's ``[N / 32, K, 32]``."""
    panels, k, channels = packed.shape
    return packed.transpose(1, 2).reshape(panels * channels, k)


def linear_packed(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``x @ unpack_linear_weight(weight).T + bias``, in float32.

    Args:
        x: floating tensor ``[..., K]``; the math is float32 (x converted first).
        weight: float32 ``[N / 32, K, 32]``, as :func:`pack_linear_weight` makes it.
        bias: optional ``[N]`` of x's dtype.

    Returns:
        A new tensor ``[..., N]`` of x's dtype. Not differentiable: a call that needs a
        gradient is refused.
    """
    _library.ensure_loaded()
    return torch.ops.my_ops.linear_packed(x, weight, bias)


def fake(x, weight, bias=None):
    from ._checks import new_like

    return new_like(x, (*x.shape[:-1], weight.shape[0] * PANEL_CHANNELS))


def reference(x, weight, bias=None):
    """In float64, from x as the kernels read it (float32)."""
    w = unpack_linear_weight(weight).double()
    out = x.float().double() @ w.T
    if bias is not None:
        out = out + bias.float().double()
    return out.to(x.dtype)


def eager(x, weight, bias=None):
    """nn.Linear on the unpacked weight: what a user runs without the op."""
    return torch.nn.functional.linear(x, unpack_linear_weight(weight).to(x.dtype), bias)


def _edge_samples(device: str) -> list[tuple]:
    # A row of zeros, of huge values (float32 products near its range), of tiny ones, with a NaN
    # and with an infinity (each spreads to its row alone); weights of both signs.
    k = 8
    rows = [
        [0.0] * k,
        [1e18, -1e18, 3e17, 0.0, 1.0, -1.0, 5e17, 7e17],
        [1e-30, -1e-30, 0.0, 1e-38, 0.0, 0.0, 0.0, 0.0],
        [float("nan"), 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        [float("inf"), 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        [0.5, -0.25, 0.125, 0.75, -1.0, 1.0, 0.0, 0.3],
    ]
    x = torch.tensor(rows)
    weight = pack_linear_weight(
        torch.linspace(-2.0, 2.0, 2 * PANEL_CHANNELS * k).reshape(2 * PANEL_CHANNELS, k)
    )
    bias = torch.linspace(-1.0, 1.0, 2 * PANEL_CHANNELS)
    return [
        (x.to(device=device, dtype=dtype), weight.to(device), b)
        for dtype in (torch.float32, torch.float64)
        for b in (None, bias.to(device=device, dtype=dtype))
    ]


SPEC = OpSpec(
    name="linear_packed",
    wrapper=linear_packed,
    fake=fake,
    reference=reference,
    eager=eager,
    arguments={
        "x": Primary(),
        "weight": PackedWeight(),
        "bias": OptionalBias(weight="weight", channels_per_slice=PANEL_CHANNELS),
    },
    autograd=INFERENCE_ONLY,
    tolerances=FLOAT32_SUMS,
    edge_samples=_edge_samples,
    defaults={"bias": None},
)
