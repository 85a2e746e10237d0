"""What an exported program calls that an op library must register: its custom ops, with
their schemas, and its custom classes (TorchBind), with the methods the graph calls."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from .errors import ExportError

TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "higher_order"})
# How torch names a custom class registered by TORCH_LIBRARY(ns) class_<T>("Class").
CUSTOM_CLASS_PREFIX = "__torch__.torch.classes."


@dataclasses.dataclass(frozen=True)
class PackageCalls:
    """What a package calls that op libraries register, as manifest.json's "ops" and "classes".

    ops: (name, schema) per op, name as "ns::op" or "ns::op.overload" (OpOverload.name()).
    classes: (name, ((method, schema), ...)) per custom class, name as "ns::Class".
    Each sorted by name, so the same program always gives the same manifest.
    c_shims: (op name, C function) for each op the package calls as a C shim
    (c_shims.py) rather than through the ProxyExecutor; the op's entry in "ops"
    names the function ("c_shim"), which the loader finds in the op libraries
    before it loads the package.
    """

    ops: tuple[tuple[str, str], ...]
    classes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    c_shims: tuple[tuple[str, str], ...] = ()

    def manifest_fields(self) -> dict[str, Any]:
        shims = dict(self.c_shims)
        return {
            "ops": [
                {"name": name, "schema": schema}
                | ({"c_shim": shims[name]} if name in shims else {})
                for name, schema in self.ops
            ],
            "classes": [
                {"name": name, "methods": [{"name": m, "schema": s} for m, s in methods]}
                for name, methods in self.classes
            ],
        }


def _custom_class_name(qualified: str) -> str:
    """The manifest's name of a custom class: ns::Class for __torch__.torch.classes.ns.Class."""
    parts = qualified.removeprefix(CUSTOM_CLASS_PREFIX).split(".")
    if not qualified.startswith(CUSTOM_CLASS_PREFIX) or len(parts) != 2:
        raise ExportError(
            f"the program holds an object of class {qualified}, which is not a custom class "
            "registered by an op library (torch.classes.NAMESPACE.CLASS)"
        )
    return f"{parts[0]}::{parts[1]}"


def _call_nodes(program: Any) -> Iterator[Any]:
    """Every call_function node of an ExportedProgram, its subgraphs' included."""
    import torch

    for module in program.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            yield from (node for node in module.graph.nodes if node.op == "call_function")


def custom_ops(program: Any) -> list[Any]:
    """The OpOverloads of op libraries (not torch's own) that an ExportedProgram calls."""
    import torch

    ops = {}
    for node in _call_nodes(program):
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target.namespace not in TORCH_NAMESPACES:
            ops[target.name()] = target
    return [ops[name] for name in sorted(ops)]


def package_calls(program: Any, c_shims: dict[Any, tuple[Any, str]] | None = None) -> PackageCalls:
    """The custom ops and classes an ExportedProgram's package calls, its subgraphs' included.

    Classes are those of the script objects the program holds (its constants);
    a method's schema comes from such an object, as the loader reads it from
    the class the op library registers. c_shims maps each OpOverload of the program
    that the package calls as a C shim to (the op it calls, the shim's name): the op
    itself, or its out= companion, which then stands in the manifest in its place.
    """
    import torch

    objects: dict[str, Any] = {}
    for value in program.constants.values():
        # A fake object stands for a real one, which it keeps.
        value = getattr(value, "real_obj", value)
        if isinstance(value, torch.ScriptObject):
            objects.setdefault(value._type().qualified_name(), value)
    c_shims = c_shims or {}
    program_ops = custom_ops(program)
    unknown = sorted(op.name() for op in c_shims if op not in program_ops)
    if unknown:
        raise ExportError(f"C shims given for ops the program does not call: {', '.join(unknown)}")
    ops: dict[str, str] = {}
    shims: dict[str, str] = {}
    for op in program_ops:
        target, shim = c_shims.get(op, (op, None))
        ops[target.name()] = str(target._schema)
        if shim is not None:
            shims[target.name()] = shim
    called: dict[str, set[str]] = {qualified: set() for qualified in objects}
    for node in _call_nodes(program):
        if node.target is torch.ops.higher_order.call_torchbind:
            obj, method = node.args[0], node.args[1]
            val = obj.meta.get("val") if isinstance(obj, torch.fx.Node) else None
            # CustomObjArgument in an exported graph, FakeScriptObject while tracing.
            qualified = getattr(val, "class_fqn", None) or getattr(val, "script_class_name", None)
            if qualified not in objects:
                raise ExportError(
                    f"the program calls {method} on an object of class {qualified}, "
                    "which it does not hold"
                )
            called[qualified].add(method)
    classes = []
    for qualified, methods in called.items():
        schemas = tuple((m, str(objects[qualified]._get_method(m).schema)) for m in sorted(methods))
        classes.append((_custom_class_name(qualified), schemas))
    return PackageCalls(
        ops=tuple(sorted(ops.items())),
        classes=tuple(sorted(classes)),
        c_shims=tuple(sorted(shims.items())),
    )
