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

An op gets a shim when the op library defines the function for the export's
device; ops of other libraries keep the ProxyExecutor, and so do the custom
class's methods (``call_torchbind``), which custom_ops_to_c_shims does not
cover. ``--no-c-shims`` exports every op the old way.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from .errors import ExportError
from .manifest import TORCH_NAMESPACES

INDUCTOR_OPTION = "aot_inductor.custom_ops_to_c_shims"


def shim_name(op: Any, device: str) -> str:
    """The C function AOTInductor calls for OpOverload `op` (get_c_shim_func_name's rule)."""
    return f"aoti_torch_{device}_{op._opname}"


def declaration(op: Any, device: str) -> str:
    """The shim's C declaration, from the op's registered schema, as torchgen writes it."""
    from torchgen.gen_aoti_c_shim import gen_declaration_and_definition
    from torchgen.model import FunctionSchema

    schema = str(op._schema)
    parsed = FunctionSchema.parse(schema.split("::", 1)[1])
    decl, _ = gen_declaration_and_definition(parsed, device, "", {})
    return decl.removeprefix("AOTI_TORCH_EXPORT ").removesuffix(";")


def _library_defines(library: str, names: list[str]) -> set[str]:
    """The names in `names` that the loaded op library `library` (or what it links) defines."""
    try:
        handle = ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError as e:
        raise ExportError(f"op library {library} is not loaded: {e}") from e
    return {name for name in names if hasattr(handle, name)}


def c_shims(program: Any, device: str, library: str) -> dict[Any, list[str]]:
    """custom_ops_to_c_shims for `program`: each custom op whose shim `library` defines.

    Only default overloads: AOTInductor names a shim after the op alone.
    """
    import torch

    ops = {}
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            target = node.target
            if (
                node.op == "call_function"
                and isinstance(target, torch._ops.OpOverload)
                and target.namespace not in TORCH_NAMESPACES
                and target._overloadname == "default"
            ):
                ops[shim_name(target, device)] = target
    defined = _library_defines(library, sorted(ops))
    return {op: [declaration(op, device)] for name, op in sorted(ops.items()) if name in defined}
