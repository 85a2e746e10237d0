"""Which custom ops a package calls as C functions (C shims) instead of through the ProxyExecutor.

By default AOTInductor's generated wrapper calls a custom op through
``aoti_torch_proxy_executor_call_function``: the call is described in the
package's JSON, rebuilt as an IValue stack and sent through the dispatcher,
where every Python formula registered at the Autograd key runs too. An op
given in ``aot_inductor.custom_ops_to_c_shims`` is called as
``aoti_torch_<device>_<op>(...)`` instead, a function the model's .so leaves
undefined and the op library defines (tools/torch/c_shims.py generates them
for every schema of the library); the loader and ``my_ops`` load the library
with RTLD_GLOBAL so the model finds them. The declarations come from the
registered schema through torchgen's ``gen_aoti_c_shim``, the generator the
library's definitions come from.

An op with an out= companion, ``<op>_out`` (ops/registration.cpp), is lowered
to it: the package allocates the output itself, with Inductor's buffer reuse,
and calls ``aoti_torch_<device>_<op>_out(out, ...)``. Inductor does that for an
op whose out variant is registered with it (``torch._library._out_variant``),
which :func:`lowering` does for the length of the compile only.

An op gets a shim when the op library defines the function for the export's
device, and its companion when the companion has a kernel for that device and a
shim; ops of other libraries keep the ProxyExecutor, and so do the custom
class's methods (``call_torchbind``), which custom_ops_to_c_shims does not
cover. ``--no-c-shims`` exports every op the old way.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from .errors import ExportError
from .program_calls import custom_ops

INDUCTOR_OPTION = "aot_inductor.custom_ops_to_c_shims"
# The name suffix of an op's out= companion (ops/registration.cpp).
OUT_SUFFIX = "_out"
_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


def shim_name(op: Any, device: str) -> str:
    """The C function AOTInductor calls for OpOverload `op` (get_c_shim_func_name's rule)."""
    return f"aoti_torch_{device}_{op._opname}"


def declaration(op: Any, device: str) -> str:
    """The shim's C declaration, from the op's registered schema, as torchgen writes it.

    A companion ``<op>_out`` is read as torchgen's ``<op>.out`` overload, and an in-place
    form ``<op>_(...) -> ()`` as ``<op>.in_place``, renamed back to the shim AOTInductor calls,
    as the op library's generator reads them (torchgen reserves both suffixes for ATen's
    conventions).
    """
    from torchgen import local
    from torchgen.gen_aoti_c_shim import gen_declaration_and_definition
    from torchgen.model import FunctionSchema

    name, paren, rest = str(op._schema).split("::", 1)[1].partition("(")
    in_place = name.endswith("_") and not op._schema.returns
    if is_companion(op):
        name = name.removesuffix(OUT_SUFFIX) + ".out"
    elif in_place:
        name = f"{name.removesuffix('_')}.in_place"
    with local.parametrize(
        use_const_ref_for_mutable_tensors=False, use_ilistref_for_tensor_lists=False
    ):
        decl, _ = gen_declaration_and_definition(
            FunctionSchema.parse(name + paren + rest), device, "", {}
        )
    if in_place:
        decl = decl.replace(f"{shim_name(op, device)}in_place(", f"{shim_name(op, device)}(")
    decl = decl.removeprefix("AOTI_TORCH_EXPORT ").removesuffix(";")
    if not op._schema.returns:
        # AOTInductor's call of an op that returns nothing still passes one (null) result
        # handle, which torchgen's declaration leaves out (tools/torch/c_shims.py).
        decl = f"{decl.removesuffix(')')}, AtenTensorHandle* ret0)"
    return decl


def is_companion(op: Any) -> bool:
    """Whether OpOverload `op` is an out= companion: <op>_out with one mutable argument."""
    mutable = [
        a for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write
    ]
    return op._opname.endswith(OUT_SUFFIX) and len(mutable) == 1


def _companion(op: Any, device: str) -> Any | None:
    """The out= companion of a functional OpOverload `op` with a kernel for `device`, or None."""
    import torch

    returns = op._schema.returns
    if len(returns) != 1 or str(returns[0].type) != "Tensor":
        return None
    packet = getattr(getattr(torch.ops, op.namespace), op._opname + OUT_SUFFIX, None)
    if packet is None or "default" not in packet.overloads():
        return None
    companion = packet.default
    key = _DISPATCH_KEYS.get(device)
    if key is None or not is_companion(companion):
        return None
    if not torch._C._dispatch_has_kernel_for_dispatch_key(companion.name(), key):
        return None
    return companion


def _library_defines(library: str, names: list[str]) -> set[str]:
    """The names in `names` that the loaded op library `library` (or what it links) defines."""
    try:
        handle = ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError as e:
        raise ExportError(f"op library {library} is not loaded: {e}") from e
    return {name for name in names if hasattr(handle, name)}


@dataclasses.dataclass(frozen=True)
class ShimPlan:
    """How a package calls the program's custom ops.

    options: aot_inductor.custom_ops_to_c_shims, each op the package calls as a shim -> its
    declaration. out_variants: each op of the program -> the companion it is lowered to.
    calls: each op of the program called as a shim -> (the op the package calls, its shim).
    """

    options: dict[Any, list[str]] = dataclasses.field(default_factory=dict)
    out_variants: dict[Any, Any] = dataclasses.field(default_factory=dict)
    calls: dict[Any, tuple[Any, str]] = dataclasses.field(default_factory=dict)


def plan(program: Any, device: str, library: str) -> ShimPlan:
    """The C shims of `program`'s custom ops that `library` defines for `device`.

    Only default overloads: AOTInductor names a shim after the op alone.
    """
    candidates = {}
    for op in custom_ops(program):
        if op._overloadname != "default":
            continue
        companion = _companion(op, device)
        candidates[op] = [c for c in (companion, op) if c is not None]
    names = sorted({shim_name(c, device) for cs in candidates.values() for c in cs})
    defined = _library_defines(library, names)
    result = ShimPlan()
    for op, choices in sorted(candidates.items(), key=lambda item: item[0].name()):
        called = next((c for c in choices if shim_name(c, device) in defined), None)
        if called is None:
            continue
        result.options[called] = [declaration(called, device)]
        result.calls[op] = (called, shim_name(called, device))
        if called is not op:
            result.out_variants[op] = called
    return result


@contextlib.contextmanager
def lowering(shims: ShimPlan) -> Iterator[None]:
    """Inductor lowers each op of `shims.out_variants` to its companion inside this block."""
    if not shims.out_variants:
        yield
        return
    try:
        from torch._library import _out_variant
    except ImportError as e:  # A torch without out-variant lowering: not the pinned one.
        raise ExportError(f"this torch cannot lower ops to their out= companions: {e}") from e
    registry = _out_variant._manual_out_variant_registry
    saved = dict(registry)
    for op, companion in shims.out_variants.items():
        _out_variant.register_out_variant(op, companion)
    try:
        yield
    finally:
        registry.clear()
        registry.update(saved)
