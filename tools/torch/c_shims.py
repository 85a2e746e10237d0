"""An op library's kernel registrations and AOTInductor C shims, from the schemas in its
registration file, on LibTorch's stable ABI.

A package exported with C shims calls each custom op as a plain C function,
``AOTITorchError aoti_torch_<device>_<op>(AtenTensorHandle x, ..., AtenTensorHandle* ret0)``,
instead of describing the call in JSON for the ProxyExecutor to rebuild as an IValue stack
and dispatch. The C signatures are torchgen's (``gen_aoti_c_shim``, the generator of torch's
own shims for ATen ops, which the exporter's declarations in ``deploy/exporter/c_shims.py``
also come from): the generator writes its own and refuses a schema where the two differ, so
the C types follow AOTInductor's conventions (bool as int32_t, str as const char*, outputs as
pointers) by construction; adding an op to the registration adds its shims.

usage: c_shims.py REGISTRATION_CPP OUTPUT_CPP

REGISTRATION_CPP holds the op namespace (``constexpr char kNamespace[] = "<namespace>";``) and
the ``kOpSchemas`` array, one string literal per line, which it defines. The library defines
each op's kernel per device as ``<namespace>::<device>::<op>`` on ``TensorRef``
(tools/torch/stable_tensor.h): a new tensor (``OwnedTensor``) or a tuple of them as the result,
nothing for an out= companion, which fills its ``out``; out= companions have CPU kernels only.
The generated file declares those kernels (a mismatch is an undefined symbol when the library
links), registers each at its device's key through a boxed entry that passes the argument and
result handles on as torch hands them over (tools/torch/c_shim_call.h), and
defines the C shims, which call the kernel as a plain C++ function, as torch's own shims call
``at::cpu::<op>``. The CUDA part is compiled only where the library has its CUDA kernels
(``TORCH_OP_LIBRARY_CUDA``).
"""

from __future__ import annotations

import ast
import re
import sys

from torchgen import local
from torchgen.gen_aoti_c_shim import gen_declaration_and_definition
from torchgen.model import FunctionSchema

DEVICES = {"cpu": "CPU", "cuda": "CUDA"}
# The guard that the generated CUDA part sits behind.
CUDA_GUARD = "TORCH_OP_LIBRARY_CUDA"

_NAMESPACE = re.compile(r'^constexpr char kNamespace\[\] = "(\w+)";', re.MULTILINE)
_SCHEMAS = re.compile(r"kOpSchemas\[\]\s*=\s*\{(.*?)\};", re.DOTALL)
_LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"')


class ShimError(Exception):
    """The registration file cannot be read as this generator expects."""


def read_registration(text: str) -> tuple[str, list[str]]:
    """The namespace and the schemas (as registered, without the namespace) of a registration."""
    namespaces = _NAMESPACE.findall(text)
    if len(namespaces) != 1:
        raise ShimError(
            'expected one constexpr char kNamespace[] = "<namespace>"; line, '
            f"found {len(namespaces)}"
        )
    block = _SCHEMAS.search(text)
    if block is None:
        raise ShimError("no kOpSchemas[] = { ... }; array")
    body = _LITERAL.sub("", block.group(1))
    # Anything left but commas, whitespace and comments is not a list of plain literals.
    leftover = re.sub(r"//[^\n]*|\s|,", "", body)
    if leftover:
        raise ShimError(f"kOpSchemas holds something other than string literals: {leftover[:60]!r}")
    schemas = [ast.literal_eval(literal) for literal in _LITERAL.findall(block.group(1))]
    if not schemas:
        raise ShimError("kOpSchemas is empty")
    return namespaces[0], schemas


OUT_SUFFIX = "_out"
# torchgen's overload name for an in-place form <op>_ (see parse_schema).
IN_PLACE_OVERLOAD = "in_place"
# The last parameter of the shim of an op that returns nothing: AOTInductor's call passes one
# result handle even then (nullptr, for the None it records as the op's output), which
# torchgen's declaration of such an op leaves out.
NO_RESULT_PARAMETER = "AtenTensorHandle* ret0"


