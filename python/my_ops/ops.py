"""Typed Python wrappers around the ``torch.ops.my_ops`` operators."""

from __future__ import annotations

import torch

from . import _library

__all__ = ["fused_add_rms_norm", "fused_bias_gelu", "identity_conv"]


def identity_conv(x: torch.Tensor) -> torch.Tensor:
    """Return a new tensor equal to ``x`` (a copy, never an alias).

    Args:
        x: input tensor of any shape and strides.
    """
    _library.ensure_loaded()
    return torch.ops.my_ops.identity_conv_op(x)


def fused_bias_gelu(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """Compute ``gelu(x + bias)`` in one pass.

    Args:
        x: floating point tensor with at least one dimension.
        bias: 1-D tensor whose length equals ``x.shape[-1]``.
        approximate: ``"none"`` (erf formulation) or ``"tanh"``.

    Returns:
        A new tensor with the shape and dtype of ``x``. Differentiable w.r.t. ``x`` and
        ``bias``.
    """
    _library.ensure_loaded()
    return torch.ops.my_ops.fused_bias_gelu(x, bias, approximate)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused residual add + RMS normalization over the last dimension.

    With ``h = x + residual`` returns ``(h * rsqrt(mean(h**2, -1) + eps) * weight, h)``.
    fp16/bf16 inputs accumulate in fp32.

    Args:
        x: floating point tensor with at least one dimension.
        residual: tensor with the same shape as ``x``.
        weight: 1-D tensor whose length equals ``x.shape[-1]``.
        eps: non-negative constant added to the mean square.

    Returns:
        ``(normalized, h)``, both new tensors shaped like ``x``. Differentiable w.r.t.
        ``x``, ``residual`` and ``weight``.
    """
    _library.ensure_loaded()
    return torch.ops.my_ops.fused_add_rms_norm(x, residual, weight, eps)
