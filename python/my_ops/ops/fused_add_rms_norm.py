"""``fused_add_rms_norm``: the residual add and RMS norm of a transformer block, fused."""

from __future__ import annotations

import torch

from .. import _library
from . import _checks, rms_norm
from ._spec import (
    Autograd,
    BenchTargets,
    InPlace,
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


def fused_add_rms_norm_(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float | None = None
) -> None:
    """:func:`fused_add_rms_norm` in place, as vLLM's ``fused_add_rms_norm``: ``residual``
    becomes ``h = x + residual`` and ``x`` the normalized ``h``, with the values
    :func:`fused_add_rms_norm` returns, and no new tensor (a decoder's layers pass one
    residual stream through). Also refused: an ``x`` or ``residual`` that is expanded, or
    that shares memory with another argument. Not differentiable: a call that needs a
    gradient is refused (use :func:`fused_add_rms_norm`).
    """
    _library.ensure_loaded()
    if torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (x, residual, weight)
    ):
        raise RuntimeError(
            "fused_add_rms_norm_: writes its inputs in place, which has no gradient; call "
            "fused_add_rms_norm, or this under torch.no_grad()"
        )
    if eps is None:
        torch.ops.my_ops.fused_add_rms_norm_(x, residual, weight)
    else:
        torch.ops.my_ops.fused_add_rms_norm_(x, residual, weight, eps)


def fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return _checks.new_like(x), _checks.new_like(x)


def _setup_context(ctx, inputs, output) -> None:
    x, residual, weight, eps = inputs
    ctx.save_for_backward(x, residual, weight)
    ctx.eps = eps


def _backward(ctx, grad_y, grad_h):
    x, residual, weight = ctx.saved_tensors
    cdt = _checks.compute_dtype(x)
    h = x.to(cdt) + residual.to(cdt)
    gy = torch.zeros_like(h) if grad_y is None else grad_y.to(cdt)
    gh_total, grad_weight = rms_norm.backward_of_h(h, weight, ctx.eps, gy)
    if grad_h is not None:
        gh_total = gh_total + grad_h.to(cdt)
    return gh_total.to(x.dtype), gh_total.to(residual.dtype), grad_weight, None


def reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual) * weight, x + residual)`` in float64, in x's dtype."""
    h = x.double() + residual.double()
    return rms_norm.reference_of_h(h, weight, eps, x.dtype), h.to(x.dtype)


def eager(x, residual, weight, eps=1e-6):
    h = x + residual
    return rms_norm.eager(h, weight, eps), h


def _edge_samples(device: str) -> list[tuple]:
    # rms_norm's edge rows, split into x + residual so that both inputs carry them.
    samples = []
    for x, weight, eps in rms_norm.edge_samples(device):
        half = (x / 2).to(x.dtype)
        samples.append((half, x - half, weight, eps))
    return samples


SPEC = OpSpec(
    name="fused_add_rms_norm",
    wrapper=fused_add_rms_norm,
    fake=fake,
    reference=reference,
    eager=eager,
    defaults={"eps": 1e-6},
    arguments={
        "x": Primary(),
        "residual": LikePrimary(),
        "weight": LastDimVector(),
        "eps": NonNegativeFloat(samples=(1e-6, 1e-5, 1.0)),
    },
    autograd=Autograd(_backward, _setup_context),
    in_place=InPlace(writes=("x", "residual")),
    edge_samples=_edge_samples,
    bench={
        "cpu": BenchTargets(max_vs_compiled=1.1, min_clone_bandwidth=0.75),
        "cuda": BenchTargets(min_clone_bandwidth=0.7),
    },
)
