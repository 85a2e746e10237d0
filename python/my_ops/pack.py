"""Float linear layers on packed weights, for inference: :class:`PackedLinear` and
:func:`pack_linear_layers`, which swaps a model's ``nn.Linear`` layers for it.

The weight is packed once (:func:`pack_linear_weight`, panels of 32 output channels) and
held so: an exported package holds the packed weight alone, and ``my_ops.linear_packed``
streams it once per call for every row of the input. The math is float32, as
``nn.Linear``'s; only the order of the sums differs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ._linear_layers import linear_layers, replace_layers
from .ops._checks import PANEL_CHANNELS
from .ops.linear_packed import linear_packed, pack_linear_weight, unpack_linear_weight

__all__ = ["PackedLinear", "pack_linear_layers", "pack_linear_weight", "unpack_linear_weight"]


class PackedLinear(nn.Module):
    """``nn.Linear`` (float32) with its weight packed, for inference (no gradient flows
    through it). Buffers: ``weight`` (float32 ``[out / 32, in, 32]``) and ``bias`` (or
    None)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.in_features = weight.shape[1]
        self.out_features = weight.shape[0] * PANEL_CHANNELS
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> PackedLinear:
        """The packed copy of ``linear`` (on its device)."""
        bias = None if linear.bias is None else linear.bias.detach().clone()
        return cls(pack_linear_weight(linear.weight), bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear_packed(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


def packable(model: nn.Module, skip: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """Which ``nn.Linear`` layers of ``model`` :func:`pack_linear_layers` packs: ``(names,
    {name: why not})``, leaving a layer whose weight is not float32, whose out_features is
    not a multiple of 32, or whose weight is shared with another module (a tied output
    projection: a packed copy would hold that weight twice)."""
    layers, left = _packable_layers(model, skip)
    return [name for name, _ in layers], left


def _packable_layers(
    model: nn.Module, skip: Sequence[str]
) -> tuple[list[tuple[str, nn.Linear]], dict[str, str]]:
    names_of: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        names_of[id(p)] = names_of.get(id(p), 0) + 1
    packed, left = [], {}
    for name, linear in linear_layers(model, skip):
        if linear.weight.dtype != torch.float32:
            left[name] = f"weight is {linear.weight.dtype}, not torch.float32"
        elif linear.out_features % PANEL_CHANNELS:
            left[name] = f"out_features {linear.out_features} is not a multiple of 32"
        elif names_of.get(id(linear.weight), 0) > 1:
            left[name] = "weight is shared with another module (tied)"
        else:
            packed.append((name, linear))
    return packed, left


def pack_linear_layers(model: nn.Module, *, skip: Sequence[str] = ()) -> list[str]:
    """Replace, in place, the ``nn.Linear`` layers :func:`packable` picks by their
    :class:`PackedLinear`; returns their names. Layers matching a ``skip`` pattern
    (``fnmatch`` on the qualified name) stay as they are."""
    layers, _ = _packable_layers(model, skip)
    replace_layers(model, layers, PackedLinear.from_linear)
    return [name for name, _ in layers]
