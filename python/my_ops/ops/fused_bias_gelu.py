"""``fused_bias_gelu``: ``gelu(x + bias)`` in one pass over ``x``."""

from __future__ import annotations

import math

import torch

from .. import _library
from . import _checks
from ._spec import Autograd, BenchTargets, Choice, LastDimVector, OpSpec, Primary

_APPROXIMATE = ("none", "tanh")


def fused_bias_gelu(x: torch.Tensor, bias: torch.Tensor, approximate: str | None = None):
    """Compute ``gelu(x + bias)`` in one pass.

    Args:
        x: floating point tensor with at least one dimension.
        bias: 1-D tensor whose length equals ``x.shape[-1]``.
        approximate: ``"none"`` (erf formulation) or ``"tanh"``; by default the schema's
            (``"none"``).

    Returns:
        A new tensor with the shape and dtype of ``x``. Differentiable w.r.t. ``x`` and
        ``bias``.
    """
    _library.ensure_loaded()
    if approximate is None:
        return torch.ops.my_ops.fused_bias_gelu(x, bias)
    return torch.ops.my_ops.fused_bias_gelu(x, bias, approximate)


def fake(x: torch.Tensor, bias: torch.Tensor, approximate: str) -> torch.Tensor:
    return _checks.new_like(x)


def _setup_context(ctx, inputs, output) -> None:
    x, bias, approximate = inputs
    ctx.save_for_backward(x, bias)
    ctx.approximate = approximate


def _backward(ctx, grad):
    x, bias = ctx.saved_tensors
    cdt = _checks.compute_dtype(x)
    h = x.to(cdt) + bias.to(cdt)
    grad_h = torch.ops.aten.gelu_backward(grad.to(cdt), h, approximate=ctx.approximate)
    return grad_h.to(x.dtype), _checks.sum_to_last_dim(grad_h).to(bias.dtype), None


def reference(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``gelu(x + bias)`` in float64, written out rather than through ``F.gelu``."""
    h = x.double() + bias.double()
    if approximate == "none":
        out = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
    elif approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))
        out = 0.5 * h * (1.0 + torch.tanh(inner))
    else:
        raise ValueError(f"unknown approximate: {approximate!r}")
    return out.to(x.dtype)


def eager(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return torch.nn.functional.gelu(x + bias, approximate=approximate)


def _edge_samples(device: str) -> list[tuple]:
    # Magnitudes where a naive erf/tanh/exp overflows or loses the sign.
    x = torch.tensor([[-1e4, -30.0, -5.0, -1e-8, 0.0, 1e-8, 5.0, 30.0, 1e4]], device=device)
    bias = torch.zeros(x.shape[-1], device=device)
    return [(x, bias, approximate) for approximate in _APPROXIMATE]


SPEC = OpSpec(
    name="fused_bias_gelu",
    wrapper=fused_bias_gelu,
    fake=fake,
    reference=reference,
    eager=eager,
    defaults={"approximate": "none"},
    arguments={"x": Primary(), "bias": LastDimVector(), "approximate": Choice(_APPROXIMATE)},
    autograd=Autograd(_backward, _setup_context),
    edge_samples=_edge_samples,
    bench={
        "cpu": BenchTargets(min_vs_eager=1.5, max_vs_compiled=1.1, min_clone_bandwidth=0.75),
        "cuda": BenchTargets(min_clone_bandwidth=0.8),
    },
)
