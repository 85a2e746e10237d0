"""Quantized linear layers for inference: :class:`QuantizedLinear` and
:func:`quantize_linear_layers`, which swaps a model's ``nn.Linear`` layers for it.

``"int8"``: int8 weights, symmetric, one scale per output channel (``my_ops.linear_int8``).
``"int4"``: int4 weights, symmetric, one scale per group of ``group_size`` in_features, two
values a byte (``my_ops.linear_int4``, the "8da4w" scheme). Both quantize each row of the
input to 8 bits with a zero point on every call; the quantized weights are what a package
holds, so nothing is repacked at load or per call.
"""

from __future__ import annotations

import torch
from torch import nn

from ._linear_layers import linear_layers, replace_layers
from .ops._quantized import pack_int4, quantize_weight_int4, quantize_weight_int8, unpack_int4
from .ops.linear_int4 import linear_int4
from .ops.linear_int8 import linear_int8

__all__ = [
    "SCHEMES",
    "QuantizedLinear",
    "pack_int4",
    "quantize_linear_layers",
    "quantize_weight_int4",
    "quantize_weight_int8",
    "unpack_int4",
]

SCHEMES = ("int8", "int4")
DEFAULT_GROUP_SIZE = 32


class QuantizedLinear(nn.Module):
    """``nn.Linear`` with quantized weights, for inference (no gradient flows through it).

    Buffers: ``weight`` (int8 ``[out, in]``, or uint8 ``[out, in / 2]`` for int4),
    ``weight_scale`` (float32 ``[out]``, or ``[out, in / group_size]``) and ``bias`` (or
    None), in the dtype of the layer it replaces.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None,
        scheme: str,
        group_size: int | None = None,
    ):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
        self.scheme = scheme
        self.group_size = group_size if scheme == "int4" else None
        self.in_features = weight.shape[1] * (2 if scheme == "int4" else 1)
        self.out_features = weight.shape[0]
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("bias", bias)

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, scheme: str, group_size: int = DEFAULT_GROUP_SIZE
    ) -> QuantizedLinear:
        """The quantized copy of ``linear`` (on its device; the bias kept as it is)."""
        if scheme == "int8":
            weight, scale = quantize_weight_int8(linear.weight)
        elif scheme == "int4":
            weight, scale = quantize_weight_int4(linear.weight, group_size)
        else:
            raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
        bias = None if linear.bias is None else linear.bias.detach().clone()
        device = linear.weight.device
        return cls(weight.to(device), scale.to(device), bias, scheme, group_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scheme == "int8":
            return linear_int8(x, self.weight, self.weight_scale, self.bias)
        return linear_int4(x, self.weight, self.weight_scale, self.group_size, self.bias)

    def extra_repr(self) -> str:
        group = f", group_size={self.group_size}" if self.group_size else ""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"scheme={self.scheme}{group}, bias={self.bias is not None}"
        )


def quantize_linear_layers(
    model: nn.Module,
    scheme: str,
    *,
    group_size: int = DEFAULT_GROUP_SIZE,
    skip: tuple[str, ...] | list[str] = (),
) -> list[str]:
    """Replace, in place, every ``nn.Linear`` of ``model`` by its :class:`QuantizedLinear`.

    Layers whose qualified name (``layers.0.mlp.up``) matches one of the ``skip`` patterns
    (``fnmatch``: ``lm_head``, ``*.attn.*``) stay float. A layer whose in_features the
    scheme cannot take (int4: not a multiple of ``group_size``) raises. Returns the names of
    the layers replaced; raises ValueError when there are none, so that a typo in ``skip``
    or a model without Linear layers does not pass for a quantized one.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    targets = linear_layers(model, skip)
    if scheme == "int4" and (group_size <= 0 or group_size % 32):
        raise ValueError(f"group_size must be a positive multiple of 32, got {group_size}")
    if not targets:
        what = "no nn.Linear layer" if not skip else "no nn.Linear layer outside the skip patterns"
        raise ValueError(f"{type(model).__name__} has {what} to quantize")
    for name, linear in targets:
        if scheme == "int4" and linear.in_features % group_size:
            raise ValueError(
                f"{name}: in_features {linear.in_features} is not a multiple of the int4 "
                f"group size {group_size}"
            )
    replace_layers(
        model, targets, lambda linear: QuantizedLinear.from_linear(linear, scheme, group_size)
    )
    return [name for name, _ in targets]
