"""The tests' side of the argument roles (``my_ops.ops._roles``): one class per role.

For each role, what the suites call with and against: valid samples in the tests' layouts
(:meth:`RoleValues.valid_values`, :meth:`RoleValues.make`), bad values with the argument
they blame (:meth:`RoleValues.bad_values`), Hypothesis strategies for property tests and
fuzzing (:meth:`RoleValues.draw_valid`, :meth:`RoleValues.fuzz`) and the fuzz oracle
(:meth:`RoleValues.fuzz_wrong`, :meth:`RoleValues.schema_accepts`). They are built from
the role's fields, never by calling its ``check``, so the tests check the checks instead
of repeating them.

:func:`values_of` finds a role's class here through the role's class hierarchy; the
suites iterate over these methods and never switch on the role. A role without one here
fails ``//python:role_values_test``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from my_ops.ops import _roles

try:
    from hypothesis import strategies as st
except ImportError:  # tools/gpu_check may run the suite without it: only its strategies need it
    st = None

# (what, f(valid value of the argument, valid primary) -> a wrong value)
BadValue = tuple[str, Callable[[Any, torch.Tensor], Any]]

# Role class -> its values class, filled by @values_for.
_VALUES: dict[type[_roles.Role], type[RoleValues]] = {}


def values_for(role_class: type[_roles.Role]):
    """Class decorator: the decorated class holds the test values of ``role_class``."""

    def register(cls):
        _VALUES[role_class] = cls
        return cls

    return register


def values_of(role: _roles.Role) -> RoleValues:
    """The test values of ``role``: its class's, or its nearest base class's."""
    for cls in type(role).__mro__:
        if cls in _VALUES:
            return _VALUES[cls](role)
    raise LookupError(f"{type(role).__name__}: no test values in role_values.py")


def registered_roles() -> set[type[_roles.Role]]:
    """The role classes this module has values for."""
    return set(_VALUES)


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
    # The arguments drawn so far (name -> drawn value), for roles that follow one of them.
    drawn: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RoleValues:
    """The test values of one role (``self.role``)."""

    role: _roles.Role
    # Scalars only: True when the tests cover every value in combination with the other
    # such arguments' values (a choice of code paths), False when the values take turns.
    exhaustive: ClassVar[bool] = False

    def valid_values(self) -> tuple:
        """Scalars: valid values the tests call with, the first a typical one."""
        raise NotImplementedError

    def make(self, x: torch.Tensor, build: Callable, layout: str):
        """Tensors: a valid value for primary ``x``; ``build(shape, layout)`` makes a tensor
        of x's dtype and device in one of the tests' layouts."""
        raise NotImplementedError

    def make_in_call(self, x: torch.Tensor, build: Callable, layout: str, made: dict):
        """:meth:`make` with the values made so far (name -> value, in schema order), for a
        role that follows an argument other than x."""
        return self.make(x, build, layout)

    def bad_values(self) -> list[BadValue]:
        """Values this argument may not take, each blaming this argument."""
        return []

    def draw_valid(self, draw, x: torch.Tensor, g: torch.Generator):
        """A valid value for ``x``, drawn with Hypothesis (property tests)."""
        return draw(st.sampled_from(self.valid_values()))

    def draw_valid_in_call(self, draw, x: torch.Tensor, g: torch.Generator, drawn: dict):
        """:meth:`draw_valid` with the values drawn so far (name -> value) at hand."""
        return self.draw_valid(draw, x, g)

    def fuzz(self, kit, wrong: bool, ctx: FuzzContext):
        """A Hypothesis strategy for this argument: usually wrong when ``wrong``, else valid.

        ``kit`` is the fuzz suite's tensor maker (see test_fuzz_args.py); tensors it draws
        are built when the call is made.
        """
        raise NotImplementedError

    def schema_accepts(self, value) -> bool:
        """Whether the schema converts ``value`` (a built value) to this argument's type."""
        schema_type = self.role.schema_type
        if schema_type == "Tensor":  # None reaches the kernel as an undefined tensor
            return value is None or _is_tensor(value)
        if schema_type == "str":
            return isinstance(value, str)
        if schema_type == "bool":
            return isinstance(value, bool)
        return _fits_float_argument(value)

    def fuzz_wrong(self, value, x: torch.Tensor | None) -> bool:
        """Whether a built ``value`` the schema accepts breaks this role; ``x`` is the
        primary when it is valid itself, else None (then only faults of value alone count)."""
        raise NotImplementedError

    def fuzz_wrong_in_call(self, value, x: torch.Tensor | None, values: dict) -> bool:
        """:meth:`fuzz_wrong` with the call's other built values (name -> value) at hand."""
        return self.fuzz_wrong(value, x)


