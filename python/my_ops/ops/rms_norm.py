"""``rms_norm``: RMS normalization over the last dimension, the residual-free member of the
RMS norm family (``fused_add_rms_norm`` adds a residual first; both share one kernel).

eps is used in the compute precision: float32 for float32, float16 and bfloat16 inputs, as
eager's float computation uses it. An eps below float32's smallest subnormal (5e-324, say)
is therefore 0 there, and an all-zero row gives NaN (0/0), as eager and eps = 0 do.
"""

from __future__ import annotations

import torch

from .. import _library
from . import _checks
from ._spec import Autograd, BenchTargets, LastDimVector, NonNegativeFloat, OpSpec, Primary


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """``x * rsqrt(mean(x**2, -1) + eps) * weight``; fp16/bf16 inputs accumulate in fp32.

    Args:
        x: floating point tensor with at least one dimension.
        weight: 1-D tensor whose length equals ``x.shape[-1]``.
        eps: non-negative constant added to the mean square; by default the schema's
            (1e-6).

    Returns:
        A new tensor shaped like ``x``. Differentiable w.r.t. ``x`` and ``weight``.
    """
    _library.ensure_loaded()
    if eps is None:
        return torch.ops.my_ops.rms_norm(x, weight)
    return torch.ops.my_ops.rms_norm(x, weight, eps)


def fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _checks.new_like(x)


def compute_eps(eps: float, dtype: torch.dtype) -> float:
    """eps as the kernels use it: rounded to the compute precision of ``dtype``."""
    if dtype == torch.float64:
        return float(eps)
    return float(torch.tensor(eps, dtype=torch.float32))


def backward_of_h(h, weight, eps, grad_y):
    """(d loss / d h, d loss / d weight) of ``y = rms_norm(h) * weight``, in h's dtype."""
    rstd = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    n = h * rstd
    gn = grad_y * weight.to(h.dtype)
    # d/dh of h * rstd(h): rstd * (gn - n * mean(gn * n))
    grad_h = rstd * (gn - n * (gn * n).mean(-1, keepdim=True))
    return grad_h, _checks.sum_to_last_dim(grad_y * n).to(weight.dtype)


def _setup_context(ctx, inputs, output) -> None:
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _backward(ctx, grad_y):
    x, weight = ctx.saved_tensors
    cdt = _checks.compute_dtype(x)
    grad_h, grad_weight = backward_of_h(x.to(cdt), weight, ctx.eps, grad_y.to(cdt))
    return grad_h.to(x.dtype), grad_weight, None


def reference_of_h(h: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype):
    """``h * rsqrt(mean(h**2, -1) + eps) * weight`` in float64, eps as ``dtype`` uses it."""
    h64 = h.double()
    eps = compute_eps(eps, dtype)
    return (h64 * torch.rsqrt(h64.pow(2).mean(-1, keepdim=True) + eps) * weight.double()).to(dtype)


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The float64 reference, in x's dtype."""
    return reference_of_h(x, weight, eps, x.dtype)


def eager(x, weight, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def edge_samples(device: str, n: int = 64) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """(x, weight, eps): rows where eps dominates, where squares overflow fp16 without fp32
    accumulation (200**2 already does), and all-zero rows with an eps that float32 keeps,
    one it rounds to 0 (NaN, as eager) and eps = 0 (0/0: NaN in every dtype)."""
    samples = []
    for dtype, big in ((torch.float16, 200.0), (torch.bfloat16, 1e4), (torch.float32, 1e4)):
        weight = torch.linspace(0.5, 2.0, n).to(device=device, dtype=dtype)
        rows = [torch.full((n,), 1e-3), torch.full((n,), big), torch.linspace(-big, big, n)]
        x = torch.stack(rows).to(device=device, dtype=dtype)
        samples += [(x, weight, eps) for eps in (0.0, 1e-6, 1.0)]
        with_zero_row = torch.cat([x, torch.zeros_like(x[:1])])
        samples += [(with_zero_row, weight, eps) for eps in (1e-6, 5e-324, 0.0)]
    weight64 = torch.ones(n, dtype=torch.float64, device=device)
    samples.append((torch.zeros(2, n, dtype=torch.float64, device=device), weight64, 5e-324))
    return samples


SPEC = OpSpec(
    name="rms_norm",
    wrapper=rms_norm,
    fake=fake,
    reference=reference,
    eager=eager,
    defaults={"eps": 1e-6},
    arguments={
        "x": Primary(),
        "weight": LastDimVector(),
        "eps": NonNegativeFloat(samples=(1e-6, 1e-5, 1.0)),
    },
    autograd=Autograd(_backward, _setup_context),
    edge_samples=edge_samples,
    bench={
        "cpu": BenchTargets(max_vs_compiled=1.1, min_clone_bandwidth=0.75),
        "cuda": BenchTargets(min_clone_bandwidth=0.7),
    },
)
