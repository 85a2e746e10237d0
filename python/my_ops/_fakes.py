"""Fake (meta) implementations used by torch.compile / torch.export.

Registered once, by :mod:`my_ops` itself, as soon as the ``my_ops`` ops exist.
"""

from __future__ import annotations

import torch

_SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _check_defined(op: str, name: str, t: torch.Tensor | None) -> None:
    # The C++ kernels refuse an undefined (None) tensor by name; so must the fakes.
    torch._check(t is not None, lambda: f"{op}: expected {name} to be a defined tensor")


def _check_primary(op: str, x: torch.Tensor) -> None:
    _check_defined(op, "x", x)
    torch._check(
        x.dtype in _SUPPORTED_DTYPES,
        lambda: (
            f"{op}: expected x to have a floating dtype (float32, float64, float16 or "
            f"bfloat16), got {x.dtype}"
        ),
    )
    torch._check(
        x.dim() >= 1, lambda: f"{op}: expected x to have at least 1 dimension, got a 0-d tensor"
    )


def _check_same_device_and_dtype(op: str, name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    _check_defined(op, name, t)
    torch._check(
        t.device == x.device,
        lambda: f"{op}: expected {name} to be on the same device as x ({x.device}), got {t.device}",
    )
    torch._check(
        t.dtype == x.dtype,
        lambda: f"{op}: expected {name} to have the same dtype as x ({x.dtype}), got {t.dtype}",
    )


def _check_vector(op: str, name: str, v: torch.Tensor, x: torch.Tensor) -> None:
    _check_same_device_and_dtype(op, name, v, x)
    torch._check(v.dim() == 1, lambda: f"{op}: expected {name} to be 1-D, got {v.dim()}-D")
    torch._check(
        v.shape[0] == x.shape[-1],
        lambda: (
            f"{op}: expected {name} to have size {x.shape[-1]} (the last dim of x), "
            f"got {v.shape[0]}"
        ),
    )


def _new_contiguous(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def identity_conv_op_fake(x: torch.Tensor) -> torch.Tensor:
    _check_primary("identity_conv_op", x)
    return _new_contiguous(x)


def fused_bias_gelu_fake(
    x: torch.Tensor, bias: torch.Tensor, approximate: str = "none"
) -> torch.Tensor:
    op = "fused_bias_gelu"
    _check_primary(op, x)
    _check_vector(op, "bias", bias, x)
    torch._check(
        approximate in ("none", "tanh"),
        lambda: f'{op}: expected approximate to be "none" or "tanh", got "{approximate}"',
    )
    return _new_contiguous(x)


def fused_add_rms_norm_fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    op = "fused_add_rms_norm"
    _check_primary(op, x)
    _check_same_device_and_dtype(op, "residual", residual, x)
    torch._check(
        residual.shape == x.shape,
        lambda: (
            f"{op}: expected residual to have the same shape as x ({tuple(x.shape)}), "
            f"got {tuple(residual.shape)}"
        ),
    )
    _check_vector(op, "weight", weight, x)
    # Written as `eps >= 0` so that NaN is rejected too.
    torch._check(eps >= 0, lambda: f"{op}: expected eps to be >= 0, got {eps}")
    return _new_contiguous(x), _new_contiguous(x)


class FakeRMSNorm:
    """Fake counterpart of ``torch.classes.my_ops.RMSNorm``.

    Fields are stored as ``_weight``/``_eps``: an attribute named like a C++ method
    (``weight``/``eps``) would shadow the method and break torch.export.
    """

    def __init__(self, weight: torch.Tensor, eps: float):
        self._weight = weight
        self._eps = eps

    @classmethod
    def __obj_unflatten__(cls, flat):
        fields = dict(flat)
        return cls(fields["weight"], fields["eps"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_add_rms_norm_fake(x, x, self._weight, self._eps)[0]

    def forward_residual(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return fused_add_rms_norm_fake(x, residual, self._weight, self._eps)

    def weight(self) -> torch.Tensor:
        return self._weight

    def eps(self) -> float:
        return self._eps


FAKE_IMPLS = {
    "my_ops::identity_conv_op": identity_conv_op_fake,
    "my_ops::fused_bias_gelu": fused_bias_gelu_fake,
    "my_ops::fused_add_rms_norm": fused_add_rms_norm_fake,
}
FAKE_CLASSES = {"my_ops::RMSNorm": FakeRMSNorm}
