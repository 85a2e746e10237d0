"""The out= companions, <op>_out(<the op's arguments>, *, Tensor(a!) out) -> Tensor(a!).

An exported package calls a companion in place of its op, with an output buffer that Inductor
allocated and reuses (ops/registration.cpp). So a companion must write exactly what its op
returns, into any buffer Inductor may plan (a strided slice of a larger one included), and
refuse a buffer it cannot fill with one error naming ``out``. The companions have CPU kernels.
"""

from __future__ import annotations

import pytest
import torch

import my_ops
from my_ops.ops import companion
from op_table import SPECS, make_args, scalar_variants
from testing_utils import run_this_file

WITH_COMPANION = [spec for spec in SPECS if companion(spec) is not None]
by_companion = pytest.mark.parametrize("spec", WITH_COMPANION, ids=[s.name for s in WITH_COMPANION])


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_the_single_output_ops_of_every_family_have_companions():
    names = {spec.name for spec in WITH_COMPANION}
    assert {"fused_bias_gelu", "rms_norm", "silu_and_mul", "rotary_embedding"} <= names


@by_companion
def test_a_companion_has_the_ops_arguments_and_one_out(spec):
    # Written out from the op's own schema: its arguments, then "*, Tensor(a!) out", returning
    # the out tensor, which is the form Inductor lowers a call to.
    schema = str(spec.op._schema)
    head, _, _ = schema.rpartition(") -> ")
    want = f"{head.replace(f'my_ops::{spec.name}(', f'my_ops::{spec.name}_out(', 1)}"
    want += ", *, Tensor(a!) out) -> Tensor(a!)"
    assert str(companion(spec)._schema) == want


@by_companion
def test_a_companion_takes_its_tensors_first(spec):
    # Inductor lowers a call to the companion with the tensor arguments first and the others
    # after them (ExternKernelOut's inputs, then its constant_args), whatever the schema's
    # order: a tensor after a scalar would reach the C shim in the scalar's place (a package
    # that does not compile, or reads a bool as a tensor).
    kinds = [
        isinstance(a.type, torch.TensorType)
        or (
            isinstance(a.type, torch.OptionalType)
            and isinstance(a.type.getElementType(), torch.TensorType)
        )
        for a in spec.op._schema.arguments
    ]
    assert kinds == sorted(kinds, reverse=True), str(spec.op._schema)


def _expected(spec, args):
    with torch.no_grad():
        return spec.op(*args)


@by_companion
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("shape", [(1, 64), (3, 5, 40), (200, 256)])
# "offset": unaligned rows, and the optional tensors the contiguous samples leave out (rotary
# positions).
@pytest.mark.parametrize("layout", ["contiguous", "offset"])
def test_a_companion_writes_what_its_op_returns(spec, dtype, shape, layout):
    for scalars in scalar_variants(spec):
        args = make_args(spec, shape, dtype, "cpu", layout, scalars)
        want = _expected(spec, args)
        out = torch.full_like(want, float("nan"))
        got = companion(spec)(*args, out=out)
        assert got.data_ptr() == out.data_ptr(), "the companion returns its out argument"
        assert torch.equal(out, want), (spec.name, scalars, (out - want).abs().max())


@by_companion
def test_a_strided_out_gets_the_same_values_and_nothing_around_them_changes(spec):
    # Inductor may plan an output into a slice of a larger buffer (a concatenation's).
    args = make_args(spec, (4, 64), torch.float32, "cpu")
    want = _expected(spec, args)
    buffer = torch.zeros(*want.shape[:-1], 2 * want.shape[-1])
    out = buffer[..., 1::2]
    assert not out.is_contiguous()
    companion(spec)(*args, out=out)
    assert torch.equal(out, want)
    assert torch.equal(buffer[..., ::2], torch.zeros_like(want))


@by_companion
def test_a_companion_accepts_non_contiguous_inputs(spec):
    args = make_args(spec, (6, 32), torch.float32, "cpu", "transposed")
    want = _expected(spec, args)
    out = torch.empty_like(want)
    companion(spec)(*args, out=out)
    assert torch.equal(out, want)


def _bad_calls(spec, args, want):
    """(what, the arguments, out, the refusal's words) of calls a companion must refuse."""
    x_index = list(spec.arguments).index(spec.primary_name)
    x = args[x_index]
    yield "shape", args, torch.zeros(*want.shape[:-1], want.shape[-1] + 1), "to have shape"
    yield "dtype", args, torch.zeros_like(want, dtype=torch.float64), "to have the same dtype"
    expanded = torch.zeros(1, want.shape[-1]).expand(want.shape)
    yield "expanded", args, expanded, "to have no repeated elements"
    if x.shape == want.shape:
        yield "x itself", args, x, "to share no memory with x"
    # x and out as two views of one buffer that share half of x.
    base = torch.zeros(x.numel() + want.numel())
    shared = list(args)
    shared[x_index] = base[: x.numel()].view(x.shape).copy_(x)
    start = x.numel() // 2
    out = base[start : start + want.numel()].view(want.shape)
    yield "overlapping x", tuple(shared), out, "to share no memory with x"


@by_companion
def test_a_bad_out_is_refused_naming_out_and_left_as_it_was(spec):
    args = make_args(spec, (4, 64), torch.float32, "cpu")
    want = _expected(spec, args)
    for what, call, out, words in _bad_calls(spec, args, want):
        before = out.clone()
        with pytest.raises(RuntimeError, match=f"^{spec.name}_out: expected out {words}") as e:
            companion(spec)(*call, out=out)
        assert "\n" not in str(e.value).split("\nException raised from")[0], what
        assert torch.equal(out, before), what


@by_companion
def test_the_companions_fake_gives_out_back_and_checks_it(spec):
    args = make_args(spec, (4, 64), torch.float32, "cpu")
    want = _expected(spec, args)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fake_args = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
        out = torch.empty(want.shape)
        assert companion(spec)(*fake_args, out=out) is out
        with pytest.raises(RuntimeError, match=f"{spec.name}_out: expected out"):
            companion(spec)(*fake_args, out=torch.empty(want.shape[-1]))


def test_my_ops_is_loaded():
    assert my_ops.load_library()


if __name__ == "__main__":
    run_this_file(__file__)
