"""``silu_and_mul``: the gated activation of SwiGLU MLPs (LLaMA-style), as vLLM ships it.

``x`` holds the gate and up projections side by side, ``[..., 2d]``; the output is
``silu(x[..., :d]) * x[..., d:]``, ``[..., d]``, in one pass over ``x``.
"""

from __future__ import annotations

import torch

from .. import _library
from . import _checks
from ._spec import Autograd, BenchTargets, OpSpec, Primary


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """Compute ``silu(x[..., :d]) * x[..., d:]`` where ``x.shape[-1] == 2 * d``.

    Args:
        x: floating point tensor with at least one dimension and an even last dimension.

    Returns:
        A new contiguous tensor of shape ``x.shape[:-1] + (d,)`` and x's dtype.
        Differentiable w.r.t. ``x``.
    """
    _library.ensure_loaded()
    return torch.ops.my_ops.silu_and_mul(x)


def fake(x: torch.Tensor) -> torch.Tensor:
    return _checks.new_like(x, (*x.shape[:-1], x.shape[-1] // 2))


def _setup_context(ctx, inputs, output) -> None:
    (x,) = inputs
    ctx.save_for_backward(x)


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    cdt = _checks.compute_dtype(x)
    a, b = x.to(cdt).chunk(2, dim=-1)
    g = grad.to(cdt)
    sig = torch.sigmoid(a)
    # d silu(a) / da = sig(a) * (1 + a * (1 - sig(a)))
    grad_a = g * b * sig * (1 + a * (1 - sig))
    grad_b = g * a * sig
    return torch.cat([grad_a, grad_b], dim=-1).to(x.dtype)


def reference(x: torch.Tensor) -> torch.Tensor:
    """``a / (1 + exp(-a)) * b`` in float64, written out rather than through ``F.silu``."""
    a, b = x.double().chunk(2, dim=-1)
    return (a / (1.0 + torch.exp(-a)) * b).to(x.dtype)


def eager(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]


def _edge_samples(device: str) -> list[tuple]:
    # exp(-a) overflows for very negative a (silu -> -0, not NaN) and underflows for large a.
    a = torch.tensor([-1e4, -100.0, -20.0, -1e-8, 0.0, 1e-8, 20.0, 100.0, 1e4])
    b = torch.tensor([1.0, -2.0, 3.0, 1e4, -1e4, 0.5, -0.5, 1e-3, 1.0])
    x = torch.cat([a, b]).reshape(1, -1)
    return [(x.to(device=device, dtype=dtype),) for dtype in (torch.float32, torch.float64)]


SPEC = OpSpec(
    name="silu_and_mul",
    wrapper=silu_and_mul,
    fake=fake,
    reference=reference,
    eager=eager,
    arguments={"x": Primary(last_dim_multiple=2)},
    autograd=Autograd(_backward, _setup_context),
    edge_samples=_edge_samples,
    bench={
        "cpu": BenchTargets(min_vs_eager=1.5, max_vs_compiled=1.1, min_clone_bandwidth=0.75),
        "cuda": BenchTargets(min_clone_bandwidth=0.8),
    },
)
