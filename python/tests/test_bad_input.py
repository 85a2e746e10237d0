"""Bad inputs raise a RuntimeError naming the argument, and the process keeps working.

Each op's cases come from its argument roles' ``bad_values`` (a primary that is 0-d or
integer, a vector of the wrong length, a negative float, a misspelt choice, ...: explicit
values, never derived from the checks) plus the spec's own ``bad_cases``; the custom class
has its cases here.
"""

from __future__ import annotations

import re

import pytest
import torch

import my_ops
from my_ops.ops._spec import BadCase
from op_table import SPECS, assert_matches_reference, make_args
from role_values import values_of
from testing_utils import DEVICES, HAS_COMPANION, run_this_file

N = 8


def _replace(args: tuple, i: int, value) -> tuple:
    return (*args[:i], value, *args[i + 1 :])


def _role_cases(spec, device: str) -> list[BadCase]:
    """What each argument's role forbids, one wrong argument per case."""

    def valid(dev=device):
        return make_args(spec, (3, N), torch.float32, dev)

    x_index = list(spec.arguments).index(spec.primary_name)
    cases: list[BadCase] = []
    for i, (name, role) in enumerate(spec.arguments.items()):
        for what, wrong in values_of(role).bad_values():

            def make(d, i=i, wrong=wrong):
                args = valid(d)
                return _replace(args, i, wrong(args[i], args[x_index]))

            cases.append(BadCase(f"{name}-{what}", make, name))
    return cases


def _device_mix_cases(spec, device: str) -> list[BadCase]:
    """Tensor arguments split between ``device`` and the cpu, in both orders.

    Only a run on a non-cpu device has a second device to mix with, so a cpu run has no
    such cases rather than cases skipped on machines without a GPU.
    """
    if device == "cpu":
        return []
    cases = []
    for i, (name, role) in enumerate(spec.arguments.items()):
        if role.is_tensor and name != spec.primary_name:
            for first, other in ((device, "cpu"), ("cpu", device)):
                cases.append(
                    BadCase(
                        f"{name}-on-{other}",
                        lambda d, i=i, f=first, o=other: _replace(
                            make_args(spec, (3, N), torch.float32, f),
                            i,
                            make_args(spec, (3, N), torch.float32, o)[i],
                        ),
                        name,
                    )
                )
    return cases


def _class_cases(device: str) -> list[tuple]:
    """The custom class: its constructor checks weight and eps, its methods the rest."""

    def x(shape=(3, N)):
        return torch.randn(shape).to(device)

    def v(n=N, dev=device):
        return torch.randn(n).to(dev)

    def obj(weight=None, eps=1e-6):
        return torch.classes.my_ops.RMSNorm(v() if weight is None else weight, eps)

    cases = [
        ("neg-eps", lambda: obj(eps=-1.0), "eps"),
        ("2d-weight", lambda: obj(x()), "weight"),
        ("int-weight", lambda: obj(v().int()), "weight"),
        ("forward-len", lambda: obj().forward(x((2, 3))), "weight"),
        ("forward-0d", lambda: obj().forward(x()[0, 0]), "x"),
        ("forward-residual", lambda: obj().forward_residual(x(), x()[:1]), "residual"),
        ("module-neg-eps", lambda: my_ops.RMSNorm(N, eps=-0.5), "eps"),
    ]
    if device != "cpu":
        cases.append(("device", lambda: obj(v(dev="cpu")).forward(x()), "weight"))
    return [(f"RMSNorm-{id}", call, blame) for id, call, blame in cases]


def _cases(device: str) -> dict[str, tuple]:
    """{id: (call, blame)} over every op and the class."""
    cases = {}
    for spec in SPECS:
        for case in (
            _role_cases(spec, device) + spec.bad_cases(device) + _device_mix_cases(spec, device)
        ):
            cases[f"{spec.name}-{case.id}"] = (
                lambda spec=spec, case=case: spec.wrapper(*case.make_args(device)),
                case.blame,
            )
    for case_id, call, blame in _class_cases(device) if HAS_COMPANION else []:
        cases[case_id] = (call, blame)
    return cases


