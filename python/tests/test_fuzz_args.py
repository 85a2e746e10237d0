r"""Fuzzing the argument checks: random, mostly invalid arguments for every op and the class.

Each example calls one of ``torch.ops.my_ops.*`` (every op of ``my_ops.ops.SPECS``, its
arguments drawn from their roles) or ``torch.classes.my_ops.RMSNorm`` with tensors of random
dtype (floating, integer, bool, complex), rank 0-4, sizes including 0, mismatched shapes,
devices (meta included) and layouts (strided, transposed, zero-stride expanded), or with None
or Python scalars in place of tensors, and floats / choices that are NaN, infinite, negative,
mistyped or misspelt. Every example must either succeed and match the op's float64 reference
(with the op's tolerances) or raise RuntimeError, TypeError or ValueError whose message names
an argument that is actually wrong. A crash or hang fails the run (a hang after
``HANG_SECONDS``, with a traceback).

CI runs a fixed set of 100 examples per op and device. A longer run by hand, whose statistics
count the valid calls, the rejections by argument and the known gaps:

    tools/bazel test //python:fuzz_args_test --test_env=MY_OPS_FUZZ_EXAMPLES=5000 \
        --test_timeout=3600 --test_output=all --test_arg=--hypothesis-show-statistics

With ``--test_env=MY_OPS_FUZZ_SEED=N`` the run draws other examples than CI's, and with
``--test_env=MY_OPS_FUZZ_STRICT=1`` it fails on the known gaps listed in ``KNOWN_GAPS``
instead of counting them.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

try:
    from hypothesis import event, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st
except ImportError:  # tools/gpu_check runs the suite with a stub when hypothesis is missing
    pytest.skip("hypothesis is not installed", allow_module_level=True)

import my_ops
from my_ops.ops._spec import LastDimVector, LikePrimary, NonNegativeFloat, Primary
from role_values import values_of
from testing_utils import DEVICES, FLOAT_DTYPES, TOLERANCES, hypothesis_settings, run_this_file

EXAMPLES = int(os.environ.get("MY_OPS_FUZZ_EXAMPLES", "100"))
SEED = os.environ.get("MY_OPS_FUZZ_SEED")
STRICT = os.environ.get("MY_OPS_FUZZ_STRICT", "") not in ("", "0")
HANG_SECONDS = 120

FLOATING = frozenset(FLOAT_DTYPES)
OTHER_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.complex64,
    torch.complex128,
]
LAYOUTS = ["contiguous", "strided", "transposed", "expanded"]

# Known ways the library breaks the contract. Each is matched narrowly (see _known_gap) and
# counted as a Hypothesis event instead of failing; MY_OPS_FUZZ_STRICT=1 fails on them.
# Delete an entry once its cause is fixed.
KNOWN_GAPS = {
    "no-tensor-args": (
        "every Tensor argument is None: the dispatcher has no backend to pick and raises "
        "NotImplementedError ('There were no tensor arguments ...') before any check runs"
    ),
}


# --- what to call with -------------------------------------------------------------------


@dataclass(frozen=True)
class T:
    """A tensor built at call time; its repr is what a failing example prints."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: str
    layout: str = "contiguous"
    seed: int = 0
    # Every other row (the whole tensor when 1-D) is zero: the rows where eps alone keeps a
    # norm finite (an eps below float32's range gives 0/0 there, as eager's float math does).
    zero_rows: bool = False
    # Floating values drawn as |v| / 100 + 1e-3: finite and positive (a quantized weight's scales).
    positive: bool = False
    # Integer values taken modulo this when > 0: indices into something of that length.
    below: int = 0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def build(self) -> torch.Tensor:
        shape = list(self.shape)
        layout = self.layout if shape else "contiguous"
        if layout == "transposed" and len(shape) < 2:
            layout = "strided"
        if layout == "strided":  # every other element of the last dim, storage offset 1
            base = self._values([*shape[:-1], 2 * shape[-1] + 1])
            t = base[..., 1::2]
        elif layout == "transposed":  # last-dim stride != 1
            t = self._values([*shape[:-2], shape[-1], shape[-2]]).transpose(-1, -2)
        elif layout == "expanded":  # stride 0 in every other dim
            base = self._values([1 if i % 2 == self.seed % 2 else s for i, s in enumerate(shape)])
            t = base.expand(shape)
        else:
            t = self._values(shape)
        assert tuple(t.shape) == self.shape
        if self.zero_rows and t.dtype.is_floating_point and t.device.type != "meta":
            if layout != "expanded":  # an expanded tensor cannot be written through
                (t[..., ::2, :] if t.dim() >= 2 else t).zero_()
        return t

    def _values(self, shape: list[int]) -> torch.Tensor:
        if self.device == "meta":
            return torch.empty(shape, dtype=self.dtype, device="meta")
        g = torch.Generator().manual_seed(self.seed)
        v = torch.randn(shape, generator=g, dtype=torch.float64)
        if self.dtype == torch.bool:
            t = v > 0
        elif self.dtype.is_complex:
            t = torch.complex(v, torch.randn(shape, generator=g, dtype=torch.float64))
        elif self.dtype.is_floating_point:
            t = v.abs() * 0.01 + 1e-3 if self.positive else v
        else:
            t = (v * 4).round().abs()
            if self.below > 0:
                t = t % self.below
        return t.to(dtype=self.dtype, device=self.device)


