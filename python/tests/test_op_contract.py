"""The op contract of every op: opcheck, gradients, torch.compile and torch.export."""

from __future__ import annotations

import gc
import warnings
import weakref

import pytest
import torch

from my_ops.ops import companion
from op_table import (
    DIFFERENTIABLE,
    INFERENCE_ONLY,
    as_tuple,
    assert_close_spec,
    assert_matches_reference,
    by_op,
    describe,
    make_args,
    output_grads,
    sample_args,
    scalar_variants,
    tensor_args,
)
from testing_utils import DEVICES, LAYOUTS, run_this_file


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _opcheck(spec, args) -> None:
    result = torch.library.opcheck(spec.op, args)
    failures = {k: v for k, v in result.items() if v != "SUCCESS"}
    assert not failures, f"{spec.name}({describe(args)}): {failures}"


@by_op()
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(spec, device):
    for dtype, layout in (
        (torch.float32, "contiguous"),
        (torch.float32, "transposed"),
        (torch.float64, "sliced"),
        (torch.bfloat16, "contiguous"),
    ):
        for args in sample_args(spec, device, [(4, 9)], [dtype], [layout]):
            _opcheck(spec, args)
    # Empty and 3-D inputs.
    for args in sample_args(spec, device, [(0, 5), (2, 3, 5)], [torch.float32], ["sliced"]):
        _opcheck(spec, args)


@by_op(INFERENCE_ONLY)
@pytest.mark.parametrize("device", DEVICES)
def test_an_inference_op_refuses_a_call_that_needs_a_gradient(spec, device):
    # One error naming the op, whichever floating input requires grad; the same call without
    # grad mode runs.
    args = make_args(spec, (3, 64), torch.float32, device)
    floating = [
        i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()
    ]
    assert floating, f"{spec.name}: no floating input to require grad"
    for i in floating:
        wants_grad = tuple(a.detach().requires_grad_() if j == i else a for j, a in enumerate(args))
        with pytest.raises(RuntimeError, match=rf"^{spec.name}: an inference op"):
            spec.wrapper(*wants_grad)
        with torch.no_grad():
            assert_matches_reference(spec, args, spec.wrapper(*wants_grad))


@by_op(DIFFERENTIABLE)
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_requires_grad(spec, device):
    # Every tensor requires grad, as training code passes them.
    for dtype, layout in (
        (torch.float32, "contiguous"),
        (torch.float32, "transposed"),
        (torch.float64, "sliced"),
        (torch.float64, "rows"),
    ):
        for args in sample_args(spec, device, [(4, 9)], [dtype], [layout], requires_grad=True):
            _opcheck(spec, args)
    for args in sample_args(
        spec, device, [(2, 3, 5)], [torch.float32], ["contiguous"], requires_grad=True
    ):
        _opcheck(spec, args)


def _autograd_fallback_warnings(caught) -> list[str]:
    # torch's fallback for an op without an autograd kernel warns and may be wrong.
    messages = [str(w.message) for w in caught]
    return [m for m in messages if "autograd kernel was not registered" in m]


def _differentiable(arg) -> bool:
    return isinstance(arg, torch.Tensor) and arg.is_floating_point()


def _differentiable_function(spec, args):
    """(f, tensors): f(*tensors) calls the op with the floating tensors given, the other
    arguments (integer tensors, such as rotary positions, included) fixed."""
    positions = [i for i, a in enumerate(args) if _differentiable(a)]

    def f(*tensors):
        full = list(args)
        for i, t in zip(positions, tensors, strict=True):
            full[i] = t
        return spec.wrapper(*full)

    return f, [args[i] for i in positions]