def parse_schema(schema: str) -> FunctionSchema:
    """torchgen's FunctionSchema of a custom op schema, with or without its namespace.

    An out= companion, ``<op>_out(..., *, Tensor(a!) out) -> Tensor(a!)`` (ops/registration.cpp
    says why it is an op of its own), is read as torchgen's ``<op>.out`` overload: torchgen
    reserves the ``_out`` suffix for that, and names the overload's shim
    aoti_torch_<device>_<op>_out, the name AOTInductor calls for the op ``<op>_out``.

    An in-place form, ``<op>_(Tensor(a!) x, ...) -> ()``, is read as the overload
    ``<op>.in_place``: torchgen takes a trailing underscore for ATen's in-place convention
    (a ``self`` argument, returned), which an op that returns nothing cannot follow, and
    torch.export can only functionalize a mutating custom op that returns nothing.
    :func:`declaration` gives its shim the name AOTInductor calls, aoti_torch_<device>_<op>_.
    """
    name, paren, rest = schema.partition("(")
    name = name.rsplit("::", 1)[-1]
    if "." in name:
        # AOTInductor names a shim after the op alone (get_c_shim_func_name): two overloads of
        # one op would share it.
        raise ShimError(f"{schema}: C shims serve default overloads only")
    companion = name.endswith(OUT_SUFFIX) and "Tensor(a!)" in rest
    if companion:
        name = name.removesuffix(OUT_SUFFIX) + ".out"
    elif name.endswith("_") and rest.rstrip().endswith("-> ()"):
        name = f"{name.removesuffix('_')}.{IN_PLACE_OVERLOAD}"
    try:
        parsed = FunctionSchema.parse(name + paren + rest)
    except AssertionError as e:
        raise ShimError(f"{schema}: {e}") from e
    if companion and len(parsed.arguments.out) != 1:
        raise ShimError(f"{schema}: an out= companion takes exactly one out argument")
    return parsed


def _torchgen():
    """The code-generation settings torchgen needs for schemas with mutable arguments."""
    return local.parametrize(
        use_const_ref_for_mutable_tensors=False, use_ilistref_for_tensor_lists=False
    )


def shim_name(op: str, device: str) -> str:
    """The C function a package calls for op `op` (no namespace) on `device`."""
    return f"aoti_torch_{device}_{op}"


def declaration(schema: str, device: str) -> str:
    """The shim's C declaration, as AOTInductor's custom_ops_to_c_shims takes it (no ';')."""
    parsed = parse_schema(schema)
    with _torchgen():
        decl, _ = gen_declaration_and_definition(parsed, device, "", {})
    if parsed.name.overload_name == IN_PLACE_OVERLOAD:
        base = str(parsed.name.name)
        decl = decl.replace(
            f"{shim_name(base, device)}_{IN_PLACE_OVERLOAD}(", f"{shim_name(base + '_', device)}("
        )
    decl = decl.removeprefix("AOTI_TORCH_EXPORT ").removesuffix(";")
    if not parsed.returns and not parsed.arguments.out:
        decl = f"{decl.removesuffix(')')}, {NO_RESULT_PARAMETER})"
    return decl


def kernel_namespace(namespace: str, device: str) -> str:
    """Where an op library defines the kernels its registrations and shims call:
    ``<namespace>::<device>::<op>``, with the arguments of kernel_declaration."""
    return f"{namespace}::{device}"


# C++ types of a kernel's arguments by schema type, and of a boxed entry's non-tensor arguments
# as it reads them off its stack (a str as the std::string it owns).
_KERNEL_TYPES = {
    "Tensor": "TensorRef",
    # None reaches the kernel as a TensorRef without a handle.
    "Tensor?": "TensorRef",
    "float": "double",
    "bool": "bool",
    "int": "int64_t",
    "str": "std::string_view",
}
_BOXED_TYPES = {
    "float": "double",
    "bool": "bool",
    "int": "int64_t",
    "str": "std::string",
}
# AOTInductor's C types, and how a shim turns one into the kernel's argument.
_C_TYPES = {
    "Tensor": "AtenTensorHandle",
    "Tensor?": "AtenTensorHandle*",
    "float": "double",
    "bool": "int32_t",
    "int": "int64_t",
    "str": "const char*",
}
_FROM_C = {
    "Tensor": "TensorRef({})",
    "Tensor?": "TensorRef({0} != nullptr ? *{0} : nullptr)",
    "float": "{}",
    "bool": "{} != 0",
    "int": "{}",
    "str": "std::string_view({})",
}