def _build(arg):
    return arg.build() if isinstance(arg, T) else arg


@dataclass(frozen=True)
class Case:
    """One call: ``target`` is an op name, or ``RMSNorm.<method>`` for the class."""

    target: str
    args: tuple[tuple[str, object], ...]  # (name, value)
    ctor: tuple[tuple[str, object], ...] = ()  # the class's (weight, eps)

    def roles(self) -> dict:
        return CLASS_ROLES if self.ctor else SPECS[self.target].arguments

    def args_of(self, values: dict) -> list[tuple[str, object]]:
        """(name, built value) of the op's or method's arguments."""
        return [(n, values[n]) for n, _ in self.args]

    def ctor_of(self, values: dict) -> list[tuple[str, object]]:
        return [(n, values[n]) for n, _ in self.ctor]

    def tensors(self) -> list:
        roles = self.roles()
        return [v for n, v in self.ctor + self.args if roles[n].is_tensor]

    def __repr__(self) -> str:
        def fmt(params):
            return ", ".join(f"{n}={v!r}" for n, v in params)

        if self.ctor:
            return f"RMSNorm({fmt(self.ctor)}).{self.target.split('.')[1]}({fmt(self.args)})"
        return f"{self.target}({fmt(self.args)})"


# --- strategies ----------------------------------------------------------------------------
#
# Each call first draws which of its arguments to corrupt (none in about a quarter of the
# calls, so the success path is exercised too). A corrupted argument comes from a wide
# distribution that is usually, not always, wrong; the oracle below decides either way.


@st.composite
def faults(draw, names: list[str]) -> frozenset[str]:
    if not draw(st.sampled_from([True, True, False])):
        return frozenset()
    chosen = {name for name in names if draw(st.booleans())}
    return frozenset(chosen or {draw(st.sampled_from(names))})


@st.composite
def shapes(draw, min_rank: int = 0) -> tuple[int, ...]:
    shape = [draw(st.integers(0, 5)) for _ in range(draw(st.integers(min_rank, 4)))]
    if shape and draw(st.booleans()):
        shape[-1] = draw(st.integers(1, 40))  # past one vector width, with a tail
    return tuple(shape)


python_scalars = st.one_of(
    st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.complex_numbers(max_magnitude=3),
)
any_dtype = st.sampled_from(FLOAT_DTYPES + OTHER_DTYPES)
seeds = st.integers(0, 2**16)


@st.composite
def tensors(
    draw, shape, dtype: torch.dtype, device: str, positive: bool = False, below: int = 0
) -> T:
    layout, seed, zero_rows = draw(st.sampled_from(LAYOUTS)), draw(seeds), draw(st.booleans())
    return T(shape, dtype, device, layout, seed, zero_rows and not positive, positive, below)


@st.composite
def wrong_tensor_args(draw, shape, wrong_shape, dtype: torch.dtype, devices: list[str]):
    """None, a Python scalar, or a tensor with a wrong dtype, device or shape (or several)."""
    kind = draw(st.sampled_from(["none", "scalar", "tensor", "tensor", "tensor"]))
    if kind == "none":
        return None
    if kind == "scalar":
        return draw(python_scalars)
    wrong = draw(st.sets(st.sampled_from(["dtype", "device", "shape"]), min_size=1))
    return draw(
        tensors(
            draw(wrong_shape) if "shape" in wrong else shape,
            draw(any_dtype) if "dtype" in wrong else dtype,
            draw(st.sampled_from(devices[1:])) if "device" in wrong else devices[0],
        )
    )


def scalar_tensors(valid: bool):
    # torch converts a one-element real CPU tensor to a float argument.
    return st.builds(
        T,
        st.sampled_from([(), (1,)] if valid else [(), (1,), (2,)]),
        st.sampled_from(
            [torch.float64] if valid else [torch.float32, torch.int64, torch.complex64]
        ),
        st.just("cpu") if valid else st.sampled_from(["cpu", "meta"]),
        st.just("contiguous"),
        seeds,
    )