# --- tensors ----------------------------------------------------------------------------


@values_for(_roles.Primary)
class PrimaryValues(RoleValues):
    def bad_values(self) -> list[BadValue]:
        # An integer or bool primary makes the others mismatch too: x is checked first.
        cases: list[BadValue] = [
            ("0d", lambda v, x: v.flatten()[0]),
            ("int", lambda v, x: v.int()),
            ("bool", lambda v, x: v > 0),
            ("complex", lambda v, x: v.to(torch.complex64)),
        ]
        if self.role.min_dim > 1:
            cases.append(("too-few-dims", lambda v, x: v.flatten(0, 1)))
        if self.role.last_dim_multiple > 1:
            cases.append(("last-dim", lambda v, x: v[..., 1:]))
        return cases

    def strided_shape(self, draw) -> list[int]:
        """A valid shape for the property tests: rank up to 4 (at least min_dim), sizes
        0-9, the last dim sometimes wide enough for the vector main loops."""
        min_dim = self.role.min_dim
        ndim = draw(st.integers(min_dim, max(4, min_dim)))
        shape = draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim))
        if draw(st.booleans()):
            shape[-1] = draw(st.integers(1, 300))
        shape[-1] *= self.role.last_dim_multiple
        step = self.role.sample_last_dim_multiple
        if step > 1 and shape[-1]:  # what the other arguments need of it
            shape[-1] = -(-shape[-1] // step) * step
        return shape

    def fuzz_primary(self, kit, device: str, faulty: bool):
        """A strategy of ``(x, FuzzContext)``: the others are valid when they follow the
        context's shape, dtype and device."""
        multiple, min_dim = self.role.last_dim_multiple, self.role.min_dim

        @st.composite
        def primaries(draw):
            devices = kit.devices(device)
            if draw(st.integers(0, 4)) == 0:  # the fake (meta) kernels check arguments too
                devices[:2] = ["meta", device]
            dtype = draw(st.sampled_from(kit.floating_dtypes))
            x_shape = draw(kit.shapes(min_rank=min_dim))
            x_shape = (*x_shape[:-1], x_shape[-1] * multiple)
            step = self.role.sample_last_dim_multiple
            if step > 1 and x_shape and draw(st.booleans()):
                # What the other arguments need of x's last dim, often enough to pass.
                x_shape = (*x_shape[:-1], max(step, -(-x_shape[-1] // step) * step))
            ctx = FuzzContext(x_shape, dtype, devices)
            if not faulty:
                return draw(kit.tensor(x_shape, dtype, devices[0])), ctx
            kinds = ["none", "scalar", "dtype", "0-d", "any"]
            if multiple > 1:
                kinds.append("last-dim")
            if min_dim > 1:
                kinds.append("few-dims")
            kind = draw(st.sampled_from(kinds))
            if kind == "none":
                return None, ctx
            if kind == "scalar":
                return draw(kit.python_scalars), ctx
            if kind == "0-d":
                x_shape = ()
            elif kind == "last-dim":
                extra = draw(st.integers(1, multiple - 1))
                x_shape = (*x_shape[:-1], x_shape[-1] + extra)
            elif kind == "few-dims":
                x_shape = x_shape[-draw(st.integers(1, min_dim - 1)) :]
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
        if value.dim() < max(1, self.role.min_dim):
            return True
        return value.shape[-1] % self.role.last_dim_multiple != 0


class FollowsPrimaryValues(RoleValues):
    """A tensor with x's dtype and device, of the shape the role derives from x's."""

    def wrong_shapes(self, kit, x_shape: tuple[int, ...]):
        """A strategy of shapes that are usually not ``role.shape_of(x_shape)``."""
        raise NotImplementedError

    def bad_values(self) -> list[BadValue]:
        return [
            ("int", lambda v, x: v.int()),
            ("float64", lambda v, x: v.double()),
            ("float16", lambda v, x: v.half()),
            ("none", lambda v, x: None),
        ]

    def fuzz(self, kit, wrong, ctx):
        if self.fits(ctx.x_shape):
            shape = self.role.shape_of(ctx.x_shape)
        else:
            shape = self.fallback_shape()
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
        return tuple(value.shape) != self.role.shape_of(tuple(x.shape))


@values_for(_roles.LikePrimary)
class LikePrimaryValues(FollowsPrimaryValues):
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
        t = torch.randn(x.shape, generator=g, dtype=torch.float64).to(x.device, x.dtype)
        if x.dim() >= 2 and draw(st.booleans()):
            t = t.transpose(0, -1).contiguous().transpose(0, -1)
        return t

    def wrong_shapes(self, kit, x_shape):
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


@values_for(_roles.LastDimVector)
class LastDimVectorValues(FollowsPrimaryValues):
    def fits(self, x_shape):
        return bool(x_shape)

    def make(self, x, build, layout):
        shape = self.role.shape_of(tuple(x.shape))
        return build(shape, "sliced" if layout == "sliced" else "contiguous")

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


def _is_real_tensor(value) -> bool:
    return _is_tensor(value) and value.device.type != "meta"


@values_for(_roles.PositionTable)
class PositionTableValues(FollowsPrimaryValues):
    """A rotary table: ``[seq, head_dim / 2]`` typically; any rows once positions are
    given, and as few columns as a partial rotation wants (0 to head_dim / 2)."""

    def fits(self, x_shape):
        return len(x_shape) >= -self.role.seq_dim

    def fallback_shape(self):
        return (3, 2)

    def make(self, x, build, layout):
        # A table is a tensor in its own right: every layout but "rows" (x's every other
        # row) applies to it as it is.
        shape = self.role.shape_of(tuple(x.shape))
        return build(shape, "contiguous" if layout == "rows" else layout)

    def bad_values(self) -> list[BadValue]:
        # Against the tests' valid calls in their contiguous layout, which pass no
        # positions (see PositionsValues.make): then a table has one row per token.
        return [
            *super().bad_values(),
            ("fewer-rows", lambda v, x: v[:-1]),
            ("full-width", lambda v, x: torch.cat([v, v], dim=-1)),
            ("one-column-too-many", lambda v, x: torch.cat([v, v[:, :1]], dim=-1)),
            ("transposed-shape", lambda v, x: v.t()),
            ("1d", lambda v, x: v[0]),
            ("batched", lambda v, x: v.unsqueeze(0)),
        ]

    def draw_valid_in_call(self, draw, x, g, drawn):
        like = drawn.get(self.role.like) if self.role.like else None
        if like is not None:
            shape = tuple(like.shape)
        else:
            seq, half = self.role.shape_of(tuple(x.shape))
            # A partial rotation now and then: fewer columns than head_dim / 2.
            shape = (seq, draw(st.integers(0, half)) if draw(st.booleans()) else half)
        t = torch.randn(shape, generator=g, dtype=torch.float64).to(x.device, x.dtype)
        if draw(st.booleans()):  # column-major storage
            t = t.t().contiguous().t()
        return t

    def fuzz_wrong(self, value, x) -> bool:
        raise TypeError("a rotary table is judged with the call's positions: fuzz_wrong_in_call")

    def fuzz_wrong_in_call(self, value, x, values) -> bool:
        if value is None or value.dim() != 2:
            return True
        if x is None:
            return False
        if value.device != x.device or value.dtype != x.dtype:
            return True
        rows, columns = value.shape
        if columns > x.shape[-1] // 2:
            return True
        if values[self.role.positions] is None and rows != x.shape[self.role.seq_dim]:
            return True
        if self.role.like is None:
            return False
        like = values[self.role.like]
        # A table the kernels refuse is named before this one is compared with it.
        own = PositionTableValues(dataclasses.replace(self.role, like=None))
        if not _is_tensor(like) or own.fuzz_wrong_in_call(like, x, values):
            return False
        return tuple(like.shape) != tuple(value.shape)

    def wrong_shapes(self, kit, x_shape):
        @st.composite
        def shapes(draw):
            if not self.fits(x_shape):
                return draw(kit.shapes())
            seq, cols = self.role.shape_of(x_shape)
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


@values_for(_roles.Positions)
class PositionsValues(RoleValues):
    """None, or int64 positions into the tables (``table``: the argument whose rows they
    index)."""

    table: ClassVar[str] = "cos"

    def make_in_call(self, x, build, layout, made):
        # None in the contiguous layout, the one most suites call with, so that the tables
        # keep one row per token there; positions in the others, each a valid row of those
        # tables: [seq] reversed, non-contiguous where x is, and one per token at "offset".
        seq = x.shape[self.role.seq_dim]
        if layout == "contiguous":
            return None
        if layout == "offset":
            tokens = x.shape[:-2]
            return (torch.arange(math.prod(tokens), device=x.device) * 5 % max(seq, 1)).view(tokens)
        if layout in ("sliced", "transposed"):
            return torch.arange(2 * seq, device=x.device).flip(0)[::2] // 2
        return torch.arange(seq, device=x.device).flip(0)

    def bad_values(self) -> list[BadValue]:
        def seq(x):
            return x.shape[self.role.seq_dim]

        return [
            ("float", lambda v, x: torch.zeros(seq(x), device=x.device)),
            ("int32", lambda v, x: torch.zeros(seq(x), dtype=torch.int32, device=x.device)),
            (
                "one-too-many",
                lambda v, x: torch.zeros(seq(x) + 1, dtype=torch.long, device=x.device),
            ),
            ("column", lambda v, x: torch.zeros(seq(x), 1, dtype=torch.long, device=x.device)),
            ("0d", lambda v, x: torch.tensor(0, device=x.device)),
        ]

    def draw_valid_in_call(self, draw, x, g, drawn):
        if draw(st.booleans()):
            return None
        rows = drawn[self.table].shape[0]
        if rows == 0:
            return None
        tokens = tuple(x.shape[:-2])
        shape = draw(st.sampled_from([(x.shape[self.role.seq_dim],), tokens]))
        return torch.randint(0, rows, shape, generator=g).to(x.device)

    def fuzz(self, kit, wrong, ctx):
        seq = ctx.x_shape[self.role.seq_dim] if len(ctx.x_shape) >= 3 else 2
        table = ctx.drawn.get(self.table)
        rows = table.shape[0] if len(getattr(table, "shape", ())) == 2 else seq
        shape = (seq,)
        if not wrong:
            return st.one_of(
                st.none(), kit.tensor(shape, torch.int64, ctx.devices[0], below=max(rows, 1))
            )
        return kit.wrong_tensor(shape, kit.shapes(), torch.int64, ctx.devices)

    def fuzz_wrong_in_call(self, value, x, values) -> bool:
        if value is None:
            return False
        if not _is_tensor(value) or value.dtype != torch.int64:
            return True
        if x is None:
            return False
        if value.device != x.device:
            return True
        seq, tokens = x.shape[self.role.seq_dim], tuple(x.shape[:-2])
        if tuple(value.shape) not in ((seq,), tokens):
            return True
        table = values[self.table]
        if not (_is_real_tensor(value) and value.device.type == "cpu" and _is_tensor(table)):
            return False  # only the CPU kernel reads the values
        if table.dim() != 2:
            return False  # the table is named first
        return bool(((value < 0) | (value >= table.shape[0])).any())


# --- quantized weights ----------------------------------------------------------------------

# Output channels of the weights the tests make: one vector's worth and a tail.
OUT_FEATURES = 11


@values_for(_roles.QuantizedWeight)
class QuantizedWeightValues(RoleValues):
    def make(self, x, build, layout):
        shape = self.role.shape_of(tuple(x.shape), OUT_FEATURES)
        low, high = (-128, 128) if self.role.bits == 8 else (0, 256)
        w = torch.randint(low, high, shape, dtype=self.role.dtype)
        if layout == "transposed":  # the same values, column-major
            w = w.t().contiguous().t()
        return w.to(x.device)

    def bad_values(self) -> list[BadValue]:
        other = torch.uint8 if self.role.bits == 8 else torch.int8
        return [
            ("float32", lambda v, x: v.float()),
            ("other-int", lambda v, x, o=other: v.to(o)),
            ("none", lambda v, x: None),
            ("1d", lambda v, x: v[0]),
            ("fewer-columns", lambda v, x: v[:, :-1]),
            ("transposed-shape", lambda v, x: v.t()),
        ]

    def draw_valid(self, draw, x, g):
        shape = self.role.shape_of(tuple(x.shape), draw(st.integers(0, 20)))
        low, high = (-128, 128) if self.role.bits == 8 else (0, 256)
        w = torch.randint(low, high, shape, dtype=self.role.dtype, generator=g)
        if draw(st.booleans()):
            w = w.t().contiguous().t()
        return w.to(x.device)

    def fuzz(self, kit, wrong, ctx):
        per_byte = self.role.per_byte
        columns = ctx.x_shape[-1] // per_byte if ctx.x_shape else 3

        @st.composite
        def weights(draw):
            shape = (draw(st.integers(0, 9)), columns)
            if not wrong:
                return draw(kit.tensor(shape, self.role.dtype, ctx.devices[0]))

            @st.composite
            def wrong_shapes(draw):
                kind = draw(st.sampled_from(["columns", "1d", "3d", "other"]))
                if kind == "columns":
                    return (shape[0], columns + draw(st.sampled_from([-1, 1])))
                if kind == "1d":
                    return (columns,)
                if kind == "3d":
                    return (1, *shape)
                return draw(kit.shapes())

            return draw(kit.wrong_tensor(shape, wrong_shapes(), self.role.dtype, ctx.devices))

        return weights()

    def fuzz_wrong(self, value, x) -> bool:
        if not _is_tensor(value) or value.dtype != self.role.dtype or value.dim() != 2:
            return True
        if x is None:
            return False
        return value.device != x.device or value.shape[1] * self.role.per_byte != x.shape[-1]


@values_for(_roles.PackedWeight)
class PackedWeightValues(RoleValues):
    # Panels of the weights the tests make: two, so that the threads split them.
    PANELS = 2

    def make(self, x, build, layout):
        w = torch.randn(self.role.shape_of(tuple(x.shape), self.PANELS))
        if layout == "transposed":  # the same values, another memory order
            w = w.transpose(0, 1).contiguous().transpose(0, 1)
        return w.to(x.device)

    def bad_values(self) -> list[BadValue]:
        return [
            ("float64", lambda v, x: v.double()),
            ("bfloat16", lambda v, x: v.bfloat16()),
            ("none", lambda v, x: None),
            ("unpacked", lambda v, x: v.transpose(1, 2).reshape(-1, v.shape[1])),
            ("2d", lambda v, x: v[0]),
            ("fewer-in-features", lambda v, x: v[:, :-1]),
            ("narrow-panels", lambda v, x: v[:, :, :16]),
        ]

    def draw_valid(self, draw, x, g):
        shape = self.role.shape_of(tuple(x.shape), draw(st.integers(0, 3)))
        w = torch.randn(shape, generator=g)
        if draw(st.booleans()):
            w = w.transpose(0, 1).contiguous().transpose(0, 1)
        return w.to(x.device)

    def fuzz(self, kit, wrong, ctx):
        in_features = ctx.x_shape[-1] if ctx.x_shape else 3
        channels = self.role.channels

        @st.composite
        def weights(draw):
            shape = (draw(st.integers(0, 3)), in_features, channels)
            if not wrong:
                return draw(kit.tensor(shape, torch.float32, ctx.devices[0]))

            @st.composite
            def wrong_shapes(draw):
                kind = draw(st.sampled_from(["in_features", "channels", "2d", "other"]))
                if kind == "in_features":
                    return (shape[0], in_features + draw(st.sampled_from([-1, 1])), channels)
                if kind == "channels":
                    return (shape[0], in_features, draw(st.sampled_from([1, 16, 31, 33, 64])))
                if kind == "2d":
                    return (shape[0] * channels, in_features)
                return draw(kit.shapes())

            return draw(kit.wrong_tensor(shape, wrong_shapes(), torch.float32, ctx.devices))

        return weights()

    def fuzz_wrong(self, value, x) -> bool:
        if not _is_tensor(value) or value.dtype != torch.float32 or value.dim() != 3:
            return True
        if value.shape[2] != self.role.channels:
            return True
        if x is None:
            return False
        return value.device != x.device or value.shape[1] != x.shape[-1]


@values_for(_roles.GroupSize)
class GroupSizeValues(RoleValues):
    def valid_values(self) -> tuple:
        return self.role.samples

    def bad_values(self) -> list[BadValue]:
        return [
            ("zero", lambda v, x: 0),
            ("negative", lambda v, x: -v),
            ("not-a-multiple", lambda v, x: v + 16),
            ("not-dividing", lambda v, x: 2 * x.shape[-1]),
        ]

    def fuzz(self, kit, wrong, ctx):
        if not wrong:
            return st.sampled_from(self.role.samples)
        return st.one_of(
            st.sampled_from([0, -32, 16, 31, 33, 48, 96, 2**40]),
            st.integers(-100, 300),
            st.sampled_from([None, 32.0, "32"]),
        )

    def schema_accepts(self, value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    def fuzz_wrong(self, value, x) -> bool:
        if value <= 0 or value % 32:
            return True
        return x is not None and x.shape[-1] % value != 0


def _channels(weight, per_slice: int = 1) -> int | None:
    """The output channels of a weight the kernels get past (a 2-D tensor, or a 3-D packed
    one for ``per_slice`` 32), else None: a weight they refuse is named first, so what
    follows it cannot be judged against it."""
    if not _is_tensor(weight) or weight.dim() != (2 if per_slice == 1 else 3):
        return None
    return weight.shape[0] * per_slice


@values_for(_roles.WeightScale)
class WeightScaleValues(RoleValues):
    def _shape(self, x_shape, made: dict):
        group_size = None if self.role.group_size is None else made[self.role.group_size]
        return self.role.shape_of(x_shape, made[self.role.weight].shape[0], group_size)

    def make_in_call(self, x, build, layout, made):
        shape = self._shape(tuple(x.shape), made)
        # Positive scales about the size a quantizer gives weights of unit size.
        return (build(shape, "contiguous").float().abs() * 0.01 + 1e-3).to(torch.float32)

    def bad_values(self) -> list[BadValue]:
        per_channel_only = [] if self.role.group_size else [("float16", lambda v, x: v.half())]
        return [
            ("float64", lambda v, x: v.double()),
            ("bfloat16", lambda v, x: v.bfloat16()),
            *per_channel_only,
            ("none", lambda v, x: None),
            ("fewer", lambda v, x: v[:-1]),
            ("extra-dim", lambda v, x: v.unsqueeze(0)),
        ]

    def draw_valid_in_call(self, draw, x, g, drawn):
        shape = self._shape(tuple(x.shape), drawn)
        return (torch.rand(shape, generator=g) * 0.02 + 1e-3).to(x.device)

    def fuzz(self, kit, wrong, ctx):
        weight = ctx.drawn.get(self.role.weight)
        channels = weight.shape[0] if getattr(weight, "shape", ()) else 3
        group_size = ctx.drawn.get(self.role.group_size) if self.role.group_size else None
        shape = (channels,)
        if self.role.group_size is not None:
            usable = isinstance(group_size, int) and group_size > 0 and ctx.x_shape
            shape = (channels, ctx.x_shape[-1] // group_size if usable else 2)
        if not wrong:
            return kit.tensor(shape, torch.float32, ctx.devices[0], positive=True)
        return kit.wrong_tensor(shape, kit.shapes(), torch.float32, ctx.devices)

    def fuzz_wrong_in_call(self, value, x, values) -> bool:
        if not _is_tensor(value) or value.dtype not in self.role.dtypes:
            return True
        if _is_real_tensor(value) and value.device.type == "cpu":
            # The CPU kernels refuse a scale that is zero, negative or not finite.
            if not bool(((value > 0) & value.isfinite()).all()):
                return True
        if x is None:
            return False
        if value.device != x.device:
            return True
        channels = _channels(values[self.role.weight])
        if channels is None:
            return value.dim() not in (1, 2)
        if self.role.group_size is None:
            return tuple(value.shape) != (channels,)
        group_size = values[self.role.group_size]
        if not isinstance(group_size, int) or group_size <= 0 or group_size % 32:
            return value.dim() != 2
        if x.shape[-1] % group_size:
            return value.dim() != 2
        return tuple(value.shape) != (channels, x.shape[-1] // group_size)


@values_for(_roles.OptionalBias)
class OptionalBiasValues(RoleValues):
    def make_in_call(self, x, build, layout, made):
        return build((self.role.out_features(made[self.role.weight]),), "contiguous")

    def bad_values(self) -> list[BadValue]:
        return [
            ("int", lambda v, x: v.int()),
            ("float64", lambda v, x: v.double()),
            ("longer", lambda v, x: torch.cat([v, v[:1]])),
            ("2d", lambda v, x: v.unsqueeze(0)),
        ]

    def draw_valid_in_call(self, draw, x, g, drawn):
        if draw(st.booleans()):
            return None
        n = self.role.out_features(drawn[self.role.weight])
        return torch.randn(n, generator=g, dtype=torch.float64).to(x.device, x.dtype)

    def fuzz(self, kit, wrong, ctx):
        weight = ctx.drawn.get(self.role.weight)
        channels = self.role.out_features(weight) if getattr(weight, "shape", ()) else 3
        if not wrong:
            return st.one_of(st.none(), kit.tensor((channels,), ctx.dtype, ctx.devices[0]))
        return kit.wrong_tensor((channels,), kit.shapes(), ctx.dtype, ctx.devices)

    def fuzz_wrong_in_call(self, value, x, values) -> bool:
        if value is None:
            return False
        if not _is_tensor(value) or value.dim() != 1:
            return True
        if x is None:
            return False
        if value.device != x.device or value.dtype != x.dtype:
            return True
        channels = _channels(values[self.role.weight], self.role.channels_per_slice)
        return channels is not None and value.shape[0] != channels


# --- scalars ----------------------------------------------------------------------------


@values_for(_roles.NonNegativeFloat)
class NonNegativeFloatValues(RoleValues):
    def valid_values(self) -> tuple:
        return self.role.samples

    def bad_values(self) -> list[BadValue]:
        return [
            ("negative", lambda v, x: -1e-6),
            ("nan", lambda v, x: math.nan),
            ("-inf", lambda v, x: -math.inf),
        ]

    def fuzz(self, kit, wrong, ctx, *, tensors: bool = True):
        """``tensors``: whether a valid value may be a one-element tensor (an op's float
        argument converts one; the custom class's constructor does not)."""
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


@values_for(_roles.Choice)
class ChoiceValues(RoleValues):
    exhaustive: ClassVar[bool] = True

    def valid_values(self) -> tuple:
        return self.role.values

    def bad_values(self) -> list[BadValue]:
        values = self.role.values
        first = values[0]
        near = (("upper", first.upper()), ("empty", ""), ("padded", f" {first}"))
        return [(what, lambda v, x, w=w: w) for what, w in near if w not in values]

    def fuzz(self, kit, wrong, ctx):
        values = self.role.values
        if not wrong:
            return st.sampled_from(values)
        near = [v.upper() for v in values] + [f" {v}" for v in values]
        near += [f"{v}\x00" for v in values]
        return st.one_of(
            st.sampled_from([*near, "", "nonë"]),
            st.text(max_size=6),
            st.sampled_from([None, 0, 1.0]),
        )

    def fuzz_wrong(self, value, x) -> bool:
        return value not in self.role.values


@values_for(_roles.Flag)
class FlagValues(ChoiceValues):
    """Both code paths are covered; only values of other types are wrong, and the schema
    refuses those before any check runs."""

    def bad_values(self) -> list[BadValue]:
        return []

    def fuzz(self, kit, wrong, ctx):
        if not wrong:
            return st.sampled_from(self.role.values)
        return st.sampled_from(["true", "", "False"])
