"""The quantized linear layers' math, in Python: weight quantizers and the float64 references.

``linear_int8`` and ``linear_int4`` (ops/quantized_linear/quantized_linear.h states the math)
quantize each row of ``x`` to 8 bits with a zero point on every call; the weights arrive
quantized, as :func:`quantize_weight_int8` and :func:`quantize_weight_int4` make them. The
references redo the activation quantization with the same float32 operations as the kernels,
so the integer sums are compared exactly, and compute the rest in float64.
"""

from __future__ import annotations

import math

import torch

# int4 values are stored as w + 8 in four bits, two to a byte, low bits first.
INT4_OFFSET = 8

# Scale values the CPU kernels refuse (the bad cases of both ops' specs): (what, value).
BAD_SCALES = (("zero", 0.0), ("negative", -0.5), ("nan", math.nan), ("inf", math.inf))


def quantize_weight_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: ``(int8 [N, K], float32 scales [N])`` with
    ``weight ~= q * scale[:, None]``; a channel of zeros gets scale 1."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
    return q, scale


def quantize_weight_int4(
    weight: torch.Tensor, group_size: int = 32, scale_dtype: torch.dtype = torch.float16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric group-wise int4: ``(uint8 [N, K / 2] packed, scales [N, K / group_size])``,
    each group of ``group_size`` consecutive in_features sharing a scale (max |w| / 7 in
    ``scale_dtype``, float16 or float32; values in [-8, 7], rounded against the scale as
    stored). float16 scales take 0.5 bits a weight where float32 take 1; a scale under
    float16's range takes its smallest step (the group is about zero), one over it raises."""
    if scale_dtype not in (torch.float16, torch.float32):
        raise ValueError(f"scale_dtype must be torch.float16 or torch.float32, got {scale_dtype}")
    w = weight.detach().float()
    n, k = w.shape
    if group_size <= 0 or k % group_size:
        raise ValueError(f"group_size {group_size} does not divide in_features {k}")
    groups = w.reshape(n, k // group_size, group_size)
    scale = groups.abs().amax(dim=2) / 7
    if scale_dtype == torch.float16:
        largest = torch.finfo(torch.float16).max
        if bool((scale > largest).any()):
            raise ValueError(
                f"a group's largest |weight| is {float(scale.max() * 7):.3g}: its scale does not "
                "fit float16 (use scale_dtype=torch.float32)"
            )
        smallest = 2.0**-24  # float16's smallest step
        scale = torch.where(scale > 0, scale.clamp(min=smallest), torch.ones_like(scale)).half()
    else:
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (groups / scale.float()[..., None]).round().clamp(-8, 7).reshape(n, k)
    return pack_int4(q.to(torch.int8)), scale


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """int values in [-8, 7], ``[N, K]`` with K even, as the ops' uint8 ``[N, K / 2]``."""
    v = (values.to(torch.int16) + INT4_OFFSET).to(torch.uint8)
    return (v[:, 0::2] | (v[:, 1::2] << 4)).contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The int values (int16, ``[N, K]``) of the ops' packed uint8 ``[N, K / 2]``."""
    p = packed.to(torch.int16)
    low, high = (p & 15) - INT4_OFFSET, (p >> 4) - INT4_OFFSET
    return torch.stack([low, high], dim=-1).reshape(packed.shape[0], 2 * packed.shape[1])


def quantize_activations(x: torch.Tensor):
    """``(q, zero, scale, finite)`` for each row of ``x`` (every dim but the last), as the
    kernels compute them: q and zero as float32 integers in [0, 255], scale float32, and
    whether the row is finite (its outputs are NaN otherwise)."""
    k = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    xf = x.detach().float().reshape(rows, k)
    zeros = torch.zeros(rows, dtype=torch.float32, device=x.device)
    lo = xf.amin(dim=1).clamp(max=0) if k else zeros
    hi = xf.amax(dim=1).clamp(min=0) if k else zeros
    span = hi - lo
    finite = torch.isfinite(xf).all(dim=1) & torch.isfinite(span)
    scale = span / torch.full_like(span, 255.0)
    # Below float32's smallest normal number 1 / scale would overflow: the row counts as zeros.
    scale = torch.where(scale < torch.finfo(torch.float32).tiny, torch.ones_like(scale), scale)
    scale = torch.where(finite, scale, torch.ones_like(scale))
    inverse = torch.ones_like(scale) / scale
    zero = (-(torch.where(finite, lo, zeros) * inverse).round()).clamp(0, 255)
    q = ((xf * inverse[:, None]).round() + zero[:, None]).clamp(0, 255)
    q = torch.where(finite[:, None], q, torch.zeros_like(q))
    return q, zero, scale, finite


def _usable(scale: torch.Tensor) -> torch.Tensor:
    return (scale > 0) & torch.isfinite(scale)


def _finish(x, out: torch.Tensor, bias, finite, usable_channels) -> torch.Tensor:
    """NaN in non-finite rows, and in channels with a scale that is zero, negative or not
    finite: the CUDA kernels' answer to a scale that the CPU kernels refuse."""
    if bias is not None:
        out = out + bias.double()
    keep = finite[:, None] & usable_channels[None, :]
    out = torch.where(keep, out, torch.full_like(out, float("nan")))
    return out.reshape(*x.shape[:-1], out.shape[-1]).to(x.dtype)


def reference_int8(x, weight, weight_scale, bias=None) -> torch.Tensor:
    q, zero, scale, finite = quantize_activations(x)
    sums = (q - zero[:, None]).double() @ weight.double().t()  # exact: integers below 2**53
    out = sums * (scale.double()[:, None] * weight_scale.double()[None, :])
    return _finish(x, out, bias, finite, _usable(weight_scale))


def reference_int4(x, weight, weight_scale, group_size=32, bias=None) -> torch.Tensor:
    q, zero, scale, finite = quantize_activations(x)
    rows, k = q.shape
    n = weight.shape[0]
    groups = k // group_size
    centered = (q - zero[:, None]).double().reshape(rows, groups, group_size)
    w = unpack_int4(weight).double().reshape(n, groups, group_size)
    sums = torch.einsum("mgk,ngk->mng", centered, w)  # exact: integers below 2**53
    out = scale.double()[:, None] * (sums * weight_scale.double()[None]).sum(dim=2)
    return _finish(x, out, bias, finite, _usable(weight_scale).all(dim=1))
