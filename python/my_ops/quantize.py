"""Quantized linear layers for inference: :class:`QuantizedLinear` and
:func:`quantize_linear_layers`, which swaps a model's ``nn.Linear`` layers for it.

``"int8"``: int8 weights, symmetric, one scale per output channel (``my_ops.linear_int8``).
``"int4"``: int4 weights, symmetric, one float16 scale per group of ``group_size``
in_features, two values a byte (``my_ops.linear_int4``, the "8da4w" scheme). Both quantize
each row of the input to 8 bits with a zero point on every call; the quantized weights are
what a package holds, so nothing is repacked at load or per call.

Smoothing (SmoothQuant, Xiao et al. 2023): a few input channels of an LLM's activations are
tens of times larger than the rest, and a per-token scale sized for them leaves the others a
handful of levels. With ``smooth_alpha`` > 0, each layer divides its input by a per-channel
``smooth_scale`` s and quantizes ``weight * s`` instead (the same product in exact math):
``s_j = max|x_j| ** alpha / max|w_j| ** (1 - alpha)`` over the example inputs' activations
(``max|x_j|``) and the weight's column j, which moves that much of the range from the
activations into the weights.
"""

from __future__ import annotations

import torch
from torch import nn

from ._linear_layers import linear_layers, replace_layers
from .ops._quantized import pack_int4, quantize_weight_int4, quantize_weight_int8, unpack_int4
from .ops.linear_int4 import linear_int4
from .ops.linear_int8 import linear_int8

__all__ = [
    "DEFAULT_SMOOTH_ALPHA",
    "SCHEMES",
    "QuantizedLinear",
    "pack_int4",
    "quantize_linear_layers",
    "quantize_weight_int4",
    "quantize_weight_int8",
    "smooth_scales",
    "unpack_int4",
]

SCHEMES = ("int8", "int4")
DEFAULT_GROUP_SIZE = 32
# SmoothQuant's migration strength per scheme, 0 for none. On SmolLM2-135M's logits (128 tokens,
# every layer int8) 0.5 takes the cosine against the float model from 0.9988 to 0.9995; int4's
# error is in its weights, where smoothing moves more (docs/PERFORMANCE.md, "Smoothing").
DEFAULT_SMOOTH_ALPHA = {"int8": 0.5, "int4": 0.0}


class QuantizedLinear(nn.Module):
    """``nn.Linear`` with quantized weights, for inference (no gradient flows through it).

    Buffers: ``weight`` (int8 ``[out, in]``, or uint8 ``[out, in / 2]`` for int4),
    ``weight_scale`` (float32 ``[out]``, or float16 ``[out, in / group_size]``), ``bias`` (or
    None), in the dtype of the layer it replaces, and ``smooth_scale`` (or None): float32
    ``[in]``, what the input is divided by before the op (the weight was quantized times it).
    """

    def __init__(
        self,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None,
        scheme: str,
        group_size: int | None = None,
        smooth_scale: torch.Tensor | None = None,
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
        self.register_buffer("smooth_scale", smooth_scale)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        scheme: str,
        group_size: int = DEFAULT_GROUP_SIZE,
        smooth_scale: torch.Tensor | None = None,
    ) -> QuantizedLinear:
        """The quantized copy of ``linear`` (on its device; the bias kept as it is), with its
        weight's columns multiplied by ``smooth_scale`` (positive, ``[in_features]``) first
        when one is given."""
        weight = linear.weight.detach()
        if smooth_scale is not None:
            smooth_scale = smooth_scale.detach().to(weight.device, torch.float32)
            if smooth_scale.shape != (linear.in_features,) or not bool(
                ((smooth_scale > 0) & smooth_scale.isfinite()).all()
            ):
                raise ValueError(
                    f"smooth_scale must be {linear.in_features} finite positive values, got "
                    f"shape {tuple(smooth_scale.shape)}"
                )
            weight = weight.float() * smooth_scale
        if scheme == "int8":
            weight, scale = quantize_weight_int8(weight)
        elif scheme == "int4":
            weight, scale = quantize_weight_int4(weight, group_size)
        else:
            raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
        bias = None if linear.bias is None else linear.bias.detach().clone()
        device = linear.weight.device
        return cls(weight.to(device), scale.to(device), bias, scheme, group_size, smooth_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.smooth_scale is not None:
            x = x / self.smooth_scale.to(x.dtype)
        if self.scheme == "int8":
            return linear_int8(x, self.weight, self.weight_scale, self.bias)
        return linear_int4(x, self.weight, self.weight_scale, self.group_size, self.bias)

    def extra_repr(self) -> str:
        group = f", group_size={self.group_size}" if self.group_size else ""
        smooth = ", smoothed" if self.smooth_scale is not None else ""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"scheme={self.scheme}{group}, bias={self.bias is not None}{smooth}"
        )