@by_op(DIFFERENTIABLE)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck(spec, device, layout):
    for args in sample_args(spec, device, [(3, 4)], [torch.float64], [layout], requires_grad=True):
        f, tensors = _differentiable_function(spec, args)
        n_outputs = len(as_tuple(f(*tensors)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert torch.autograd.gradcheck(f, tensors)
            assert torch.autograd.gradgradcheck(f, tensors)
            # Each output alone, so that a backward given None for the others is checked.
            for k in range(n_outputs) if n_outputs > 1 else ():
                assert torch.autograd.gradcheck(lambda *t, k=k, f=f: f(*t)[k], tensors)
        assert not _autograd_fallback_warnings(caught)
    # A 3-D input: gradients of per-feature vectors sum over all leading dims.
    for args in sample_args(
        spec, device, [(2, 3, 4)], [torch.float64], [layout], requires_grad=True
    ):
        f, tensors = _differentiable_function(spec, args)
        assert torch.autograd.gradcheck(f, tensors)


def _grads_against_reference(spec, args, generator=None):
    """(op's gradients, the float64 reference's gradients in the input dtype)."""
    f, tensors = _differentiable_function(spec, args)
    out = as_tuple(f(*tensors))
    grads_out = output_grads(out, generator)
    got = torch.autograd.grad(out, tensors, grads_out)
    leaves = [t.detach().double().requires_grad_() for t in tensors]
    ref_tensors = list(leaves)
    ref_args = list(args)
    for i, a in enumerate(args):
        if _differentiable(a):
            ref_args[i] = leaves.pop(0)
    ref_out = as_tuple(spec.reference(*ref_args))
    want = torch.autograd.grad(ref_out, ref_tensors, tuple(g.double() for g in grads_out))
    return got, [w.to(t.dtype) for w, t in zip(want, tensors, strict=True)]


@by_op(DIFFERENTIABLE)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_backward_matches_reference(spec, device, dtype):
    # Low-precision gradients against autograd through the float64 reference.
    g = torch.Generator().manual_seed(0)
    for args in sample_args(spec, device, [(5, 33)], [dtype], ["transposed"], requires_grad=True):
        got, want = _grads_against_reference(spec, args, g)
        for a, e in zip(got, want, strict=True):
            assert a.dtype == e.dtype and a.shape == e.shape
            assert_close_spec(spec, a, e, f"{spec.name} grad ({describe(args)})")


@by_op(DIFFERENTIABLE)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (7,), (2, 3, 5)], ids=str)
def test_backward_edge_shapes(spec, device, shape):
    # Empty, zero-width, 1-D and 3-D inputs: gradients have the input shapes and match
    # autograd through the reference.
    for args in sample_args(
        spec, device, [shape], [torch.float64], ["contiguous"], requires_grad=True
    ):
        got, want = _grads_against_reference(spec, args)
        for a, e in zip(got, want, strict=True):
            assert_close_spec(spec, a, e, f"{spec.name} grad ({describe(args)})")


@by_op()
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph(spec, device, backend):
    torch._dynamo.reset()
    compiled = torch.compile(spec.wrapper, fullgraph=True, backend=backend)
    for args in sample_args(spec, device, [(6, 40)], [torch.float32], ["contiguous"]):
        assert_matches_reference(spec, args, compiled(*args), backend)
        explanation = torch._dynamo.explain(spec.wrapper)(*args)
        assert explanation.graph_break_count == 0
        assert explanation.graph_count == 1


@by_op(DIFFERENTIABLE)
@pytest.mark.parametrize("device", DEVICES)
def test_compile_backward(spec, device):
    torch._dynamo.reset()
    args = make_args(spec, (4, 16), torch.float32, device, requires_grad=True)
    f, tensors = _differentiable_function(spec, args)

    def loss(*tensors):
        return sum((o * o).sum() for o in as_tuple(f(*tensors)))

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(*tensors), tensors)
    want = torch.autograd.grad(loss(*tensors), tensors)
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e)


@by_op()
@pytest.mark.parametrize("device", DEVICES)
def test_compile_dynamic_shapes(spec, device):
    torch._dynamo.reset()
    compiled = torch.compile(spec.wrapper, fullgraph=True, dynamic=True, backend="eager")
    scalars = scalar_variants(spec)[0]
    for shape in ((2, 8), (5, 8), (3, 12)):
        args = make_args(spec, shape, torch.float32, device, scalars=scalars)
        assert_matches_reference(spec, args, compiled(*args))


@by_op()
def test_export(spec):
    class Model(torch.nn.Module):
        def forward(self, *tensors):
            return f(*tensors)

    for args in sample_args(spec, "cpu", [(3, 8)], [torch.float64], ["contiguous"]):
        f, tensors = _differentiable_function(spec, args)
        ep = torch.export.export(Model(), tuple(tensors), strict=False)
        targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
        assert spec.op in targets, targets
        assert_matches_reference(spec, args, ep.module()(*tensors))


@by_op()
@pytest.mark.parametrize("device", DEVICES)
def test_a_call_keeps_no_reference_to_its_tensors(spec, device):
    # The kernels' boxed entries own a handle per tensor argument, made for the call, and hand
    # their results over by handle: one kept (not deleted, or handed over twice) keeps that tensor
    # alive after the caller drops it, which a weak reference shows.
    calls = [(spec.op, {})]
    if device == "cpu" and companion(spec) is not None:
        calls.append((companion(spec), {"out": None}))
    for op, kwargs in calls:
        args = make_args(spec, (4, 64), torch.float32, device)
        if "out" in kwargs:
            with torch.no_grad():
                kwargs = {"out": torch.empty_like(as_tuple(spec.op(*args))[0])}
        with torch.no_grad():
            result = op(*args, **kwargs)
        tensors = tensor_args(args) + list(as_tuple(result)) + list(kwargs.values())
        refs = [weakref.ref(t) for t in tensors]
        del args, result, tensors, kwargs
        gc.collect()
        alive = [i for i, r in enumerate(refs) if r() is not None]
        assert not alive, f"{op}: tensors {alive} (arguments, then results) are still referenced"


if __name__ == "__main__":
    run_this_file(__file__)