def _devices(device: str) -> list[str]:
    """``device`` first, then the devices to mix with it: meta, and the cpu for a GPU.

    A cpu run mixes in no GPU even where there is one, so that it runs no CUDA kernel and
    the cpu/cuda mix is tested by the cuda run, which only a machine with a GPU runs.
    """
    devices = [device, "meta"]
    if device != "cpu":
        devices.append("cpu")
    return devices


# What the roles' fuzz strategies draw with (role_values.py): tensors described by T,
# built when the call is made, so that a failing example prints as a short repr.
KIT = SimpleNamespace(
    tensor=tensors,
    wrong_tensor=wrong_tensor_args,
    shapes=shapes,
    python_scalars=python_scalars,
    scalar_tensor=scalar_tensors,
    devices=_devices,
    floating_dtypes=FLOAT_DTYPES,
    other_dtypes=OTHER_DTYPES,
    any_dtype=any_dtype,
)


@st.composite
def op_calls(draw, spec, device: str):
    """A call of ``spec``'s op: each argument drawn from its role, some of them wrong."""
    wrong = draw(faults(list(spec.arguments)))
    x_name = spec.primary_name
    x, ctx = draw(values_of(spec.primary).fuzz_primary(KIT, device, x_name in wrong))
    ctx.drawn[x_name] = x
    # Scalars first: a tensor may follow one (a weight scale, its group size).
    for name, role in sorted(spec.arguments.items(), key=lambda item: item[1].is_tensor):
        if name != x_name:
            ctx.drawn[name] = draw(values_of(role).fuzz(KIT, name in wrong, ctx))
    return Case(spec.name, tuple((name, ctx.drawn[name]) for name in spec.arguments))


# The class: the constructor checks weight and eps, its methods x and residual (and the
# weight against x) as these roles.
CLASS_ROLES = {
    "x": Primary(),
    "residual": LikePrimary(),
    "weight": LastDimVector(),
    "eps": NonNegativeFloat(),
}


@st.composite
def class_calls(draw, device: str):
    wrong = draw(faults(["x", "residual", "weight", "eps"]))
    x, ctx = draw(values_of(CLASS_ROLES["x"]).fuzz_primary(KIT, device, "x" in wrong))
    weight = draw(values_of(CLASS_ROLES["weight"]).fuzz(KIT, "weight" in wrong, ctx))
    # The constructor's eps is a double that no tensor converts to.
    eps = draw(values_of(CLASS_ROLES["eps"]).fuzz(KIT, "eps" in wrong, ctx, tensors=False))
    ctor = (("weight", weight), ("eps", eps))
    if draw(st.booleans()):
        return Case("RMSNorm.forward", (("x", x),), ctor)
    residual = draw(values_of(CLASS_ROLES["residual"]).fuzz(KIT, "residual" in wrong, ctx))
    return Case("RMSNorm.forward_residual", (("x", x), ("residual", residual)), ctor)


# --- the contract ----------------------------------------------------------------------------


def _schema_error(params, roles: dict) -> set[str]:
    """Python values the schema cannot convert: the first one is named."""
    for name, value in params:
        if not values_of(roles[name]).schema_accepts(value):
            return {name}
    return set()


def _role_blame(roles: dict, x_name: str, values: dict) -> set[str]:
    """Names of every argument that breaks what its role allows; empty when the call is valid."""
    x = values[x_name]
    x_wrong = values_of(roles[x_name]).fuzz_wrong(x)
    blame = {x_name} if x_wrong else set()
    for name, role in roles.items():
        if name != x_name and values_of(role).fuzz_wrong_in_call(
            values[name], None if x_wrong else x, values
        ):
            blame.add(name)
    return blame


def expected_blame(case: Case, values: dict) -> set[str]:
    """What a correct implementation does with ``case`` (its arguments built, ``values``):
    {} succeeds, else names one of these."""
    if not case.ctor:
        spec = SPECS[case.target]
        return _schema_error(case.args_of(values), spec.arguments) or _role_blame(
            spec.arguments, spec.primary_name, values
        )
    # The class: the constructor checks weight and eps, the method the rest.
    blame = _schema_error(case.ctor_of(values), CLASS_ROLES)
    if blame:
        return blame
    weight, eps = values["weight"], values["eps"]
    if weight is None or weight.dtype not in FLOATING or weight.dim() != 1:
        blame.add("weight")
    if values_of(CLASS_ROLES["eps"]).fuzz_wrong(eps, None):
        blame.add("eps")
    if blame:
        return blame
    # The method checks its own arguments and the weight against x.
    method = {n: CLASS_ROLES[n] for n in values if n != "eps"}
    return _schema_error(case.args_of(values), CLASS_ROLES) or _role_blame(method, "x", values)


def _subject(message: str) -> str | None:
    """The argument an error message is about."""
    for pattern in (r"for argument '(\w+)'", r"argument #\d+ '(\w+)'", r"expected (\w+) to\b"):
        m = re.search(pattern, message)
        if m:
            return m.group(1)
    return None