_CASES = [(device, case_id) for device in DEVICES for case_id in _cases(device)]


def _valid_calls_still_work(device):
    for spec in SPECS:
        args = make_args(spec, (3, N), torch.float32, device)
        assert_matches_reference(spec, args, spec.wrapper(*args))
    if not HAS_COMPANION:
        return
    w, x = torch.randn(N).to(device), torch.randn(3, N).to(device)
    torch.testing.assert_close(
        torch.classes.my_ops.RMSNorm(w, 1e-6).forward(x),
        my_ops.nn.reference(x, w, 1e-6),
        rtol=2e-5,
        atol=1e-5,
    )


def _names(blame: str) -> str:
    # Each check's message reads "<op>: expected <argument> to ...". A bare word match
    # would also take a message about another argument that mentions this one ("expected
    # bias to have the same dtype as x"), so a missing check of x would go unnoticed.
    return rf"expected {re.escape(blame)} to\b"


@pytest.mark.parametrize(("device", "case_id"), _CASES)
def test_bad_input_raises_naming_argument(device, case_id):
    call, blame = _cases(device)[case_id]
    with pytest.raises(RuntimeError, match=_names(blame)):
        call()
    _valid_calls_still_work(device)


@pytest.mark.parametrize("device", DEVICES)
def test_many_errors_then_valid(device):
    # Errors must not leak state (e.g. a poisoned CUDA context or a held lock).
    cases = _cases(device)
    for _ in range(20):
        for call, _blame in cases.values():
            with pytest.raises(RuntimeError):
                call()
    _valid_calls_still_work(device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _none_for_a_tensor(spec, args) -> bool:
    """Whether None stands for a Tensor argument that is not optional (``Tensor?``)."""
    schema = spec.op._schema.arguments
    return any(
        a is None and not isinstance(arg.type, torch.OptionalType)
        for a, arg in zip(args, schema, strict=False)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_errors_under_torch_compile(spec, device):
    # The fakes refuse the same calls at trace time, naming the same argument.
    torch._dynamo.reset()
    compiled = torch.compile(spec.wrapper, fullgraph=True, backend="aot_eager")
    for case in _role_cases(spec, device) + spec.bad_cases(device):
        args = case.make_args(device)
        if _none_for_a_tensor(spec, args):
            continue  # Dynamo cannot trace a None tensor into the op: not the fake's check
        with pytest.raises(Exception, match=_names(case.blame)):
            compiled(*args)
    args = make_args(spec, (3, N), torch.float32, device)
    assert_matches_reference(spec, args, compiled(*args))


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_fake_refuses_the_same_calls(spec):
    # On meta tensors the op runs its fake alone. Under torch.compile a fake that lets a
    # bad call through still ends in the kernel's error at run time, so only this catches
    # a check missing from the fake (which torch.export would then not refuse).
    for case in _role_cases(spec, "cpu") + spec.bad_cases("cpu"):
        if case.values_only:
            continue  # the fake sees no values: the kernels' refusal is tested above
        args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in case.make_args("cpu")]
        with pytest.raises(RuntimeError, match=_names(case.blame)):
            spec.op(*args)


def test_rotary_embedding_names_interleaved_given_in_the_place_of_positions():
    # interleaved was the fourth argument before positions took that place.
    x, cos, sin = torch.randn(1, 4, 2, 8), torch.randn(4, 4), torch.randn(4, 4)
    with pytest.raises(TypeError, match=r"fourth argument is positions.*interleaved=True"):
        my_ops.rotary_embedding(x, cos, sin, True)
    assert torch.equal(
        my_ops.rotary_embedding(x, cos, sin, interleaved=True),
        torch.ops.my_ops.rotary_embedding(x, cos, sin, None, True),
    )


if __name__ == "__main__":
    run_this_file(__file__)
