"""Argument checks shared by the fake implementations.

They mirror ``ops/common/checks.h`` message for message, so that torch.compile and
torch.export refuse a bad call at trace time with the words the kernels would use.
"""

from __future__ import annotations

import torch

FLOATING_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def check_defined(op: str, name: str, t: torch.Tensor | None) -> None:
    # The C++ kernels refuse an undefined (None) tensor by name; so must the fakes.
    torch._check(t is not None, lambda: f"{op}: expected {name} to be a defined tensor")


def check_primary(op: str, x: torch.Tensor, last_dim_multiple: int = 1, min_dim: int = 1) -> None:
    check_defined(op, "x", x)
    torch._check(
        x.dtype in FLOATING_DTYPES,
        lambda: (
            f"{op}: expected x to have a floating dtype (float32, float64, float16 or "
            f"bfloat16), got {x.dtype}"
        ),
    )
    torch._check(
        x.dim() >= 1, lambda: f"{op}: expected x to have at least 1 dimension, got a 0-d tensor"
    )
    if min_dim > 1:
        torch._check(
            x.dim() >= min_dim,
            lambda: f"{op}: expected x to have at least {min_dim} dimensions, got {x.dim()}",
        )
    if last_dim_multiple > 1:
        torch._check(
            x.shape[-1] % last_dim_multiple == 0,
            lambda: (
                f"{op}: expected x to have a last dimension divisible by {last_dim_multiple}, "
                f"got {x.shape[-1]}"
            ),
        )