def input_ranges(
    model: nn.Module, layers: list[tuple[str, nn.Linear]], example_inputs: tuple
) -> dict[str, torch.Tensor]:
    """``name -> max |x_j|`` (float32 ``[in_features]``) of each layer's input over one run
    of ``model`` on ``example_inputs`` (every dim but the last being rows)."""
    ranges: dict[str, torch.Tensor] = {}

    def observe(name: str):
        def hook(module: nn.Module, args: tuple) -> None:
            x = args[0].detach()
            seen = x.abs().reshape(-1, x.shape[-1]).amax(dim=0).float()
            ranges[name] = seen if name not in ranges else torch.maximum(ranges[name], seen)

        return hook

    handles = [layer.register_forward_pre_hook(observe(name)) for name, layer in layers]
    try:
        with torch.no_grad():
            model(*example_inputs)
    finally:
        for handle in handles:
            handle.remove()
    return ranges


def smooth_scales(weight: torch.Tensor, input_range: torch.Tensor, alpha: float) -> torch.Tensor:
    """SmoothQuant's per-input-channel factor for one layer: ``max|x_j| ** alpha / max|w_j| **
    (1 - alpha)``, float32 ``[in_features]``. A channel the example never used, or a weight
    column of zeros, keeps 1: there is nothing to move."""
    x_max = input_range.double()
    w_max = weight.detach().abs().amax(dim=0).double().to(x_max.device)
    usable = (x_max > 0) & (w_max > 0) & x_max.isfinite()
    scale = x_max.clamp(min=1e-30) ** alpha / w_max.clamp(min=1e-30) ** (1 - alpha)
    scale = torch.where(usable & (scale > 0) & scale.isfinite(), scale, torch.ones_like(scale))
    return scale.float().clamp(min=1e-6, max=1e6)


def quantize_linear_layers(
    model: nn.Module,
    scheme: str,
    *,
    group_size: int = DEFAULT_GROUP_SIZE,
    skip: tuple[str, ...] | list[str] = (),
    smooth_alpha: float = 0.0,
    example_inputs: tuple | None = None,
) -> list[str]:
    """Replace, in place, every ``nn.Linear`` of ``model`` by its :class:`QuantizedLinear`.

    Layers whose qualified name (``layers.0.mlp.up``) matches one of the ``skip`` patterns
    (``fnmatch``: ``lm_head``, ``*.attn.*``) stay float. A layer whose in_features the
    scheme cannot take (int4: not a multiple of ``group_size``) raises. With
    ``smooth_alpha`` in (0, 1] each layer is smoothed (the module's docstring) by the ranges
    of its input over one run of the float model on ``example_inputs``, which it then needs;
    ``DEFAULT_SMOOTH_ALPHA`` holds the values measured best per scheme. Returns the names of
    the layers replaced; raises ValueError when there are none, so that a typo in ``skip``
    or a model without Linear layers does not pass for a quantized one.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if isinstance(smooth_alpha, bool) or not (
        isinstance(smooth_alpha, int | float) and 0 <= smooth_alpha <= 1
    ):
        raise ValueError(f"smooth_alpha must be in [0, 1], got {smooth_alpha!r}")
    if smooth_alpha and example_inputs is None:
        raise ValueError("smooth_alpha needs example_inputs, to measure the layers' inputs")
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
    smooth: dict[int, torch.Tensor] = {}
    if smooth_alpha:
        ranges = input_ranges(model, targets, tuple(example_inputs))
        # A layer the example does not reach has nothing to smooth by.
        for name, linear in targets:
            if name in ranges:
                smooth[id(linear)] = smooth_scales(linear.weight, ranges[name], smooth_alpha)
    replace_layers(
        model,
        targets,
        lambda linear: QuantizedLinear.from_linear(
            linear, scheme, group_size, smooth.get(id(linear))
        ),
    )
    return [name for name, _ in targets]
