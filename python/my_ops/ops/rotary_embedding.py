"""``rotary_embedding``: rotary position embedding (RoPE), as LLaMA-family models apply it to
queries and keys.

``x`` is ``[..., seq, heads, head_dim]``; ``cos`` and ``sin`` are ``[seq, head_dim / 2]``,
one angle per position and pair of features (the half-size tables: the full-size
``[seq, head_dim]`` tables that some models build repeat every angle twice). Each pair
``(a, b)`` of features becomes ``(a cos - b sin, b cos + a sin)``; the pairs are
``(i, i + head_dim / 2)`` by default (the half-split layout of GPT-NeoX and LLaMA) and
``(2i, 2i + 1)`` with ``interleaved=True`` (GPT-J).
"""

from __future__ import annotations

import torch

from .. import _library
from . import _checks
from ._roles import Flag, PositionTable
from ._spec import Autograd, BenchTargets, OpSpec, Primary


def rotary_embedding(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool | None = None
) -> torch.Tensor:
    """Rotate each pair of features of ``x`` by the angle of its position.

    Args:
        x: floating point tensor ``[..., seq, heads, head_dim]``, head_dim even.
        cos: ``[seq, head_dim / 2]``, the cosines of the angles, x's dtype and device.
        sin: ``[seq, head_dim / 2]``, their sines.
        interleaved: pairs ``(2i, 2i + 1)`` (GPT-J) instead of ``(i, i + head_dim / 2)``
            (GPT-NeoX, LLaMA); by default the schema's (False).

    Returns:
        A new tensor shaped like ``x``; fp16/bf16 compute in fp32 and round once.
        Differentiable w.r.t. ``x``, ``cos`` and ``sin``.
    """
    _library.ensure_loaded()
    if interleaved is None:
        return torch.ops.my_ops.rotary_embedding(x, cos, sin)
    return torch.ops.my_ops.rotary_embedding(x, cos, sin, interleaved)


def fake(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool):
    return _checks.new_like(x)


def _pairs(t: torch.Tensor, interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The first and second members of every pair of features (views of t)."""
    if interleaved:
        return t[..., 0::2], t[..., 1::2]
    half = t.shape[-1] // 2
    return t[..., :half], t[..., half:]


def _sum_to_table(t: torch.Tensor) -> torch.Tensor:
    """[..., seq, heads, half] summed over the heads and every leading dim: [seq, half]."""
    return t.sum(dim=[*range(t.dim() - 3), t.dim() - 2])


def _setup_context(ctx, inputs, output) -> None:
    x, cos, sin, interleaved = inputs
    ctx.save_for_backward(x, cos, sin)
    ctx.interleaved = interleaved


def _backward(ctx, grad):
    x, cos, sin = ctx.saved_tensors
    # A rotation's transpose is the rotation by the opposite angle: sin -> -sin.
    grad_x = torch.ops.my_ops.rotary_embedding(grad, cos, -sin, ctx.interleaved)
    cdt = _checks.compute_dtype(x)
    a, b = _pairs(x.to(cdt), ctx.interleaved)
    ga, gb = _pairs(grad.to(cdt), ctx.interleaved)
    # d/dcos of (a cos - b sin, b cos + a sin) is (a, b); d/dsin is (-b, a).
    grad_cos = _sum_to_table(ga * a + gb * b).to(cos.dtype)
    grad_sin = _sum_to_table(gb * a - ga * b).to(sin.dtype)
    return grad_x, grad_cos, grad_sin, None


def reference(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False
) -> torch.Tensor:
    """The rotation of every pair in float64, written pair by pair, in x's dtype."""
    c = cos.double().unsqueeze(-2)  # [seq, 1, half]: the same angle for every head
    s = sin.double().unsqueeze(-2)
    a, b = _pairs(x.double(), interleaved)
    ra, rb = a * c - b * s, b * c + a * s
    if interleaved:
        out = torch.stack([ra, rb], dim=-1).flatten(-2)
    else:
        out = torch.cat([ra, rb], dim=-1)
    return out.to(x.dtype)


def eager(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False
) -> torch.Tensor:
    """As the Hugging Face LLaMA and GPT-J code write it: full-size tables and a rotated x."""
    if interleaved:
        cos_full = cos.repeat_interleave(2, dim=-1)
        sin_full = sin.repeat_interleave(2, dim=-1)
        rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    else:
        cos_full = torch.cat([cos, cos], dim=-1)
        sin_full = torch.cat([sin, sin], dim=-1)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos_full.unsqueeze(-2) + rotated * sin_full.unsqueeze(-2)


def tables(
    seq: int, head_dim: int, base: float = 10000.0, dtype=torch.float32, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(cos, sin)`` tables of LLaMA's RoPE: angle ``p * base ** (-2i / head_dim)``
    for position p and pair i, computed in float64 and rounded once to ``dtype``."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    return angles.cos().to(dtype=dtype, device=device), angles.sin().to(dtype=dtype, device=device)


def _edge_samples(device: str) -> list[tuple]:
    # LLaMA's tables; tables of 0, +-1 and 0.5, whose products are exact in every dtype;
    # values that underflow float16; and in half precision, pairs whose rotation cancels
    # to exactly zero or overflows float16 (60000 * sqrt(2) > 65504).
    samples = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        cos, sin = tables(8, 16, dtype=dtype, device=device)
        quarter = torch.tensor([[1.0, 0.0, 0.0, 1.0, -1.0, 0.0, 0.5, 0.0]] * 8)
        c_exact = quarter.to(device=device, dtype=dtype)
        s_exact = quarter.flip(-1).to(device=device, dtype=dtype)
        big = torch.full((1, 8, 2, 16), 60000.0).to(device=device, dtype=dtype)
        tiny = torch.full((1, 8, 2, 16), 1e-30).to(device=device, dtype=dtype)
        x = torch.linspace(-4.0, 4.0, 8 * 3 * 16).reshape(1, 8, 3, 16).to(device, dtype)
        diag = torch.full((8, 8), 0.70710678).to(device=device, dtype=dtype)
        for interleaved in (False, True):
            samples += [
                (x, cos, sin, interleaved),
                (x, c_exact, s_exact, interleaved),
                (tiny, cos, sin, interleaved),
            ]
            if dtype in (torch.float16, torch.bfloat16):
                # Only where the products are exact in float32 (an 11- or 8-bit table times
                # 60000): with float32 tables, whether a * c - b * s cancels exactly depends
                # on whether the compiler fuses it into an FMA, one rounding of a ~4e4
                # product (~2e-3), which is the op's float32 error at that magnitude but
                # beyond the suite's absolute tolerance for outputs near zero.
                samples.append((big, diag, diag, interleaved))
    return samples


SPEC = OpSpec(
    name="rotary_embedding",
    wrapper=rotary_embedding,
    fake=fake,
    reference=reference,
    eager=eager,
    defaults={"interleaved": False},
    arguments={
        "x": Primary(last_dim_multiple=2, min_dim=3),
        "cos": PositionTable(),
        "sin": PositionTable(),
        "interleaved": Flag(),
    },
    autograd=Autograd(_backward, _setup_context),
    edge_samples=_edge_samples,
    # cpu: 5.5x eager in float32 and 2.2x in bfloat16 at 4096 x 1024 on a busy 2-core host,
    # where its bandwidth against clone's was too noisy to set a target. cuda: the target
    # the other elementwise kernels meet, for the half-split packed path that //ops:bench
    # takes; tools/gpu_check is where it is measured.
    bench={
        "cpu": BenchTargets(min_vs_eager=1.5),
        "cuda": BenchTargets(min_clone_bandwidth=0.7),
    },
)