def _base_type(arg) -> str:
    kind = str(arg.type)
    if kind not in _KERNEL_TYPES:
        raise ShimError(f"{arg.name}: arguments of type {kind} have no C shim here")
    return kind


class _Op:
    """One schema, as its kernel, boxed entry and C shim see it."""

    def __init__(self, schema: str):
        self.schema = parse_schema(schema)
        self.name = schema.partition("(")[0].rsplit("::", 1)[-1]
        args = self.schema.arguments
        self.inputs = [(a.name, _base_type(a)) for a in args.flat_non_out]
        self.out = [a.name for a in args.out]
        self.returns = len(self.schema.returns)
        if not self.out and any(str(r.type) != "Tensor" for r in self.schema.returns):
            raise ShimError(f"{schema}: only Tensor results have a C shim here")

    def kernel_declaration(self) -> str:
        """``<result> <op>(<inputs>, TensorRef out)``: a new tensor (OwnedTensor), a tuple of
        them, or nothing for an out= companion, which fills `out`, and for an in-place op
        (``-> ()``), which writes its mutable (``Tensor(a!)``) arguments."""
        params = [f"{_KERNEL_TYPES[t]} {n}" for n, t in self.inputs]
        params += [f"TensorRef {n}" for n in self.out]
        if self.out or self.returns == 0:
            result = "void"
        elif self.returns == 1:
            result = "OwnedTensor"
        else:
            result = f"std::tuple<{', '.join(['OwnedTensor'] * self.returns)}>"
        return f"{result} {self.name}({', '.join(params)})"

    def c_declaration(self, device: str) -> str:
        # torchgen's shim of an out= op passes `out` first, as at::<op>_out takes it.
        params = [f"AtenTensorHandle {n}" for n in self.out]
        params += [f"{_C_TYPES[t]} {n}" for n, t in self.inputs]
        if not self.out:
            params += [f"AtenTensorHandle* ret{i}" for i in range(self.returns)]
            if self.returns == 0:
                params.append(NO_RESULT_PARAMETER)
        return f"AOTITorchError {shim_name(self.name, device)}({', '.join(params)})"

    def _call(self, namespace: str, device: str, args: list[str]) -> str:
        return f"{kernel_namespace(namespace, device)}::{self.name}({', '.join(args)})"

    def boxed_definition(self, namespace: str, device: str) -> str:
        """The entry registered at the device's key, on torch's boxed stable convention
        (tools/torch/c_shim_call.h): it owns the argument handles and hands over the results'."""
        reads = []
        for i, (n, t) in enumerate(self.inputs + [(n, "Tensor") for n in self.out]):
            if t == "Tensor":
                reads.append(f"  OwnedTensor {n} = my_ops::boxed::tensor(stack[{i}]);\n")
            elif t == "Tensor?":
                reads.append(f"  OwnedTensor {n} = my_ops::boxed::optional_tensor(stack[{i}]);\n")
            else:
                reads.append(f"  auto {n} = my_ops::boxed::value<{_BOXED_TYPES[t]}>(stack[{i}]);\n")
        call = self._call(namespace, device, [n for n, _ in self.inputs] + self.out)
        outputs = 1 if self.out else self.returns
        if self.out:
            body = f"  {call};\n  stack[0] = my_ops::boxed::result(std::move({self.out[0]}));\n"
        elif self.returns == 0:
            body = f"  {call};\n"
        elif self.returns == 1:
            body = f"  stack[0] = my_ops::boxed::result({call});\n"
        else:
            body = f"  auto results = {call};\n" + "".join(
                f"  stack[{i}] = my_ops::boxed::result(std::move(std::get<{i}>(results)));\n"
                for i in range(self.returns)
            )
        return (
            f"void {device}_{self.name}(StableIValue* stack, uint64_t num_args, "
            "uint64_t num_outputs) {\n"
            f'  my_ops::boxed::check_arity("{self.name}", num_args, {len(reads)}, num_outputs, '
            f"{outputs});\n" + "".join(reads) + body + "}\n"
        )

    def shim_definition(self, namespace: str, device: str) -> str:
        args = [_FROM_C[t].format(n) for n, t in self.inputs]
        args += [f"TensorRef({n})" for n in self.out]
        call = self._call(namespace, device, args)
        if self.out or self.returns == 0:
            body = f"{call};"
        elif self.returns == 1:
            body = f"*ret0 = {call}.release();"
        else:
            body = f"auto results = {call};\n    " + "\n    ".join(
                f"*ret{i} = std::get<{i}>(results).release();" for i in range(self.returns)
            )
        return (
            f"{self.c_declaration(device)} {{\n"
            f'  return my_ops::c_shim::run("{shim_name(self.name, device)}", [&] {{\n'
            f"    {body}\n  }});\n}}\n"
        )