def check_same_device(op: str, name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    check_defined(op, name, t)
    torch._check(
        t.device == x.device,
        lambda: f"{op}: expected {name} to be on the same device as x ({x.device}), got {t.device}",
    )


def check_same_device_and_dtype(op: str, name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    check_same_device(op, name, t, x)
    torch._check(
        t.dtype == x.dtype,
        lambda: f"{op}: expected {name} to have the same dtype as x ({x.dtype}), got {t.dtype}",
    )


def check_like_primary(op: str, name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    check_same_device_and_dtype(op, name, t, x)
    torch._check(
        t.shape == x.shape,
        lambda: (
            f"{op}: expected {name} to have the same shape as x ({tuple(x.shape)}), "
            f"got {tuple(t.shape)}"
        ),
    )


def check_last_dim_vector(op: str, name: str, v: torch.Tensor, x: torch.Tensor) -> None:
    check_same_device_and_dtype(op, name, v, x)
    torch._check(v.dim() == 1, lambda: f"{op}: expected {name} to be 1-D, got {v.dim()}-D")
    torch._check(
        v.shape[0] == x.shape[-1],
        lambda: (
            f"{op}: expected {name} to have size {x.shape[-1]} (the last dim of x), "
            f"got {v.shape[0]}"
        ),
    )


def check_non_negative(op: str, name: str, value: float) -> None:
    # Written as `value >= 0` so that NaN is refused too.
    torch._check(value >= 0, lambda: f"{op}: expected {name} to be >= 0, got {value}")


def check_choice(op: str, name: str, value: str, choices: tuple[str, ...]) -> None:
    torch._check(
        value in choices,
        lambda: (
            f"{op}: expected {name} to be "
            + " or ".join(f'"{c}"' for c in choices)
            + f', got "{value}"'
        ),
    )


# --- the quantized linear layers (ops/quantized_linear/quantized_linear.h) -----------------

# Group sizes of linear_int4 are multiples of this (whole bytes of packed weights).
INT4_GROUP_MULTIPLE = 32


def check_quantized_weight(
    op: str, name: str, w: torch.Tensor, x: torch.Tensor, dtype: torch.dtype, per_byte: int
) -> None:
    check_same_device(op, name, w, x)
    packed = " (two int4 values a byte)" if per_byte == 2 else ""
    torch._check(
        w.dtype == dtype,
        lambda: f"{op}: expected {name} to have dtype {dtype}{packed}, got {w.dtype}",
    )
    columns = "in_features / 2" if per_byte == 2 else "in_features"
    torch._check(
        w.dim() == 2,
        lambda: (
            f"{op}: expected {name} to be 2-D [out_features, {columns}], got {w.dim()}-D with "
            f"shape {list(w.shape)}"
        ),
    )
    torch._check(
        w.shape[1] * per_byte == x.shape[-1],
        lambda: (
            f"{op}: expected {name} to have {x.shape[-1] // per_byte} columns (x's last dim"
            f"{' / 2' if per_byte == 2 else ''}), got {w.shape[1]}"
        ),
    )


def weight_scale_dtypes(grouped: bool) -> tuple[torch.dtype, ...]:
    """The dtypes of a quantized weight's scales: float32 per output channel, float32 or
    float16 per group."""
    return (torch.float32, torch.float16) if grouped else (torch.float32,)


def check_weight_scale(
    op: str, name: str, s: torch.Tensor, x: torch.Tensor, out_features: int, groups: int | None
) -> None:
    """``groups`` None: one scale per output channel, else [out_features, groups]."""
    check_same_device(op, name, s, x)
    allowed = weight_scale_dtypes(groups is not None)
    torch._check(
        s.dtype in allowed,
        lambda: (
            f"{op}: expected {name} to have dtype {' or '.join(map(str, allowed))}, got {s.dtype}"
        ),
    )
    if groups is None:
        torch._check(
            s.dim() == 1 and s.shape[0] == out_features,
            lambda: (
                f"{op}: expected {name} to have shape [{out_features}] (one scale per output "
                f"channel), got {list(s.shape)}"
            ),
        )
    else:
        torch._check(
            s.dim() == 2 and s.shape[0] == out_features and s.shape[1] == groups,
            lambda: (
                f"{op}: expected {name} to have shape [{out_features}, {groups}] (output "
                f"channels, groups of in_features), got {list(s.shape)}"
            ),
        )


# Output channels per panel of linear_packed's weight (ops/packed_linear/packed_linear.h).
PANEL_CHANNELS = 32


def check_packed_weight(op: str, name: str, w: torch.Tensor, x: torch.Tensor) -> None:
    check_same_device(op, name, w, x)
    torch._check(
        w.dtype == torch.float32,
        lambda: f"{op}: expected {name} to have dtype torch.float32, got {w.dtype}",
    )
    torch._check(
        w.dim() == 3 and w.shape[2] == PANEL_CHANNELS,
        lambda: (
            f"{op}: expected {name} to be packed, 3-D [out_features / {PANEL_CHANNELS}, "
            f"in_features, {PANEL_CHANNELS}] (my_ops.pack_linear_weight), got shape "
            f"{list(w.shape)}"
        ),
    )
    torch._check(
        w.shape[1] == x.shape[-1],
        lambda: (
            f"{op}: expected {name} to have in_features {x.shape[-1]} (x's last dim) in dim 1, "
            f"got {w.shape[1]}"
        ),
    )


def check_optional_bias(
    op: str, name: str, b: torch.Tensor | None, x: torch.Tensor, out_features: int
) -> None:
    if b is None:
        return
    check_same_device_and_dtype(op, name, b, x)
    torch._check(
        b.dim() == 1 and b.shape[0] == out_features,
        lambda: (
            f"{op}: expected {name} to have shape [{out_features}] (weight's out_features), "
            f"got {list(b.shape)}"
        ),
    )


def check_group_size(op: str, name: str, group_size: int, x: torch.Tensor) -> None:
    k = x.shape[-1]
    torch._check(
        group_size > 0 and group_size % INT4_GROUP_MULTIPLE == 0,
        lambda: (
            f"{op}: expected {name} to be a positive multiple of {INT4_GROUP_MULTIPLE}, "
            f"got {group_size}"
        ),
    )
    torch._check(
        k % group_size == 0,
        lambda: f"{op}: expected {name} to divide x's last dim ({k}), got {group_size}",
    )


def new_like(x: torch.Tensor, shape=None) -> torch.Tensor:
    """A new contiguous tensor on x's device with x's dtype (and x's shape by default)."""
    return torch.empty(x.shape if shape is None else shape, dtype=x.dtype, device=x.device)


def compute_dtype(t: torch.Tensor) -> torch.dtype:
    # Half precision backward math runs in fp32, like the forward kernels.
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def sum_to_last_dim(t: torch.Tensor) -> torch.Tensor:
    """Sum over every dimension but the last (works for 1-D and zero-size tensors)."""
    return t.flatten(0, -2).sum(0) if t.dim() > 1 else t
