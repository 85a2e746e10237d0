"""``linear_int4``: a linear layer with int4 weights and int8 activations ("8da4w"), for
inference.

The weight holds symmetric int4 values two to a byte, low four bits first, each stored as
``w + 8`` (what :func:`quantize_weight_int4` makes of a float weight), with a float32 or
float16 scale per output channel and group of ``group_size`` consecutive in_features; each
row of ``x`` is quantized to 8 bits with a zero point on every call.
"""

from __future__ import annotations

import torch

from .. import _library
from . import _checks
from ._quantized import BAD_SCALES, reference_int4, unpack_int4
from ._spec import (
    FLOAT32_MATH,
    INFERENCE_ONLY,
    BadCase,
    GroupSize,
    OpSpec,
    OptionalBias,
    Primary,
    QuantizedWeight,
    WeightScale,
)


def linear_int4(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    group_size: int = 32,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x @ dequantize(weight).T + bias``, x quantized per row to 8 bits.

    Args:
        x: floating tensor ``[..., K]``; the math is float32.
        weight: uint8 ``[N, K / 2]``, two int4 values a byte (k = 2j in the low four bits
            of byte j, k = 2j + 1 in the high four), each stored as w + 8.
        weight_scale: float32 or float16 ``[N, K / group_size]``, finite and positive.
        group_size: a positive multiple of 32 that divides K.
        bias: optional ``[N]`` of x's dtype.

    Returns:
        A new tensor ``[..., N]`` of x's dtype; NaN in a row of x with an infinity or a NaN.
        Not differentiable: a call that needs a gradient is refused.
    """
    _library.ensure_loaded()
    return torch.ops.my_ops.linear_int4(x, weight, weight_scale, group_size, bias)


def fake(x, weight, weight_scale, group_size=32, bias=None):
    return _checks.new_like(x, (*x.shape[:-1], weight.shape[0]))


def eager(x, weight, weight_scale, group_size=32, bias=None):
    """A float linear on the dequantized weight: what a user runs without the op."""
    w = unpack_int4(weight).float()
    n, k = w.shape
    w = (w.reshape(n, k // group_size, group_size) * weight_scale[..., None]).reshape(n, k)
    return torch.nn.functional.linear(x, w.to(x.dtype), bias)


def _edge_samples(device: str) -> list[tuple]:
    # As linear_int8's: rows of zeros, of one value, of subnormals, of NaN, of large values;
    # weights at both ends of the int4 range (bytes 0x00: -8, -8 and 0xff: 7, 7).
    k = 64
    x = torch.zeros(5, k)
    x[1] = 2.5
    x[2, ::3] = 1e-40
    x[3] = torch.linspace(-1, 1, k)
    x[3, 5] = float("nan")
    x[4] = torch.linspace(-1e30, 7e29, k)
    weight = torch.tensor([[0x00] * (k // 2), [0xFF] * (k // 2), [0x7F] * (k // 2)])
    weight = weight.to(torch.uint8)
    scale = torch.tensor([[1e-3, 2e-3], [0.5, 0.25], [1.0, 1e-2]])
    bias = torch.tensor([0.0, -1.0, 1e3])
    return [
        (x.to(device=device, dtype=dtype), weight.to(device), s.to(device), 32, b)
        for dtype in (torch.float32, torch.float64)
        for b in (None, bias.to(device=device, dtype=dtype))
        for s in (scale, scale.half())
    ]


def _bad_cases(device: str) -> list[BadCase]:
    def call(scale_value):
        x = torch.randn(3, 64, device=device)
        weight = torch.full((2, 32), 0x98, dtype=torch.uint8, device=device)
        scale = torch.full((2, 2), 0.5, device=device)
        scale[1, 1] = scale_value
        return (x, weight, scale, 32, None)

    return [
        BadCase(f"scale-{what}", lambda d, v=v: call(v), "weight_scale", values_only=True)
        for what, v in BAD_SCALES
    ]


SPEC = OpSpec(
    name="linear_int4",
    wrapper=linear_int4,
    fake=fake,
    reference=reference_int4,
    eager=eager,
    arguments={
        "x": Primary(sample_last_dim_multiple=64),
        "weight": QuantizedWeight(bits=4),
        "weight_scale": WeightScale(weight="weight", group_size="group_size"),
        "group_size": GroupSize(samples=(32, 64)),
        "bias": OptionalBias(weight="weight"),
    },
    autograd=INFERENCE_ONLY,
    tolerances=FLOAT32_MATH,
    edge_samples=_edge_samples,
    bad_cases=_bad_cases,
    defaults={"group_size": 32, "bias": None},
)