def _ops_for(ops: list[_Op], device: str) -> list[_Op]:
    """The ops with a kernel on `device`: out= companions have CPU kernels only."""
    return [op for op in ops if device == "cpu" or not op.out]


def generate(registration: str, source: str) -> str:
    """The C++ file of every op's kernel registration and C shim, for each device."""
    namespace, schemas = read_registration(registration)
    ops = [_Op(schema) for schema in schemas]
    for op, schema in zip(ops, schemas, strict=True):
        # The C signature is AOTInductor's, as torchgen (the generator of torch's own shims)
        # writes it: the generated wrapper calls exactly that.
        if op.c_declaration("cpu") != declaration(schema, "cpu"):
            raise ShimError(f"{schema}: the shim would not have AOTInductor's signature")
    parts = [
        f"// Generated by tools/torch/c_shims.py from {source}: do not edit.\n"
        "// Every op's kernel registrations (boxed entries) and AOTInductor C shims, one\n"
        "// per device, on LibTorch's stable ABI.\n\n"
        "#include <torch/csrc/stable/library.h>\n\n"
        "#include <cstdint>\n#include <string>\n#include <string_view>\n#include <tuple>\n"
        "#include <utility>\n\n"
        '#include "tools/torch/c_shim_call.h"\n'
    ]
    for device in DEVICES:
        device_ops = _ops_for(ops, device)
        kernels = "".join(f"{op.kernel_declaration()};\n" for op in device_ops)
        impls = "".join(f'  m.impl("{op.name}", &{device}_{op.name});\n' for op in device_ops)
        body = (
            f"namespace {kernel_namespace(namespace, device)} {{\n"
            f"using my_ops::OwnedTensor;\nusing my_ops::TensorRef;\n{kernels}}}\n\n"
            "namespace {\n\nusing my_ops::OwnedTensor;\nusing my_ops::TensorRef;\n\n"
            + "\n".join(op.boxed_definition(namespace, device) for op in device_ops)
            + "\n}  // namespace\n\n"
            f"STABLE_TORCH_LIBRARY_IMPL({namespace}, {DEVICES[device]}, m) {{\n{impls}}}\n\n"
            'extern "C" {\n\n'
            + "\n".join(
                f"AOTI_TORCH_EXPORT {op.shim_definition(namespace, device)}" for op in device_ops
            )
            + '\n}  // extern "C"\n'
        )
        if device == "cuda":
            body = f"#ifdef {CUDA_GUARD}\n{body}#endif  // {CUDA_GUARD}\n"
        parts.append(f"\n// {device}\n\n{body}")
    return "".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: c_shims.py REGISTRATION_CPP OUTPUT_CPP", file=sys.stderr)
        return 2
    registration, output = argv[1], argv[2]
    try:
        with open(registration) as f:
            text = generate(f.read(), registration)
    except (OSError, ShimError) as e:
        print(f"c_shims: {registration}: {e}", file=sys.stderr)
        return 1
    with open(output, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
