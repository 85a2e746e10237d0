"""The tests' view of the op registry: arguments built from each op's argument roles.

Every suite iterates over :data:`SPECS` (all of ``my_ops.ops.SPECS``) and builds its
calls here, so a new op module with a ``SPEC`` is tested by every suite without a test
file naming it. A role's valid and invalid values come from
``role_values.py``, written independently of the checks the fakes and kernels make.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import torch

import my_ops
from my_ops.ops._spec import Autograd, InferenceOnly, OpSpec
from role_values import values_of
from testing_utils import assert_close, make_input

SPECS: list[OpSpec] = list(my_ops.ops.SPECS.values())
DIFFERENTIABLE: list[OpSpec] = [s for s in SPECS if isinstance(s.autograd, Autograd)]
INFERENCE_ONLY: list[OpSpec] = [s for s in SPECS if isinstance(s.autograd, InferenceOnly)]


def by_op(specs: list[OpSpec] = SPECS):
    """``pytest.mark.parametrize`` over ops, with the op's name as the test id."""
    return pytest.mark.parametrize("spec", specs, ids=[s.name for s in specs])


def scalar_variants(spec: OpSpec) -> list[dict[str, object]]:
    """Every combination of the values of the op's exhaustive scalars (choices, flags); the
    other scalars (floats) take turns through their values."""
    scalars = {n: values_of(r) for n, r in spec.arguments.items() if not r.is_tensor}
    names = [n for n, v in scalars.items() if v.exhaustive]
    combos = list(itertools.product(*(scalars[n].valid_values() for n in names))) or [()]
    variants = []
    for i, combo in enumerate(combos):
        values: dict[str, object] = dict(zip(names, combo, strict=True))
        for name, scalar in scalars.items():
            if not scalar.exhaustive:
                samples = scalar.valid_values()
                values[name] = samples[i % len(samples)]
        variants.append(values)
    return variants


def make_args(
    spec: OpSpec,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: str,
    layout: str = "contiguous",
    scalars: dict[str, object] | None = None,
    *,
    scale: float = 2.0,
    requires_grad: bool = False,
    generator: torch.Generator | None = None,
) -> tuple:
    """Valid arguments, in schema order, for a primary of ``spec.primary.shape_for(shape)``
    in ``layout``; each other tensor in the layout its role picks for it."""
    scalars = scalars if scalars is not None else scalar_variants(spec)[0]
    x = make_input(spec.primary.shape_for(shape), dtype, device, layout, scale, generator)

    def build(s: tuple[int, ...], lay: str) -> torch.Tensor:
        return make_input(s, dtype, device, lay, generator=generator)

    # The scalars first: a tensor may follow one (a weight scale, its group size).
    made: dict[str, object] = {n: scalars[n] for n, r in spec.arguments.items() if not r.is_tensor}
    for name, role in spec.arguments.items():
        if not role.is_tensor:
            continue
        t = x if name == spec.primary_name else values_of(role).make_in_call(x, build, layout, made)
        if requires_grad and t is not None and t.is_floating_point():
            t = t.detach().requires_grad_(True)
        made[name] = t
    return tuple(made[name] for name in spec.arguments)


def sample_args(
    spec: OpSpec, device: str, shapes, dtypes, layouts, *, requires_grad: bool = False
) -> Iterator[tuple]:
    """make_args over shapes x dtypes x layouts x scalar variants."""
    for shape, dtype, layout in itertools.product(shapes, dtypes, layouts):
        for scalars in scalar_variants(spec):
            yield make_args(
                spec, shape, dtype, device, layout, scalars, requires_grad=requires_grad
            )


def as_tuple(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def tensor_args(args: tuple) -> list[torch.Tensor]:
    return [a for a in args if isinstance(a, torch.Tensor)]


def describe(args: tuple) -> str:
    return ", ".join(
        f"{tuple(a.shape)}/{a.dtype}/{a.stride()}" if isinstance(a, torch.Tensor) else repr(a)
        for a in args
    )


def assert_matches_reference(
    spec: OpSpec, args: tuple, result, msg: str = "", *, equal_nan: bool = False
) -> None:
    """Every output: same metadata as the reference's, a new tensor, and within tolerance
    (NaN exactly where the reference has NaN, with ``equal_nan``)."""
    expected = as_tuple(spec.reference(*args))
    got = as_tuple(result)
    assert len(got) == len(expected), f"{spec.name}: {len(got)} outputs, expected {len(expected)}"
    inputs = tensor_args(args)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        where = f"{spec.name} output {i} ({describe(args)}) {msg}"
        assert (g.shape, g.dtype, g.device) == (e.shape, e.dtype, e.device), where
        if g.numel():
            for t in inputs:
                if t.numel():
                    assert g.untyped_storage().data_ptr() != t.untyped_storage().data_ptr(), (
                        f"{where}: aliases an input"
                    )
        assert_close_spec(spec, g, e, where, equal_nan=equal_nan)


def assert_close_spec(
    spec: OpSpec, actual: torch.Tensor, expected: torch.Tensor, msg="", *, equal_nan=False
) -> None:
    """testing_utils.assert_close with the op's tolerances."""
    assert_close(actual, expected, msg, spec.tolerances, equal_nan=equal_nan)


def output_grads(outputs: tuple, generator: torch.Generator | None = None) -> tuple:
    """Random incoming gradients, one per floating output."""
    return tuple(
        torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o.dtype).to(o.device)
        for o in outputs
    )
