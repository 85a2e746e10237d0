"""Argument roles: what kind of value each argument of an op is, one class per kind.

An op's ``SPEC`` names each schema argument's role. A role class holds everything the
project knows about that kind of argument, in two halves written independently of each
other:

* the op's side, :meth:`Role.check`: the fake's argument check (through ``_checks``, which
  mirrors ``ops/common/checks.h`` message for message), run by ``OpSpec.check_args``;
* the tests' side: valid samples (:meth:`Role.make`, :meth:`Role.valid_values`), bad values
  with the argument they blame (:meth:`Role.bad_values`), Hypothesis strategies for
  property tests and fuzzing (:meth:`Role.draw_valid`, :meth:`Role.fuzz`) and the fuzz
  oracle (:meth:`Role.fuzz_wrong`, :meth:`Role.schema_accepts`). They are built from the
  role's description, never by calling :meth:`Role.check`, so the tests check the checks
  instead of repeating them.

Every role but the primary is judged against the primary tensor ``x``, which the tests
build first. A new kind of argument is one new subclass here: the suites iterate over
these methods and never switch on the class.

Hypothesis is imported inside the test-side methods only: the package does not need it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from . import _checks

# (what, f(valid value of the argument, valid primary) -> a wrong value)
BadValue = tuple[str, Callable[[Any, torch.Tensor], Any]]


def _is_tensor(value) -> bool:
    return isinstance(value, torch.Tensor)


def _fits_float_argument(value) -> bool:
    # What torch converts to a float schema argument: a Python real, or a one-element real
    # CPU tensor.
    if _is_tensor(value):
        return value.numel() == 1 and value.device.type == "cpu" and not value.is_complex()
    return isinstance(value, bool | int | float)


def _float_value(value) -> float:
    return float(value.item()) if _is_tensor(value) else float(value)


@dataclass(frozen=True)
class FuzzContext:
    """What the primary drew: the shape, dtype and device the other tensors must follow.

    ``devices[0]`` is x's device; the rest are devices to draw wrong tensors from.
    """

    x_shape: tuple[int, ...]
    dtype: torch.dtype
    devices: list[str]


class Role:
    """One kind of argument. Subclasses set ``schema_type`` and override what applies."""

    schema_type: ClassVar[str] = "Tensor"
    # Scalars only: True when the tests cover every value in combination with the other
    # such arguments' values (a choice of code paths), False when the values take turns.
    exhaustive: ClassVar[bool] = False

    @property
    def is_tensor(self) -> bool:
        return self.schema_type == "Tensor"

    # --- the op's side ----------------------------------------------------------------

    def check(self, op: str, name: str, value, x: torch.Tensor) -> None:
        """Refuse a bad ``value`` as the C++ kernels do, in their words (x already checked)."""
        raise NotImplementedError

    # --- the tests' side --------------------------------------------------------------

    def valid_values(self) -> tuple:
        """Scalars: valid values the tests call with, the first a typical one."""
        raise NotImplementedError

    def make(self, x: torch.Tensor, build: Callable, layout: str):
        """Tensors: a valid value for primary ``x``; ``build(shape, layout)`` makes a tensor
        of x's dtype and device in one of the tests' layouts."""
        raise NotImplementedError

    def bad_values(self) -> list[BadValue]:
        """Values this argument may not take, each blaming this argument."""
        return []

    def draw_valid(self, draw, x: torch.Tensor, g: torch.Generator):
        """A valid value for ``x``, drawn with Hypothesis (property tests)."""
        from hypothesis import strategies as st

        return draw(st.sampled_from(self.valid_values()))

    def fuzz(self, kit, wrong: bool, ctx: FuzzContext):
        """A Hypothesis strategy for this argument: usually wrong when ``wrong``, else valid.

        ``kit`` is the fuzz suite's tensor maker (see test_fuzz_args.py); tensors it draws
        are built when the call is made.
        """
        raise NotImplementedError

    def schema_accepts(self, value) -> bool:
        """Whether the schema converts ``value`` (a built value) to this argument's type."""
        if self.schema_type == "Tensor":  # None reaches the kernel as an undefined tensor
            return value is None or _is_tensor(value)
        if self.schema_type == "str":
            return isinstance(value, str)
        if self.schema_type == "bool":
            return isinstance(value, bool)
        return _fits_float_argument(value)

    def fuzz_wrong(self, value, x: torch.Tensor | None) -> bool:
        """Whether a built ``value`` the schema accepts breaks this role; ``x`` is the
        primary when it is valid itself, else None (then only faults of value alone count)."""
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

    def shape_for(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``shape`` made valid: 1s inserted before the last dim up to ``min_dim`` dims (so
        the leading dim stays the leading dim), and the last dim scaled to the multiple."""
        if not shape:
            return shape
        *lead, last = shape
        lead += [1] * max(0, self.min_dim - len(shape))
        return (*lead, last * self.last_dim_multiple)

    def bad_values(self) -> list[BadValue]:
        # An integer or bool primary makes the others mismatch too: x is checked first.
        cases: list[BadValue] = [
            ("0d", lambda v, x: v.flatten()[0]),
            ("int", lambda v, x: v.int()),
            ("bool", lambda v, x: v > 0),
            ("complex", lambda v, x: v.to(torch.complex64)),
        ]
        if self.min_dim > 1:
            cases.append(("too-few-dims", lambda v, x: v.flatten(0, 1)))
        if self.last_dim_multiple > 1:
            cases.append(("last-dim", lambda v, x: v[..., 1:]))
        return cases

    def strided_shape(self, draw) -> list[int]:
        """A valid shape for the property tests: rank up to 4 (at least min_dim), sizes
        0-9, the last dim sometimes wide enough for the vector main loops."""
        from hypothesis import strategies as st

        ndim = draw(st.integers(self.min_dim, max(4, self.min_dim)))
        shape = draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim))
        if draw(st.booleans()):
            shape[-1] = draw(st.integers(1, 300))
        shape[-1] *= self.last_dim_multiple
        return shape

    def fuzz_primary(self, kit, device: str, faulty: bool):
        """A strategy of ``(x, FuzzContext)``: the others are valid when they follow the
        context's shape, dtype and device."""
        from hypothesis import strategies as st

        @st.composite
        def primaries(draw):
            devices = kit.devices(device)
            if draw(st.integers(0, 4)) == 0:  # the fake (meta) kernels check arguments too
                devices[:2] = ["meta", device]
            dtype = draw(st.sampled_from(kit.floating_dtypes))
            x_shape = draw(kit.shapes(min_rank=self.min_dim))
            x_shape = (*x_shape[:-1], x_shape[-1] * self.last_dim_multiple)
            ctx = FuzzContext(x_shape, dtype, devices)
            if not faulty:
                return draw(kit.tensor(x_shape, dtype, devices[0])), ctx
            kinds = ["none", "scalar", "dtype", "0-d", "any"]
            if self.last_dim_multiple > 1:
                kinds.append("last-dim")
            if self.min_dim > 1:
                kinds.append("few-dims")
            kind = draw(st.sampled_from(kinds))
            if kind == "none":
                return None, ctx
            if kind == "scalar":
                return draw(kit.python_scalars), ctx
            if kind == "0-d":
                x_shape = ()
            elif kind == "last-dim":
                extra = draw(st.integers(1, self.last_dim_multiple - 1))
                x_shape = (*x_shape[:-1], x_shape[-1] + extra)
            elif kind == "few-dims":
                x_shape = x_shape[-draw(st.integers(1, self.min_dim - 1)) :]
            elif kind == "dtype":
                dtype = draw(st.sampled_from(kit.other_dtypes))
            else:
                x_shape, dtype = draw(kit.shapes()), draw(kit.any_dtype)
            x = draw(kit.tensor(x_shape, dtype, devices[0]))
            return x, FuzzContext(x_shape, dtype, devices)

        return primaries()

    def fuzz_wrong(self, value, x=None) -> bool:
        if value is None or value.dtype not in (
            torch.float32,
            torch.float64,
            torch.float16,
            torch.bfloat16,
        ):
            return True
        if value.dim() < max(1, self.min_dim):
            return True
        return value.shape[-1] % self.last_dim_multiple != 0


class _FollowsPrimary(Role):
    """A tensor with x's dtype and device; subclasses say which shape, from x's."""

    def shape_of(self, x_shape: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError

    def wrong_shapes(self, kit, x_shape: tuple[int, ...]):
        """A strategy of shapes that are usually not ``shape_of(x_shape)``."""
        raise NotImplementedError

    def bad_values(self) -> list[BadValue]:
        return [
            ("int", lambda v, x: v.int()),
            ("float64", lambda v, x: v.double()),
            ("float16", lambda v, x: v.half()),
            ("none", lambda v, x: None),
        ]

    def fuzz(self, kit, wrong, ctx):
        shape = self.shape_of(ctx.x_shape) if self.fits(ctx.x_shape) else self.fallback_shape()
        if wrong:
            return kit.wrong_tensor(
                shape, self.wrong_shapes(kit, ctx.x_shape), ctx.dtype, ctx.devices
            )
        return kit.tensor(shape, ctx.dtype, ctx.devices[0])

    def fits(self, x_shape: tuple[int, ...]) -> bool:
        """Whether x_shape (maybe a wrong primary's) has what shape_of reads."""
        return True

    def fallback_shape(self) -> tuple[int, ...]:
        return (3,)

    def fuzz_wrong(self, value, x) -> bool:
        if value is None or value.dim() != len(self.fallback_shape()):
            return True
        if x is None:
            return False
        if value.device != x.device or value.dtype != x.dtype:
            return True
        return tuple(value.shape) != self.shape_of(tuple(x.shape))


@dataclass(frozen=True)
class LikePrimary(_FollowsPrimary):
    """A tensor with the primary's shape, dtype and device (a residual, a second operand)."""

    def check(self, op, name, value, x) -> None:
        _checks.check_like_primary(op, name, value, x)

    def shape_of(self, x_shape):
        return x_shape

    def make(self, x, build, layout):
        return build(tuple(x.shape), "contiguous" if layout == "rows" else layout)

    def bad_values(self) -> list[BadValue]:
        return [
            *super().bad_values(),
            ("fewer-rows", lambda v, x: v[:2]),
            ("broadcastable", lambda v, x: v[0]),
            ("transposed-shape", lambda v, x: v.t()),
        ]

    def draw_valid(self, draw, x, g):
        from hypothesis import strategies as st

        t = torch.randn(x.shape, generator=g, dtype=torch.float64).to(x.device, x.dtype)
        if x.dim() >= 2 and draw(st.booleans()):
            t = t.transpose(0, -1).contiguous().transpose(0, -1)
        return t

    def wrong_shapes(self, kit, x_shape):
        from hypothesis import strategies as st

        @st.composite
        def shapes(draw):
            kind = draw(st.sampled_from(["other", "one_dim_off", "suffix", "unsqueezed"]))
            if kind == "other" or not x_shape:
                return draw(kit.shapes())
            if kind == "one_dim_off":
                i = draw(st.integers(0, len(x_shape) - 1))
                off = abs(x_shape[i] + draw(st.sampled_from([-1, 1])))
                return (*x_shape[:i], off, *x_shape[i + 1 :])
            if kind == "suffix":  # broadcastable to x, but not x's shape
                return x_shape[1:]
            return (1, *x_shape)

        return shapes()

    def fuzz_wrong(self, value, x) -> bool:
        if value is None:
            return True
        if x is None:
            return False
        if value.device != x.device or value.dtype != x.dtype:
            return True
        return value.shape != x.shape


@dataclass(frozen=True)
class LastDimVector(_FollowsPrimary):
    """A 1-D tensor whose length is the primary's last dimension, with its dtype and device."""

    def check(self, op, name, value, x) -> None:
        _checks.check_last_dim_vector(op, name, value, x)

    def shape_of(self, x_shape):
        return (x_shape[-1],)

    def fits(self, x_shape):
        return bool(x_shape)

    def make(self, x, build, layout):
        return build(
            self.shape_of(tuple(x.shape)), "sliced" if layout == "sliced" else "contiguous"
        )

    def bad_values(self) -> list[BadValue]:
        return [
            *super().bad_values(),
            ("longer", lambda v, x: torch.cat([v, v[:1]])),
            ("2d", lambda v, x: v.expand(2, -1)),
            ("0d", lambda v, x: v[0]),
        ]

    def draw_valid(self, draw, x, g):
        return torch.randn(x.shape[-1], generator=g, dtype=torch.float64).to(x.device, x.dtype)

    def wrong_shapes(self, kit, x_shape):
        from hypothesis import strategies as st

        @st.composite
        def shapes(draw):
            n = x_shape[-1] if x_shape else draw(st.integers(0, 5))
            kind = draw(st.sampled_from(["off_by_one", "other", "like_x", "scalar"]))
            if kind == "off_by_one":
                return (n + 1,) if n == 0 or draw(st.booleans()) else (n - 1,)
            if kind == "other":
                return draw(kit.shapes())
            if kind == "like_x":
                return x_shape
            return ()

        return shapes()


# --- scalars ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NonNegativeFloat(Role):
    """A float that must be ``>= 0`` (NaN is refused). ``samples``: values the tests use."""

    samples: tuple[float, ...] = (1e-6,)
    schema_type: ClassVar[str] = "float"

    def check(self, op, name, value, x) -> None:
        _checks.check_non_negative(op, name, value)

    def valid_values(self) -> tuple:
        return self.samples

    def bad_values(self) -> list[BadValue]:
        return [
            ("negative", lambda v, x: -1e-6),
            ("nan", lambda v, x: math.nan),
            ("-inf", lambda v, x: -math.inf),
        ]

    def fuzz(self, kit, wrong, ctx, *, tensors: bool = True):
        """``tensors``: whether a valid value may be a one-element tensor (an op's float
        argument converts one; the custom class's constructor does not)."""
        from hypothesis import strategies as st

        if wrong:
            return st.one_of(
                st.sampled_from([math.nan, -math.inf, -1e-6, -1.0, -5e-324]),
                st.floats(allow_nan=True, allow_infinity=True),
                st.integers(-2, 2),
                st.sampled_from([None, "1e-6", 1j]),
                kit.scalar_tensor(valid=False),
            )
        valid = st.one_of(
            st.sampled_from([1e-6, 1e-5, 0.0, -0.0, 1.0, 1e30, 5e-324, math.inf]),
            st.floats(min_value=0.0),
            st.integers(0, 2),
            st.booleans(),
        )
        return st.one_of(valid, kit.scalar_tensor(valid=True)) if tensors else valid

    def fuzz_wrong(self, value, x) -> bool:
        return not _float_value(value) >= 0


@dataclass(frozen=True)
class Choice(Role):
    """A string that must be one of ``values``, spelled exactly."""

    values: tuple[str, ...]
    schema_type: ClassVar[str] = "str"
    exhaustive: ClassVar[bool] = True

    def check(self, op, name, value, x) -> None:
        _checks.check_choice(op, name, value, self.values)

    def valid_values(self) -> tuple:
        return self.values

    def bad_values(self) -> list[BadValue]:
        first = self.values[0]
        near = (("upper", first.upper()), ("empty", ""), ("padded", f" {first}"))
        return [(what, lambda v, x, w=w: w) for what, w in near if w not in self.values]

    def fuzz(self, kit, wrong, ctx):
        from hypothesis import strategies as st

        if not wrong:
            return st.sampled_from(self.values)
        near = [v.upper() for v in self.values] + [f" {v}" for v in self.values]
        near += [f"{v}\x00" for v in self.values]
        return st.one_of(
            st.sampled_from([*near, "", "nonë"]),
            st.text(max_size=6),
            st.sampled_from([None, 0, 1.0]),
        )

    def fuzz_wrong(self, value, x) -> bool:
        return value not in self.values


@dataclass(frozen=True)
class PositionTable(_FollowsPrimary):
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

    def fits(self, x_shape):
        return len(x_shape) >= -self.seq_dim

    def fallback_shape(self):
        return (3, 2)

    def make(self, x, build, layout):
        # A table is a tensor in its own right: every layout but "rows" (x's every other
        # row) applies to it as it is.
        return build(self.shape_of(tuple(x.shape)), "contiguous" if layout == "rows" else layout)

    def bad_values(self) -> list[BadValue]:
        return [
            *super().bad_values(),
            ("fewer-rows", lambda v, x: v[:-1]),
            ("full-width", lambda v, x: torch.cat([v, v], dim=-1)),
            ("transposed-shape", lambda v, x: v.t()),
            ("1d", lambda v, x: v[0]),
            ("batched", lambda v, x: v.unsqueeze(0)),
        ]

    def draw_valid(self, draw, x, g):
        from hypothesis import strategies as st

        shape = self.shape_of(tuple(x.shape))
        t = torch.randn(shape, generator=g, dtype=torch.float64).to(x.device, x.dtype)
        if draw(st.booleans()):  # column-major storage
            t = t.t().contiguous().t()
        return t

    def wrong_shapes(self, kit, x_shape):
        from hypothesis import strategies as st

        @st.composite
        def shapes(draw):
            if not self.fits(x_shape):
                return draw(kit.shapes())
            seq, cols = self.shape_of(x_shape)
            kind = draw(st.sampled_from(["row_off", "col_off", "full", "swapped", "1d", "other"]))
            if kind == "row_off":
                return (abs(seq + draw(st.sampled_from([-1, 1]))), cols)
            if kind == "col_off":
                return (seq, abs(cols + draw(st.sampled_from([-1, 1]))))
            if kind == "full":
                return (seq, x_shape[-1])
            if kind == "swapped":
                return (cols, seq)
            if kind == "1d":
                return (cols,)
            return draw(kit.shapes())

        return shapes()


@dataclass(frozen=True)
class Flag(Choice):
    """A bool choosing between two code paths, which the tests cover both of.

    There is no wrong bool: only values of other types are wrong, and the schema refuses
    them before any check runs.
    """

    values: tuple = (False, True)
    schema_type: ClassVar[str] = "bool"

    def check(self, op, name, value, x) -> None:
        pass

    def bad_values(self) -> list[BadValue]:
        return []

    def fuzz(self, kit, wrong, ctx):
        from hypothesis import strategies as st

        if not wrong:
            return st.sampled_from(self.values)
        return st.sampled_from(["true", "", "False"])

    def fuzz_wrong(self, value, x) -> bool:
        return value not in self.values