def _known_gap(case: Case, error: Exception, subject: str | None, blame: set[str]) -> str | None:
    message = str(error)
    tensors = case.tensors()
    if (
        isinstance(error, NotImplementedError)
        and "There were no tensor arguments" in message
        and all(t is None for t in tensors)
    ):
        return "no-tensor-args"
    return None


# --- running one case ---------------------------------------------------------------------


@contextlib.contextmanager
def _hang_guard():
    """A call that never returns dumps every thread's stack and ends the process."""
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _call(case: Case, values: dict):
    if not case.ctor:
        return getattr(torch.ops.my_ops, case.target)(*(values[n] for n, _ in case.args))
    obj = torch.classes.my_ops.RMSNorm(values["weight"], values["eps"])
    method = getattr(obj, case.target.split(".")[1])
    return method(*(values[n] for n, _ in case.args))


def _check_output(case: Case, name: str, actual, expected, x: torch.Tensor, tolerances=None):
    assert isinstance(actual, torch.Tensor), f"{case}: {name} is a {type(actual).__name__}"
    got = (tuple(actual.shape), actual.dtype, actual.device)
    want = (tuple(expected.shape), expected.dtype, expected.device)
    assert got == want, f"{case}: {name} is {got}, expected {want}"
    assert actual.is_contiguous(), f"{case}: {name} is not contiguous"
    if actual.device.type == "meta":
        return
    if actual.numel():
        assert actual.data_ptr() != x.data_ptr(), f"{case}: {name} aliases x"
    torch.testing.assert_close(
        actual.double(),
        expected.double(),
        **(tolerances or TOLERANCES)[x.dtype],
        equal_nan=True,
        msg=lambda m: f"{case}: {name} differs from the float64 reference\n{m}",
    )


def _check_result(case: Case, values: dict, result) -> None:
    x = values["x"]
    if not case.ctor:
        spec = SPECS[case.target]
        args = [_as_float(spec.arguments[n], values[n]) for n, _ in case.args]
        expected, tolerances = spec.reference(*args), spec.tolerances
    else:
        eps, residual = _as_float(CLASS_ROLES["eps"], values["eps"]), values.get("residual")
        expected, tolerances = my_ops.nn.reference(x, values["weight"], eps, residual), None
    expected = expected if isinstance(expected, tuple) else (expected,)
    result = result if isinstance(result, tuple) else (result,)
    assert len(result) == len(expected), f"{case}: returned {result!r}"
    for i, (actual, want) in enumerate(zip(result, expected, strict=True)):
        _check_output(case, f"output {i}", actual, want, x, tolerances)


def _as_float(role, value):
    # The reference takes a float argument as a Python float, as the kernel receives it.
    if role.schema_type == "float" and isinstance(value, torch.Tensor):
        return float(value.item())
    return value


def run_case(case: Case) -> None:
    values = {n: _build(v) for n, v in case.ctor + case.args}
    blame = expected_blame(case, values)
    try:
        with _hang_guard():
            result = _call(case, values)
    except Exception as error:  # every outcome is judged below
        first_line = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
        if not blame:
            raise AssertionError(f"{case}: rejected a valid call: {first_line}") from error
        subject = _subject(str(error))
        if isinstance(error, RuntimeError | TypeError | ValueError) and subject in blame:
            event(f"rejected, naming {subject}")
            return
        gap = _known_gap(case, error, subject, blame)
        if gap and not STRICT:
            event(f"known gap: {gap}")
            return
        hint = f" (known gap {gap}: {KNOWN_GAPS[gap]})" if gap else ""
        raise AssertionError(
            f"{case}: expected RuntimeError/TypeError/ValueError naming one of {sorted(blame)}, "
            f"got {first_line}{hint}"
        ) from error
    if blame:
        raise AssertionError(
            f"{case}: accepted invalid arguments (expected an error naming one of {sorted(blame)})"
        )
    event("valid call, matches the reference")
    _check_result(case, values, result)


# --- tests ------------------------------------------------------------------------------------

SPECS = my_ops.ops.SPECS
STRATEGIES: dict[str, Callable] = {
    **{name: functools.partial(op_calls, spec) for name, spec in SPECS.items()},
    "RMSNorm": class_calls,
}


def _fuzz_settings(test):
    test = settings(hypothesis_settings(EXAMPLES), derandomize=SEED is None)(test)
    # CI draws the same examples every run; a seed given by hand draws others.
    return hypothesis_seed(int(SEED))(test) if SEED is not None else test


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", list(STRATEGIES))
@_fuzz_settings
@given(data=st.data())
def test_fuzz_arguments(target, device, data):
    run_case(data.draw(STRATEGIES[target](device), label="case"))


if __name__ == "__main__":
    run_this_file(__file__)
