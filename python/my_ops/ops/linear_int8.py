"""``linear_int8``: a linear layer with int8 weights and int8 activations, for inference.

The weight is symmetric int8, one float32 scale per output channel (what
:func:`quantize_weight_int8` makes of a float weight); each row of ``x`` is quantized to
8 bits with a zero point on every call, and the products are exact integer sums.
"""

from __future__ import annotations

import torch

from .. import _library
from . import _checks
from ._quantized import BAD_SCALES, reference_int8
from ._spec import (
    FLOAT32_MATH,
    INFERENCE_ONLY,
    BadCase,
    OpSpec,
    OptionalBias,
    Primary,
    QuantizedWeight,
    WeightScale,
)

# The int32 sums of the kernels hold K * 255 * 128 for K up to this.
MAX_IN_FEATURES = 65536


def linear_int8(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x @ (weight * weight_scale[:, None]).T + bias``, x quantized per row to 8 bits.

    Args:
        x: floating tensor ``[..., K]``, K at most 65,536; the math is float32.
        weight: int8 ``[N, K]``, symmetric (no zero point).
        weight_scale: float32 ``[N]``, finite and positive.
        bias: optional ``[N]`` of x's dtype.

    Returns:
        A new tensor ``[..., N]`` of x's dtype; NaN in a row of x with an infinity or a NaN.
        Not differentiable: a call that needs a gradient is refused.
    """
    _library.ensure_loaded()
    return torch.ops.my_ops.linear_int8(x, weight, weight_scale, bias)


def fake(x, weight, weight_scale, bias=None):
    torch._check(
        x.shape[-1] <= MAX_IN_FEATURES,
        lambda: (
            f"linear_int8: expected x to have a last dim of at most {MAX_IN_FEATURES}, "
            f"got {x.shape[-1]}"
        ),
    )
    return _checks.new_like(x, (*x.shape[:-1], weight.shape[0]))


def eager(x, weight, weight_scale, bias=None):
    """A float linear on the dequantized weight: what a user runs without the op."""
    w = (weight.float() * weight_scale[:, None]).to(x.dtype)
    return torch.nn.functional.linear(x, w, bias)


def _edge_samples(device: str) -> list[tuple]:
    # Rows of zeros, of one repeated value (the zero point at an end), of subnormals (whose
    # scale would overflow its inverse), of NaN, of large values; weights of both extremes.
    k = 8
    rows = [
        [0.0] * k,
        [2.5] * k,
        [-2.5] * k,
        [1e-40, -1e-40, 0.0, 1e-45, 0.0, 0.0, 0.0, 0.0],
        [float("nan"), 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        [1e30, -1e30, 3e29, 0.0, 1.0, -1.0, 5e29, 7e29],
        [0.5, -0.25, 0.125, 0.75, -1.0, 1.0, 0.0, 0.3],
    ]
    x = torch.tensor(rows)
    weight = torch.tensor([[127] * k, [-128] * k, [1, -1] * (k // 2)], dtype=torch.int8)
    scale = torch.tensor([1e-3, 2e-3, 0.5])
    bias = torch.tensor([0.0, -1.0, 1e3])
    return [
        (x.to(device=device, dtype=dtype), weight.to(device), scale.to(device), b)
        for dtype in (torch.float32, torch.float64)
        for b in (None, bias.to(device=device, dtype=dtype))
    ]


def _bad_cases(device: str) -> list[BadCase]:
    def call(scale_value=None, k=8):
        x = torch.randn(3, k, device=device)
        weight = torch.ones(2, k, dtype=torch.int8, device=device)
        scale = torch.tensor([0.5, 0.25], device=device)
        if scale_value is not None:
            scale[1] = scale_value
        return (x, weight, scale, None)

    return [
        *(
            BadCase(f"scale-{what}", lambda d, v=v: call(v), "weight_scale", values_only=True)
            for what, v in BAD_SCALES
        ),
        BadCase("x-too-wide", lambda d: call(k=MAX_IN_FEATURES + 1), "x"),
    ]


SPEC = OpSpec(
    name="linear_int8",
    wrapper=linear_int8,
    fake=fake,
    reference=reference_int8,
    eager=eager,
    arguments={
        "x": Primary(),
        "weight": QuantizedWeight(bits=8),
        "weight_scale": WeightScale(weight="weight"),
        "bias": OptionalBias(weight="weight"),
    },
    autograd=INFERENCE_ONLY,
    tolerances=FLOAT32_MATH,
    edge_samples=_edge_samples,
    bad_cases=_bad_cases,
    defaults={"bias": None},
)
