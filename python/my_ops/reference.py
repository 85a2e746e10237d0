"""Independent ATen reference implementations.

All math runs in float64 and the results are cast back to the input dtype. They do not
call ``torch.nn.functional.gelu`` or ``rms_norm`` so they stay independent of the fused
kernels and of the ATen kernels they mirror.
"""

from __future__ import annotations

import math

import torch

__all__ = ["add_rms_norm", "bias_gelu", "identity", "rms_norm"]


def identity(x: torch.Tensor) -> torch.Tensor:
    return x.clone(memory_format=torch.contiguous_format)


def _gelu64(h: torch.Tensor, approximate: str) -> torch.Tensor:
    if approximate == "none":
        return 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))
        return 0.5 * h * (1.0 + torch.tanh(inner))
    raise ValueError(f"unknown approximate: {approximate!r}")


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``gelu(x + bias)`` computed in float64."""
    return _gelu64(x.double() + bias.double(), approximate).to(x.dtype)


def _rms_norm64(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` computed in float64."""
    return _rms_norm64(x.double(), weight, eps).to(x.dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual) * weight, x + residual)`` computed in float64."""
    h = x.double() + residual.double()
    return _rms_norm64(h, weight, eps).to(x.dtype), h.to(x.dtype)
