"""Argument roles: what kind of value each argument of an op is, one class per kind.

An op's ``SPEC`` names each schema argument's role. This module is the op's side of a
role: what the argument must be (the role's fields), the fake's check of it
(:meth:`Role.check`, through ``_checks``, which mirrors ``ops/common/checks.h`` message for
message) and a typical valid value (:meth:`Role.example`, for example inputs).

The tests' side (valid samples in the tests' layouts, bad values with the argument they
blame, Hypothesis strategies and the fuzz oracle) lives with the tests, in
``python/tests/role_values.py``, one class per role here, as PyTorch keeps its OpInfos
apart from the ops: it is built from the roles' fields, never by calling
:meth:`Role.check`, so the tests check the checks instead of repeating them, and none of
it ships in the wheel. A new kind of argument is one subclass here and its values there;
``//python:role_values_test`` fails until both exist.

Every role but the primary is judged against the primary tensor ``x``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from . import _checks


class Role:
    """One kind of argument. Subclasses set ``schema_type`` and override what applies."""

    schema_type: ClassVar[str] = "Tensor"

    @property
    def is_tensor(self) -> bool:
        return self.schema_type == "Tensor"

    def check(self, op: str, name: str, value, x: torch.Tensor) -> None:
        """Refuse a bad ``value`` as the C++ kernels do, in their words (x already checked)."""
        raise NotImplementedError

    def example(self, x: torch.Tensor, build: Callable[[tuple[int, ...]], torch.Tensor]):
        """A typical valid value for primary ``x``; ``build(shape)`` makes a tensor of x's
        dtype and device."""
        raise NotImplementedError


# --- tensors ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Primary(Role):
    """The tensor every other argument is checked against (``x``).

    Any floating dtype (float32, float64, float16, bfloat16), at least ``min_dim``
    dimensions, any strides. ``last_dim_multiple``: the last dimension must be a multiple
    of it (2 for an op that splits the last dimension in halves or pairs).
    """

    last_dim_multiple: int = 1
    min_dim: int = 1

    def check(self, op, name, value, x) -> None:
        _checks.check_primary(op, value, self.last_dim_multiple, self.min_dim)

    def example(self, x, build):
        return x

    def shape_for(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``shape`` made valid: 1s inserted before the last dim up to ``min_dim`` dims (so
        the leading dim stays the leading dim), and the last dim scaled to the multiple."""
        if not shape:
            return shape
        *lead, last = shape
        lead += [1] * max(0, self.min_dim - len(shape))
        return (*lead, last * self.last_dim_multiple)


class FollowsPrimary(Role):
    """A tensor with x's dtype and device; subclasses say which shape, from x's."""

    def shape_of(self, x_shape: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError

    def example(self, x, build):
        return build(self.shape_of(tuple(x.shape)))


@dataclass(frozen=True)
class LikePrimary(FollowsPrimary):
    """A tensor with the primary's shape, dtype and device (a residual, a second operand)."""

    def check(self, op, name, value, x) -> None:
        _checks.check_like_primary(op, name, value, x)

    def shape_of(self, x_shape):
        return x_shape


@dataclass(frozen=True)
class LastDimVector(FollowsPrimary):
    """A 1-D tensor whose length is the primary's last dimension, with its dtype and device."""

    def check(self, op, name, value, x) -> None:
        _checks.check_last_dim_vector(op, name, value, x)

    def shape_of(self, x_shape):
        return (x_shape[-1],)


@dataclass(frozen=True)
class PositionTable(FollowsPrimary):
    """A 2-D table with x's dtype and device, one row per position of x's dim ``seq_dim``
    and ``x.shape[-1] // last_dim_divisor`` columns: a rotary cos or sin table,
    ``[seq, head_dim / 2]`` for ``x [..., seq, heads, head_dim]``."""

    seq_dim: int = -3
    last_dim_divisor: int = 2

    def check(self, op, name, value, x) -> None:
        _checks.check_same_device_and_dtype(op, name, value, x)
        torch._check(
            value.dim() == 2,
            lambda: (
                f"{op}: expected {name} to be 2-D [seq, head_dim / 2], got {value.dim()}-D "
                f"with shape {list(value.shape)}"
            ),
        )
        seq, cols = self.shape_of(tuple(x.shape))
        torch._check(
            value.shape[0] == seq and value.shape[1] == cols,
            lambda: (
                f"{op}: expected {name} to have shape [{seq}, {cols}] (x's seq dim, "
                f"head_dim / 2), got {list(value.shape)}"
            ),
        )

    def shape_of(self, x_shape):
        return (x_shape[self.seq_dim], x_shape[-1] // self.last_dim_divisor)


# --- scalars ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NonNegativeFloat(Role):
    """A float that must be ``>= 0`` (NaN is refused). ``samples``: valid values, the first
    a typical one (the tests call with each)."""

    samples: tuple[float, ...] = (1e-6,)
    schema_type: ClassVar[str] = "float"

    def check(self, op, name, value, x) -> None:
        _checks.check_non_negative(op, name, value)

    def example(self, x, build):
        return self.samples[0]


@dataclass(frozen=True)
class Choice(Role):
    """A string that must be one of ``values``, spelled exactly; the first is typical."""

    values: tuple[str, ...]
    schema_type: ClassVar[str] = "str"

    def check(self, op, name, value, x) -> None:
        _checks.check_choice(op, name, value, self.values)

    def example(self, x, build):
        return self.values[0]


@dataclass(frozen=True)
class Flag(Choice):
    """A bool choosing between two code paths.

    There is no wrong bool: only values of other types are wrong, and the schema refuses
    them before any check runs.
    """

    values: tuple = (False, True)
    schema_type: ClassVar[str] = "bool"

    def check(self, op, name, value, x) -> None:
        pass
