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

    def check_in_call(self, op: str, name: str, value, x: torch.Tensor, args) -> None:
        """:meth:`check` with the call's other arguments at hand (``args``: name -> value),
        for a role judged against an argument other than x. Only the arguments checked
        before this one (the primary, then those before it in schema order) are known good.
        """
        self.check(op, name, value, x)

    def example(self, x: torch.Tensor, build: Callable[[tuple[int, ...]], torch.Tensor]):
        """A typical valid value for primary ``x``; ``build(shape)`` makes a tensor of x's
        dtype and device."""
        raise NotImplementedError

    def example_in_call(self, x: torch.Tensor, build, made) -> object:
        """:meth:`example` with the values made so far at hand (``made``: name -> value,
        in schema order), for a role that follows an argument other than x."""
        return self.example(x, build)


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
    # What the other arguments need of x's last dim (a group size dividing it) without x
    # being wrong otherwise: sample shapes round their last dim up to a multiple of it.
    sample_last_dim_multiple: int = 1

    def check(self, op, name, value, x) -> None:
        _checks.check_primary(op, value, self.last_dim_multiple, self.min_dim)

    def example(self, x, build):
        return x

    def shape_for(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``shape`` made valid: 1s inserted before the last dim up to ``min_dim`` dims (so
        the leading dim stays the leading dim), the last dim scaled to the multiple and
        rounded up to the sample multiple."""
        if not shape:
            return shape
        *lead, last = shape
        lead += [1] * max(0, self.min_dim - len(shape))
        last *= self.last_dim_multiple
        step = self.sample_last_dim_multiple
        return (*lead, max(step, -(-last // step) * step) if step > 1 else last)


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
    """A rotary cos or sin table: 2-D with x's dtype and device, one row per position and
    one column per rotated pair of features, at most ``x.shape[-1] // 2`` (fewer for a
    partial rotation). Without a ``positions`` argument (the name of a :class:`Positions`
    argument) a token's row is its index along x's dim ``seq_dim``, so the table has that
    many rows; with one, any number. ``like``: the table whose shape this one must have (sin
    follows cos). Typical: ``[seq, head_dim / 2]``."""

    seq_dim: int = -3
    positions: str = "positions"
    like: str | None = None

    def check(self, op, name, value, x) -> None:
        raise TypeError(f"{op}: {name} is judged against {self.positions}: use check_in_call")

    def check_in_call(self, op, name, value, x, args) -> None:
        _checks.check_same_device_and_dtype(op, name, value, x)
        torch._check(
            value.dim() == 2,
            lambda: (
                f"{op}: expected {name} to be 2-D [positions, rotary_dim / 2], got "
                f"{value.dim()}-D with shape {list(value.shape)}"
            ),
        )
        half = x.shape[-1] // 2
        torch._check(
            value.shape[1] <= half,
            lambda: (
                f"{op}: expected {name} to have at most {half} columns (head_dim / 2, or "
                f"fewer for a partial rotation), got {value.shape[1]}"
            ),
        )
        seq = x.shape[self.seq_dim]
        torch._check(
            args[self.positions] is not None or value.shape[0] == seq,
            lambda: (
                f"{op}: expected {name} to have {seq} rows (x's seq dim) when "
                f"{self.positions} is None, got {value.shape[0]}"
            ),
        )
        if self.like is not None:
            like = args[self.like]
            torch._check(
                value.shape == like.shape,
                lambda: (
                    f"{op}: expected {name} to have the shape of {self.like} "
                    f"({list(like.shape)}), got {list(value.shape)}"
                ),
            )

    def shape_of(self, x_shape):
        return (x_shape[self.seq_dim], x_shape[-1] // 2)


@dataclass(frozen=True)
class Positions(Role):
    """``None``, or the int64 positions of x's tokens on x's device, each a row of the
    rotary tables: ``[seq]`` (the same for every leading index of x; a decode step at
    position p is ``[p]``) or x's dims before its last two (one per token). Whether each
    is a row of the tables only the kernels can check: a fake sees no values."""

    seq_dim: int = -3

    def check(self, op, name, value, x) -> None:
        if value is None:
            return
        _checks.check_same_device(op, name, value, x)
        torch._check(
            value.dtype == torch.int64,
            lambda: f"{op}: expected {name} to have dtype int64, got {value.dtype}",
        )
        seq, tokens = x.shape[self.seq_dim], list(x.shape[:-2])
        torch._check(
            list(value.shape) in ([seq], tokens),
            lambda: (
                f"{op}: expected {name} to have shape [{seq}] (x's seq dim) or {tokens} "
                f"(x's dims before heads), got {list(value.shape)}"
            ),
        )

    def example(self, x, build):
        return None


# --- quantized weights (the quantized linear layers) -------------------------------------


@dataclass(frozen=True)
class QuantizedWeight(Role):
    """A quantized weight matrix ``[out_features, in_features * bits / 8]`` on x's device,
    ``in_features`` being x's last dim and ``out_features`` free: int8 for ``bits`` 8,
    uint8 holding two int4 values a byte for ``bits`` 4 (``ops/quantized_linear``)."""

    bits: int = 8

    @property
    def dtype(self) -> torch.dtype:
        return torch.int8 if self.bits == 8 else torch.uint8

    @property
    def per_byte(self) -> int:
        return 8 // self.bits

    def check(self, op, name, value, x) -> None:
        _checks.check_quantized_weight(op, name, value, x, self.dtype, self.per_byte)

    def shape_of(self, x_shape: tuple[int, ...], out_features: int) -> tuple[int, int]:
        return (out_features, x_shape[-1] // self.per_byte)

    def example(self, x, build):
        low, high = (-128, 128) if self.bits == 8 else (0, 256)
        return torch.randint(low, high, self.shape_of(tuple(x.shape), 3), dtype=self.dtype).to(
            x.device
        )


@dataclass(frozen=True)
class PackedWeight(Role):
    """A float32 linear weight packed in panels of 32 output channels, ``[out_features /
    32, in_features, 32]`` on x's device, ``in_features`` being x's last dim and the
    panels free (``ops/packed_linear``, :func:`my_ops.pack_linear_weight`)."""

    @property
    def channels(self) -> int:
        return _checks.PANEL_CHANNELS

    def check(self, op, name, value, x) -> None:
        _checks.check_packed_weight(op, name, value, x)

    def shape_of(self, x_shape: tuple[int, ...], panels: int) -> tuple[int, int, int]:
        return (panels, x_shape[-1], self.channels)

    def example(self, x, build):
        return torch.randn(self.shape_of(tuple(x.shape), 2)).to(x.device)


@dataclass(frozen=True)
class GroupSize(Role):
    """How many consecutive in_features share a scale: a positive multiple of 32 that
    divides x's last dim. ``samples``: valid values for a last dim that is a multiple of
    the largest, the first typical."""

    samples: tuple[int, ...] = (32,)
    schema_type: ClassVar[str] = "int"

    def check(self, op, name, value, x) -> None:
        _checks.check_group_size(op, name, value, x)

    def example(self, x, build):
        return self.samples[0]


@dataclass(frozen=True)
class WeightScale(Role):
    """The scales of a :class:`QuantizedWeight` argument (``weight``), on x's device: one
    float32 per output channel, or, with ``group_size`` (the name of a :class:`GroupSize`
    argument), ``[out_features, in_features / group_size]`` of float32 or float16. Finite
    and positive, which only the kernels can check: a fake sees no values."""

    weight: str = "weight"
    group_size: str | None = None

    def check(self, op, name, value, x) -> None:
        raise TypeError(f"{op}: {name} is judged against {self.weight}: use check_in_call")

    def check_in_call(self, op, name, value, x, args) -> None:
        groups = None
        if self.group_size is not None:
            # The groups come from the group size, which the kernels check first.
            group_size = args[self.group_size]
            _checks.check_group_size(op, self.group_size, group_size, x)
            groups = x.shape[-1] // group_size
        _checks.check_weight_scale(op, name, value, x, args[self.weight].shape[0], groups)

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        return _checks.weight_scale_dtypes(self.group_size is not None)

    def shape_of(self, x_shape, out_features: int, group_size: int | None):
        if group_size is None:
            return (out_features,)
        return (out_features, x_shape[-1] // group_size)

    def example_in_call(self, x, build, made):
        group_size = None if self.group_size is None else made[self.group_size]
        shape = self.shape_of(tuple(x.shape), made[self.weight].shape[0], group_size)
        # What a symmetric quantizer gives weights of about unit size: max |w| / 127 (or 7).
        return build(shape).float().abs() * 0.01 + 1e-3


@dataclass(frozen=True)
class OptionalBias(Role):
    """``None``, or a vector of the output channels of a weight argument (``weight``) with
    x's dtype and device. ``channels_per_slice``: output channels per index of the weight's
    first dim (1 for a :class:`QuantizedWeight`, 32 for a :class:`PackedWeight`)."""

    weight: str = "weight"
    channels_per_slice: int = 1

    def out_features(self, weight: torch.Tensor) -> int:
        return weight.shape[0] * self.channels_per_slice

    def check(self, op, name, value, x) -> None:
        raise TypeError(f"{op}: {name} is judged against {self.weight}: use check_in_call")

    def check_in_call(self, op, name, value, x, args) -> None:
        _checks.check_optional_bias(op, name, value, x, self.out_features(args[self.weight]))

    def example_in_call(self, x, build, made):
        return build((self.out_features(made[self.weight]),))


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
