"""The op registry: one module per op in this package, each with a ``SPEC``.

Modules are found by listing the package, so adding an op adds a file here and touches
nothing else in Python. :func:`register_all` registers every fake and autograd formula
once the library is loaded; :data:`SPECS` is what the tests and benchmarks iterate over.
Each wrapper is ``my_ops.<module name>``; its module, ``my_ops.ops.<module name>``, holds
the fake, the autograd formula and the float64 reference beside it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from ._spec import Autograd, InferenceOnly, InPlace, OpSpec


def _discover() -> dict[str, OpSpec]:
    specs: dict[str, OpSpec] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, OpSpec):
            raise ImportError(f"{module.__name__} defines no SPEC (a my_ops.ops._spec.OpSpec)")
        wrapper = spec.wrapper.__name__
        if wrapper != info.name:
            # One name per op: the module's name is the wrapper's, my_ops.<name>.
            raise ImportError(f"{module.__name__}: SPEC.wrapper is named {wrapper!r}")
        specs[spec.name] = spec
    return specs


SPECS: dict[str, OpSpec] = _discover()


def register_all(register_fake) -> None:
    """Register every op's fake (through ``register_fake``), its argument checks first (from
    the spec's roles), and its autograd formula.

    ``register_fake`` is ``torch.library.register_fake`` called from the ``my_ops``
    module itself: torch only accepts a fake from the module that the library's
    ``set_python_module`` names.
    """
    import torch

    for spec in SPECS.values():
        register_fake(spec.qualname, _with_schema_defaults(spec))
        if companion(spec) is not None:
            register_fake(spec.qualname + OUT_SUFFIX, _companion_fake(spec))
        if isinstance(spec.in_place, InPlace):
            register_fake(spec.qualname + "_", _in_place_fake(spec))
        if isinstance(spec.autograd, Autograd):
            torch.library.register_autograd(
                spec.qualname, spec.autograd.backward, setup_context=spec.autograd.setup_context
            )
        elif isinstance(spec.autograd, InferenceOnly):
            # torch runs setup_context only for a call that needs a gradient.
            torch.library.register_autograd(
                spec.qualname,
                _refuse_backward(spec),
                setup_context=_refuse_gradient(spec),
            )


def _refuse_gradient(spec: OpSpec):
    def setup_context(ctx, inputs, output) -> None:
        raise RuntimeError(spec.autograd.message(spec.name))

    return setup_context


def _refuse_backward(spec: OpSpec):
    def backward(ctx, *grads):
        raise RuntimeError(spec.autograd.message(spec.name))

    return backward


def _with_schema_defaults(spec: OpSpec):
    @functools.wraps(spec.fake)
    def fake(*args, **kwargs):
        return spec.checked_fake(*spec.bind(args, kwargs))

    return fake


# The name suffix of an op's out= companion, <op>_out(<the op's arguments>, *, Tensor(a!) out),
# which fills a caller's tensor with the op's result (ops/registration.cpp). Exporters lower
# calls of the op to it; it has no wrapper or autograd formula of its own.
OUT_SUFFIX = "_out"


def companion(spec: OpSpec):
    """The OpOverload of ``spec``'s out= companion, or None when the library has none."""
    import torch

    packet = getattr(torch.ops.my_ops, spec.name + OUT_SUFFIX, None)
    return None if packet is None else packet.default


def _in_place_fake(spec: OpSpec):
    def fake(*args, **kwargs) -> None:
        # The kernels' checks of the arguments, in the form's words; which memory the
        # written arguments share a fake cannot tell.
        spec.check_args(spec.bind(args, kwargs), op=spec.in_place_name)

    fake.__name__ = f"{spec.in_place_name}_fake"
    return fake


def _companion_fake(spec: OpSpec):
    def fake(*args, out, **kwargs):
        result = spec.checked_fake(*spec.bind(args, kwargs))
        got = (tuple(out.shape), out.dtype, out.device)
        want = (tuple(result.shape), result.dtype, result.device)
        if got != want:
            raise RuntimeError(
                f"{spec.name}{OUT_SUFFIX}: expected out to have (shape, dtype, device) {want}, "
                f"got {got}"
            )
        return out

    fake.__name__ = f"{spec.name}{OUT_SUFFIX}_fake"
    return fake
