"""What each op module tells the rest of the project about its op: :class:`OpSpec`.

An op module (``my_ops/ops/<op>.py``) holds the typed wrapper, the fake, the autograd
formula, the float64 reference and one ``SPEC``. The registry (``my_ops.ops``) registers
the fake and the formula from it, and every test suite, the benchmark and the export
tests read it: a new op with a ``SPEC`` is covered by all of them without touching them.

The spec describes each argument by its *role* (the primary tensor, a tensor shaped like
it, a vector over its last dimension, a non-negative float, a choice of strings, ...; see
:mod:`my_ops.ops._roles`). A role class holds the fake's check of its argument, so a fake
holds only its output's shape; the tests' valid samples, bad values and Hypothesis
strategies for each role are written separately, beside the tests, so a test never reuses
the checks it tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from ._roles import (  # noqa: F401  (re-exported: the roles are named from here too)
    Choice,
    GroupSize,
    LastDimVector,
    LikePrimary,
    NonNegativeFloat,
    OptionalBias,
    PackedWeight,
    Positions,
    Primary,
    QuantizedWeight,
    Role,
    WeightScale,
)

# --- tolerances -----------------------------------------------------------------------------

# Against the float64 reference, which is rounded once to the output dtype.
# u = unit roundoff = 2**-(mantissa bits incl. implicit bit).
# * float64: u = 1.1e-16. Row reductions over <= ~4k terms and libm erf/tanh/exp differ by
#   a few ulp, so 1e-9 leaves a large margin while still catching any real bug.
# * float32: u = 6e-8. A sequential fp32 sum of squares over ~4k elements can lose up to
#   ~sqrt(n)*u ~ 4e-6 (typical) relative; rtol 2e-5 is ~300 ulp, atol 1e-5 covers values
#   near zero (gelu of large negative inputs).
# * bfloat16: 8 significant bits, u = 2**-8 = 3.9e-3. A kernel may round an intermediate
#   (x + bias, x + residual, silu(a)) to bf16 before the next step and rounds the result
#   again: allow 4 ulp (rtol 1.6e-2, the torch.testing default) and atol 1e-2 for outputs
#   near zero, where an ulp of the input moves the output by up to ~1e-2 absolute.
# * float16: 11 significant bits, u = 2**-11 = 4.9e-4: 4 ulp -> rtol 2e-3, atol 1e-3.
DEFAULT_TOLERANCES: Mapping[torch.dtype, Mapping[str, float]] = {
    torch.float64: {"rtol": 1e-9, "atol": 1e-10},
    torch.float32: {"rtol": 2e-5, "atol": 1e-5},
    torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2},
    torch.float16: {"rtol": 2e-3, "atol": 1e-3},
}
# Ops whose math is float32 whatever the dtype (the quantized linear layers, which convert x
# to float32 before they quantize it): float64 results carry float32's rounding, so they get
# float32's tolerance. In float32 the integer sums are exact and what follows is a few
# correctly rounded operations (a product of scales, a product, a bias; linear_int4 adds one
# sum over the groups, K / 32 terms of similar size): 2e-5 relative is ~300 ulp, atol 2e-5
# covers outputs that cancel to near zero.
FLOAT32_MATH: Mapping[torch.dtype, Mapping[str, float]] = {
    **DEFAULT_TOLERANCES,
    torch.float64: {"rtol": 2e-5, "atol": 2e-5},
    torch.float32: {"rtol": 2e-5, "atol": 2e-5},
}
# Float products summed in float32 along K (linear_packed: one running sum per output, K up to
# ~4k in the tests): each of the K additions rounds a partial sum of size up to sqrt(K) for
# unit-size terms, so the error is about u * K ~ 2.4e-4 at K = 4099 (measured: 8.7e-4 at the
# tail of 16k outputs), however small the output. atol 3e-3 is 3x that tail and 300x below
# what a wrong weight, row or bias does to terms of unit size; rtol 2e-5 holds for the large
# outputs of the edge samples.
FLOAT32_SUMS: Mapping[torch.dtype, Mapping[str, float]] = {
    **DEFAULT_TOLERANCES,
    torch.float64: {"rtol": 2e-5, "atol": 3e-3},
    torch.float32: {"rtol": 2e-5, "atol": 3e-3},
}
EXACT: Mapping[torch.dtype, Mapping[str, float]] = {
    dtype: {"rtol": 0.0, "atol": 0.0} for dtype in DEFAULT_TOLERANCES
}


# --- the spec -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Autograd:
    """The arguments of ``torch.library.register_autograd``."""

    backward: Callable
    setup_context: Callable | None = None


NOT_DIFFERENTIABLE = None


@dataclass(frozen=True)
class InferenceOnly:
    """An op without a gradient (a quantized layer): a call that needs one is refused with
    one error naming the op, instead of torch's warning and a result that silently carries
    no gradient."""

    def message(self, op: str) -> str:
        return (
            f"{op}: an inference op, which has no gradient; call it under torch.no_grad() or "
            "with inputs that do not require grad"
        )


INFERENCE_ONLY = InferenceOnly()


@dataclass(frozen=True)
class InPlace:
    """The op's in-place form, ``<op>_`` (vLLM's): the op's arguments, its outputs written
    into the arguments ``writes`` names (output i into ``writes[i]``), returning nothing.
    It refuses what the op refuses, and also a written argument whose elements repeat (an
    expanded tensor) or that shares memory with another argument. No gradient: a call that
    needs one is refused, naming the form."""

    writes: tuple[str, ...]


@dataclass(frozen=True)
class BadCase:
    """A call the op must refuse with a RuntimeError whose message names ``blame``.

    ``make_args(device)`` builds the arguments, in schema order.
    """

    id: str
    make_args: Callable[[str], tuple]
    blame: str
    # A refusal of the arguments' values (a zero scale), which only the kernels can make:
    # a fake, and so torch.export, sees shapes and dtypes alone.
    values_only: bool = False


@dataclass(frozen=True)
class BenchTargets:
    """Targets of ``//ops:bench`` for the op on one device type; None = not a target.

    ``min_vs_eager``: eager time / our time. ``max_vs_compiled``: our time / torch.compile's
    time. ``min_clone_bandwidth``: our bandwidth ((bytes read + written) / time) as a
    fraction of ``torch.clone``'s on the same device, in the same run.
    """

    min_vs_eager: float | None = None
    max_vs_compiled: float | None = None
    min_clone_bandwidth: float | None = None


@dataclass(frozen=True)
class OpSpec:
    """Everything the project knows about one op outside its C++ folder.

    ``name`` is the schema name (``torch.ops.my_ops.<name>``); ``arguments`` lists the
    schema's arguments, in order, by role. ``fake`` takes the arguments after
    :meth:`check_args` has accepted them and returns empty outputs of the right shapes.
    ``reference`` takes the same arguments and
    computes in float64, returning the outputs in the input dtype; it must be built from
    ATen ops that are differentiable, so the tests also take gradients through it.
    ``eager`` is what a user writes without the op (the benchmark's baseline).
    """

    name: str
    wrapper: Callable
    fake: Callable
    reference: Callable
    eager: Callable
    arguments: Mapping[str, Role]
    autograd: Autograd | InferenceOnly | None
    tolerances: Mapping[torch.dtype, Mapping[str, float]] = field(
        default_factory=lambda: DEFAULT_TOLERANCES
    )
    # Edge values beyond the random samples (huge, tiny, exact zeros): f(device) -> [args].
    edge_samples: Callable[[str], list[tuple]] = lambda device: []
    # Refusals the roles do not imply (e.g. a check only this op makes).
    bad_cases: Callable[[str], list[BadCase]] = lambda device: []
    bench: Mapping[str, BenchTargets] = field(default_factory=dict)
    # The schema's defaults as registration.cpp should give them, written out: the tests
    # compare the two, so changing a default is a deliberate edit in both places.
    defaults: Mapping[str, object] = field(default_factory=dict)
    # The in-place form, ``torch.ops.my_ops.<name>_``, when the library has one.
    in_place: InPlace | None = None

    @property
    def qualname(self) -> str:
        return f"my_ops::{self.name}"

    @property
    def op(self) -> torch._ops.OpOverload:
        return getattr(torch.ops.my_ops, self.name).default

    @property
    def primary_name(self) -> str:
        names = [n for n, r in self.arguments.items() if isinstance(r, Primary)]
        if len(names) != 1:
            raise ValueError(f"{self.name}: an op spec has exactly one Primary argument")
        return names[0]

    @property
    def primary(self) -> Primary:
        return self.arguments[self.primary_name]

    @property
    def in_place_name(self) -> str:
        return self.name + "_"

    def check_args(self, args: tuple, op: str | None = None) -> None:
        """Refuse bad arguments (all of them, in schema order) as the kernels do: the
        primary first, since every other check compares with it, then the rest in order.
        ``op``: the name the messages give (the in-place form's); the op's by default."""
        op = self.name if op is None else op
        names = list(self.arguments)
        x = args[names.index(self.primary_name)]
        self.primary.check(op, self.primary_name, x, x)
        by_name = dict(zip(names, args, strict=True))
        for (name, role), value in zip(self.arguments.items(), args, strict=True):
            if name != self.primary_name:
                role.check_in_call(op, name, value, x, by_name)

    def checked_fake(self, *args):
        """The fake as torch calls it: the arguments checked, then the outputs' shapes."""
        self.check_args(args)
        return self.fake(*args)

    def schema_default(self, argument: str):
        """The default the schema in registration.cpp gives ``argument``."""
        for arg in self.op._schema.arguments:
            if arg.name == argument:
                if not arg.has_default_value():
                    raise KeyError(f"{self.name}: argument {argument} has no default")
                return arg.default_value
        raise KeyError(f"{self.name}: no argument {argument}")

    def bind(self, args: tuple, kwargs: Mapping[str, object]) -> tuple:
        """All arguments in schema order, the omitted ones at the schema's defaults.

        Under FakeTensorMode torch calls a fake with the arguments as the caller passed
        them, so a fake without this would need its own copy of every default.
        """
        bound = list(args)
        for arg in self.op._schema.arguments[len(args) :]:
            if arg.name in kwargs:
                bound.append(kwargs[arg.name])
            elif arg.has_default_value():
                bound.append(arg.default_value)
            else:
                raise TypeError(f"{self.name}() missing required argument {arg.name!r}")
        return tuple(bound)

    def example_args(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: str | torch.device,
        generator: torch.Generator | None = None,
    ) -> tuple:
        """Contiguous random arguments for a primary of ``shape`` (made valid for it by
        ``Primary.shape_for``), every scalar at its typical value (``Role.example``)."""

        def randn(s):
            return torch.randn(s, generator=generator).to(device=device, dtype=dtype)

        x = randn(self.primary.shape_for(tuple(shape)))
        # The scalars first: a tensor may follow one (a weight scale, its group size).
        made: dict[str, object] = {}
        for name, role in sorted(self.arguments.items(), key=lambda item: item[1].is_tensor):
            made[name] = role.example_in_call(x, randn, made)
        return tuple(made[name] for name in self.arguments)
