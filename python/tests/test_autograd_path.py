"""Which calls of an op enter Python: only those that need a gradient.

The autograd formulas live in Python (my_ops/ops/<op>.py, registered with
torch.library.register_autograd). A call whose inputs need no gradient, or one
made under torch.no_grad(), must reach the kernel without running a Python
frame, as a call from an AOTInductor package does; a call that needs one runs
its formula. sys.setprofile sees every Python function call made meanwhile.
"""

from __future__ import annotations

import inspect
import sys

import pytest
import torch

from op_table import DIFFERENTIABLE, as_tuple, by_op, sample_args, tensor_args
from testing_utils import DEVICES, run_this_file


def _python_calls(fn) -> tuple[object, list[str]]:
    """fn()'s result and every Python function it called, as file:function."""
    calls: list[str] = []

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code is not fn.__code__:
            calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, calls


def _kernel_entry(spec):
    """The op's C++ entry point: OpOverload.__call__ is a Python frame of the caller's own."""
    return spec.op._op


def _args(spec, device, requires_grad=False) -> tuple:
    shapes, dtypes, layouts = [(4, 9)], [torch.float32], ["contiguous"]
    return next(sample_args(spec, device, shapes, dtypes, layouts, requires_grad=requires_grad))


@by_op()
@pytest.mark.parametrize("device", DEVICES)
def test_a_call_needing_no_gradient_runs_no_python(spec, device):
    args, op = _args(spec, device), _kernel_entry(spec)
    op(*args)  # the first call may still set things up
    out, calls = _python_calls(lambda: op(*args))
    assert calls == [], calls
    assert not any(t.requires_grad for t in as_tuple(out))


@by_op(DIFFERENTIABLE)
@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_mode_runs_no_python(spec, device):
    args, op = _args(spec, device, requires_grad=True), _kernel_entry(spec)
    with torch.no_grad():
        op(*args)
        out, calls = _python_calls(lambda: op(*args))
    assert calls == [], calls
    assert not any(t.requires_grad for t in as_tuple(out))


@by_op(DIFFERENTIABLE)
@pytest.mark.parametrize("device", DEVICES)
def test_a_call_needing_a_gradient_runs_its_formula(spec, device):
    args, op = _args(spec, device, requires_grad=True), _kernel_entry(spec)
    inputs = tensor_args(args)

    def forward_and_backward():
        outs = [t for t in as_tuple(op(*args)) if t.requires_grad]
        return torch.autograd.grad([o.sum() for o in outs], inputs, allow_unused=True)

    grads, calls = _python_calls(forward_and_backward)
    # The formula's own file: its backward (and setup_context) ran.
    formula_file = inspect.getsourcefile(spec.autograd.backward)
    assert any(c.startswith(formula_file + ":") for c in calls), calls
    assert any(g is not None for g in grads)


if __name__ == "__main__":
    run_this_file(__file__)
