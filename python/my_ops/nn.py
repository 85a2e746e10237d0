"""``torch.nn`` modules backed by the my_ops custom class."""

from __future__ import annotations

import torch

from . import _library
from .ops import fused_add_rms_norm, rms_norm

__all__ = ["BENCH", "FakeRMSNorm", "RMSNorm", "reference"]

# //ops:bench targets of RMSNorm.forward (the TorchBind object's residual-free path), per
# device type: the bandwidth of the rms_norm op it runs.
BENCH = rms_norm.SPEC.bench


class RMSNorm(torch.nn.Module):
    """RMS normalization over the last dimension backed by ``torch.classes.my_ops.RMSNorm``.

    The module owns a TorchBind object (attribute ``rms_norm``), so ``torch.export`` records
    it as a custom object and calls it through ``call_torchbind``. The object holds the
    weight; this module is meant for inference (gradients do not flow into the weight).
    The class is in the companion library, built for one torch release: under another,
    constructing the module raises :class:`my_ops.CompanionUnavailableError`.

    Args:
        weight_or_hidden_size: a 1-D weight tensor, or an int ``hidden_size`` (weight of ones).
        eps: non-negative constant added to the mean square; by default the one the
            ``rms_norm`` schema declares (1e-6).
    """

    def __init__(self, weight_or_hidden_size: torch.Tensor | int, eps: float | None = None):
        super().__init__()
        _library.require_companion("my_ops.nn.RMSNorm")
        if eps is None:
            eps = rms_norm.SPEC.schema_default("eps")
        if isinstance(weight_or_hidden_size, torch.Tensor):
            weight = weight_or_hidden_size.detach().clone()
        else:
            weight = torch.ones(int(weight_or_hidden_size))
        self.rms_norm = torch.classes.my_ops.RMSNorm(weight, float(eps))

    @property
    def weight(self) -> torch.Tensor:
        return self.rms_norm.weight()

    @property
    def eps(self) -> float:
        return self.rms_norm.eps()

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Return ``rms_norm(x)``, or ``(rms_norm(x + residual), x + residual)``."""
        if residual is None:
            return self.rms_norm.forward(x)
        if torch.compiler.is_dynamo_compiling():
            # torch.compile cannot functionalize a TorchBind method whose schema returns a
            # tuple (call_torchbind + effect tokens expect one output per schema return), so
            # under Dynamo the same math goes through the functional op.
            return torch.ops.my_ops.fused_add_rms_norm(
                x, residual, self.rms_norm.weight(), self.rms_norm.eps()
            )
        return self.rms_norm.forward_residual(x, residual)

    def _apply(self, fn, recurse=True):
        # Keep the TorchBind object's weight in step with .to()/.cuda()/.half().
        module = super()._apply(fn, recurse)
        weight = fn(self.rms_norm.weight())
        self.rms_norm = torch.classes.my_ops.RMSNorm(weight, self.rms_norm.eps())
        return module

    def extra_repr(self) -> str:
        w = self.weight
        return f"{w.shape[0]}, eps={self.eps}, dtype={w.dtype}, device={w.device}"


class FakeRMSNorm:
    """Fake counterpart of ``torch.classes.my_ops.RMSNorm`` for torch.export / compile.

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
        return rms_norm.SPEC.checked_fake(x, self._weight, self._eps)

    def forward_residual(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return fused_add_rms_norm.SPEC.checked_fake(x, residual, self._weight, self._eps)

    def weight(self) -> torch.Tensor:
        return self._weight

    def eps(self) -> float:
        return self._eps


def reference(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The float64 reference of ``RMSNorm.forward`` (or ``forward_residual`` with residual)."""
    if residual is None:
        return rms_norm.reference(x, weight, eps)
    return fused_add_rms_norm.reference(x, residual, weight, eps)
