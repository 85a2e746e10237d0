"""The in-place forms, ``<op>_`` (``OpSpec.in_place``): the op's results written into the
arguments the spec names, nothing returned, and what the op refuses refused with nothing
written; also a written argument that is expanded or shares memory with another.

The results are compared with the op's own (every sample of the numerics suites' shapes,
dtypes and layouts, and the edge samples), which the numerics suites hold to the float64
reference, and with that reference here too.
"""

from __future__ import annotations

import re

import pytest
import torch

import my_ops
from my_ops.ops import _spec
from op_table import SPECS, as_tuple, assert_close_spec, make_args, sample_args
from role_values import values_of
from testing_utils import DEVICES, FLOAT_DTYPES, LAYOUTS, run_this_file

WITH_IN_PLACE = [spec for spec in SPECS if spec.in_place is not None]
by_in_place = pytest.mark.parametrize("spec", WITH_IN_PLACE, ids=[s.name for s in WITH_IN_PLACE])


def test_the_in_place_forms_are_found():
    assert {spec.name for spec in WITH_IN_PLACE} >= {"fused_add_rms_norm"}


def _in_place_op(spec):
    return getattr(torch.ops.my_ops, spec.in_place_name).default


def _written(spec) -> list[int]:
    names = list(spec.arguments)
    return [names.index(name) for name in spec.in_place.writes]


def _run_in_place(spec, args) -> tuple:
    """Copies of ``args`` after the in-place call (its written arguments hold the results)."""
    copies = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    with torch.no_grad():
        assert _in_place_op(spec)(*copies) is None
    return copies


def _check_against_the_op(spec, args) -> None:
    with torch.no_grad():
        want = as_tuple(spec.op(*args))
    reference = as_tuple(spec.reference(*args))
    after = _run_in_place(spec, args)
    for out, index in enumerate(_written(spec)):
        got = after[index]
        # Bit for bit the op's results; within the op's tolerance of the float64 reference.
        assert torch.equal(got, want[out]) or (
            got.isnan().equal(want[out].isnan())
            and torch.equal(got.nan_to_num(), want[out].nan_to_num())
        ), f"{spec.in_place_name}: {spec.in_place.writes[out]} differs from {spec.name}'s output"
        assert_close_spec(spec, got, reference[out], spec.in_place_name, equal_nan=True)
    for i, (before, now) in enumerate(zip(args, after, strict=True)):
        if i not in _written(spec) and isinstance(before, torch.Tensor):
            assert torch.equal(before, now), f"{list(spec.arguments)[i]} was written"


@by_in_place
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_writes_what_the_op_returns(spec, device, layout):
    shapes = [(1, 64), (3, 5, 40), (7, 33), (0, 8)]
    for args in sample_args(spec, device, shapes, FLOAT_DTYPES, [layout]):
        _check_against_the_op(spec, args)


@by_in_place
@pytest.mark.parametrize("device", DEVICES)
def test_edge_samples(spec, device):
    for args in spec.edge_samples(device):
        _check_against_the_op(spec, args)


@by_in_place
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(spec, device):
    # The schema's mutations are the real ones, the fake agrees, and it traces under
    # torch.compile (functionalized).
    for args in sample_args(spec, device, [(4, 9), (2, 3, 8)], [torch.float32], ["contiguous"]):
        torch.library.opcheck(_in_place_op(spec), args)


def _names(blame: str, op: str) -> str:
    return rf"{re.escape(op)}: expected {re.escape(blame)} to\b"


def _bad_calls(spec, device) -> list[tuple[str, object, str]]:
    """(id, args, the argument named): the op's refusals, and the form's own."""
    names = list(spec.arguments)
    x_index = names.index(spec.primary_name)
    cases = []
    for i, (name, role) in enumerate(spec.arguments.items()):
        for what, wrong in values_of(role).bad_values():
            args = list(make_args(spec, (3, 8), torch.float32, device))
            args[i] = wrong(args[i], args[x_index])
            cases.append((f"{name}-{what}", args, name))
    for index, name in zip(_written(spec), spec.in_place.writes, strict=True):
        args = list(make_args(spec, (3, 8), torch.float32, device))
        args[index] = args[index][:1].expand(args[index].shape)
        cases.append((f"{name}-expanded", args, name))
    first, second = _written(spec)[:2]
    args = list(make_args(spec, (3, 8), torch.float32, device))
    args[second] = args[first]
    cases.append(("the-same-tensor-twice", args, spec.in_place.writes[1]))
    args = list(make_args(spec, (3, 8), torch.float32, device))
    weight = names.index("weight")
    args[weight] = args[first][0]
    cases.append(("weight-a-row-of-x", args, "weight"))
    return cases


@by_in_place
@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_is_refused_and_nothing_written(spec, device):
    for case_id, args, blame in _bad_calls(spec, device):
        before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        with torch.no_grad(), pytest.raises(RuntimeError, match=_names(blame, spec.in_place_name)):
            _in_place_op(spec)(*args)
        for a, b in zip(args, before, strict=True):
            if isinstance(a, torch.Tensor):
                assert torch.equal(
                    a,
                    b,
                ) or torch.equal(a.isnan(), b.isnan()), case_id


@by_in_place
def test_the_fake_refuses_the_ops_bad_input(spec):
    # On meta tensors the form runs its fake alone: the op's checks, in the form's words.
    names = list(spec.arguments)
    x_index = names.index(spec.primary_name)
    for i, (name, role) in enumerate(spec.arguments.items()):
        for _what, wrong in values_of(role).bad_values():
            args = list(make_args(spec, (3, 8), torch.float32, "cpu"))
            args[i] = wrong(args[i], args[x_index])
            meta = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
            with pytest.raises(RuntimeError, match=_names(name, spec.in_place_name)):
                _in_place_op(spec)(*meta)


@by_in_place
def test_a_call_that_needs_a_gradient_is_refused(spec):
    args = make_args(spec, (3, 8), torch.float32, "cpu", requires_grad=True)
    wrapper = getattr(my_ops, spec.in_place_name)
    with pytest.raises(RuntimeError, match=rf"{re.escape(spec.in_place_name)}: .*no gradient"):
        wrapper(*args)
    with torch.no_grad():
        assert wrapper(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args]) is None


@by_in_place
@pytest.mark.parametrize("device", DEVICES)
def test_compiled_and_exported_as_the_op(spec, device):
    # Functionalized by torch.compile and torch.export: a program that writes fresh
    # intermediates in place gives what the op gives.
    op = _in_place_op(spec)

    class Program(torch.nn.Module):
        def forward(self, *args):
            args = [a * 1 if isinstance(a, torch.Tensor) else a for a in args]
            op(*args)
            return tuple(args[i] for i in _written(spec))

    args = make_args(spec, (4, 16), torch.float32, device)
    with torch.no_grad():
        want = as_tuple(spec.op(*args))
        compiled = torch.compile(Program(), fullgraph=True, backend="inductor")(*args)
        exported = torch.export.export(Program(), tuple(args)).module()(*args)
    for got in (compiled, exported):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=2e-5, atol=1e-5)


def test_the_spec_field_names_written_arguments():
    for spec in WITH_IN_PLACE:
        assert isinstance(spec.in_place, _spec.InPlace)
        assert set(spec.in_place.writes) <= set(spec.arguments)
        schema = _in_place_op(spec)._schema
        mutated = {a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write}
        assert mutated == set(spec.in_place.writes)
        assert not schema.returns


if __name__ == "__main__":
    run_this_file(__file__)
