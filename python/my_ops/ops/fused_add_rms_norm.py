"""``fused_add_rms_norm``: the residual add and RMS norm of a transformer block, fused."""

from __future__ import annotations

import torch

from .. import _library
from . import _checks
from ._spec import (
    Autograd,
    BenchTargets,
    LastDimVector,
    LikePrimary,
    NonNegativeFloat,
    OpSpec,
    Primary,
)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused residual add + RMS normalization over the last dimension.

    With ``h = x + residual`` returns ``(h * rsqrt(mean(h**2, -1) + eps) * weight, h)``.
    fp16/bf16 inputs accumulate in fp32.

    Args:
        x: floating point tensor with at least one dimension.
        residual: tensor with the same shape as ``x``.
        weight: 1-D tensor whose length equals ``x.shape[-1]``.
        eps: non-negative constant added to the mean square; by default the schema's
            (1e-6).

    Returns:
        ``(normalized, h)``, both new tensors shaped like ``x``. Differentiable w.r.t.
        ``x``, ``residual`` and ``weight``.
    """
    _library.ensure_loaded()
    if eps is None:
        return torch.ops.my_ops.fused_add_rms_norm(x, residual, weight)
    return torch.ops.my_ops.fused_add_rms_norm(x, residual, weight, eps)


def fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    op = "fused_add_rms_norm"
    _checks.check_primary(op, x)
    _checks.check_like_primary(op, "residual", residual, x)
    _checks.check_last_dim_vector(op, "weight", weight, x)
    _checks.check_non_negative(op, "eps", eps)
    return _checks.new_like(x), _checks.new_like(x)


def _setup_context(ctx, inputs, output) -> None:
    x, residual, weight, eps = inputs
    ctx.save_for_backward(x, residual, weight)
    ctx.eps = eps


def _backward(ctx, grad_y, grad_h):
    x, residual, weight = ctx.saved_tensors
    cdt = _checks.compute_dtype(x)
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
    grad_weight = _checks.sum_to_last_dim(gy * n).to(weight.dtype)
    return gh_total.to(x.dtype), gh_total.to(residual.dtype), grad_weight, None


def rms_norm_reference(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``h * rsqrt(mean(h**2, -1) + eps) * weight`` in float64, in h's dtype."""
    h64 = h.double()
    return (h64 * torch.rsqrt(h64.pow(2).mean(-1, keepdim=True) + eps) * weight.double()).to(
        h.dtype
    )


def reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual) * weight, x + residual)`` in float64."""
    h = x.double() + residual.double()
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    return y.to(x.dtype), h.to(x.dtype)


def eager(x, residual, weight, eps=1e-6):
    h = x + residual
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype) * weight
    return y, h


def _edge_samples(device: str) -> list[tuple]:
    # eps dominates tiny rows; huge rows must not overflow in fp16/bf16 (fp32 accumulation:
    # 200**2 already overflows fp16). eps = 0 only where no row is all zeros (0/0).
    n = 64
    samples = []
    for dtype, big in ((torch.float16, 200.0), (torch.bfloat16, 1e4), (torch.float32, 1e4)):
        weight = torch.linspace(0.5, 2.0, n).to(device=device, dtype=dtype)
        rows = [torch.full((n,), 1e-3), torch.full((n,), big), torch.linspace(-big, big, n)]
        x = torch.stack(rows).to(device=device, dtype=dtype)
        zero = torch.zeros_like(x)
        samples += [(x, zero, weight, eps) for eps in (0.0, 1e-6, 1.0)]
        with_zero_row = torch.cat([x, torch.zeros_like(x[:1])])
        samples.append((with_zero_row, torch.zeros_like(with_zero_row), weight, 1e-6))
    return samples


SPEC = OpSpec(
    name="fused_add_rms_norm",
    wrapper=fused_add_rms_norm,
    fake=fake,
    reference=reference,
    eager=eager,
    arguments={
        "x": Primary(),
        "residual": LikePrimary(),
        "weight": LastDimVector(),
        "eps": NonNegativeFloat(samples=(1e-6, 1e-5, 1.0)),
    },
    autograd=Autograd(_backward, _setup_context),
    edge_samples=_edge_samples,
    bench={
        "cpu": BenchTargets(max_vs_compiled=1.1, min_clone_bandwidth=0.75),
        "cuda": BenchTargets(min_clone_bandwidth=0.7),
    },
)
