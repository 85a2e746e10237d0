"""Autograd formulas for the fused ops, built from ATen ops."""

from __future__ import annotations

import torch

_registered = False


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    # Half precision backward math runs in fp32, like the forward kernels.
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def _sum_to_last_dim(t: torch.Tensor) -> torch.Tensor:
    """Sum over every dimension but the last (works for 1-D and zero-size tensors)."""
    return t.flatten(0, -2).sum(0) if t.dim() > 1 else t


# --- identity_conv_op -----------------------------------------------------------------


def _identity_backward(ctx, grad):
    # The op is a copy, so the gradient passes through unchanged.
    return grad


# --- fused_bias_gelu -------------------------------------------------------------------


def _bias_gelu_setup_context(ctx, inputs, output) -> None:
    x, bias, approximate = inputs
    ctx.save_for_backward(x, bias)
    ctx.approximate = approximate


def _bias_gelu_backward(ctx, grad):
    x, bias = ctx.saved_tensors
    cdt = _compute_dtype(x)
    h = x.to(cdt) + bias.to(cdt)
    grad_h = torch.ops.aten.gelu_backward(grad.to(cdt), h, approximate=ctx.approximate)
    grad_x = grad_h.to(x.dtype)
    grad_bias = _sum_to_last_dim(grad_h).to(bias.dtype)
    return grad_x, grad_bias, None


# --- fused_add_rms_norm ----------------------------------------------------------------


def _add_rms_norm_setup_context(ctx, inputs, output) -> None:
    x, residual, weight, eps = inputs
    ctx.save_for_backward(x, residual, weight)
    ctx.eps = eps


def _add_rms_norm_backward(ctx, grad_y, grad_h):
    x, residual, weight = ctx.saved_tensors
    cdt = _compute_dtype(x)
    h = x.to(cdt) + residual.to(cdt)
    rstd = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + ctx.eps)
    n = h * rstd
    if grad_y is None:
        grad_y = torch.zeros_like(h)
    gy = grad_y.to(cdt)
    gn = gy * weight.to(cdt)
    # d/dh of h * rstd(h): rstd * (gn - n * mean(gn * n))
    gh_total = rstd * (gn - n * (gn * n).mean(-1, keepdim=True))
    if grad_h is not None:
        gh_total = gh_total + grad_h.to(cdt)
    grad_weight = _sum_to_last_dim(gy * n).to(weight.dtype)
    return gh_total.to(x.dtype), gh_total.to(residual.dtype), grad_weight, None


def register() -> None:
    global _registered
    if _registered:
        return
    torch.library.register_autograd("my_ops::identity_conv_op", _identity_backward)
    torch.library.register_autograd(
        "my_ops::fused_bias_gelu", _bias_gelu_backward, setup_context=_bias_gelu_setup_context
    )
    torch.library.register_autograd(
        "my_ops::fused_add_rms_norm",
        _add_rms_norm_backward,
        setup_context=_add_rms_norm_setup_context,
    )
    _registered = True
