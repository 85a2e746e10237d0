"""An op library's AOTInductor C shims, generated from the schemas in its registration file.

A package exported with C shims calls each custom op as a plain C function,
``AOTITorchError aoti_torch_<device>_<op>(AtenTensorHandle x, ..., AtenTensorHandle* ret0)``,
instead of describing the call in JSON for the ProxyExecutor to rebuild as an IValue stack
and dispatch. Both the library's definitions (here, at build time) and the exporter's
declarations (``deploy/exporter/c_shims.py``, from the registered schemas) come from torchgen's
``gen_aoti_c_shim``, the generator of torch's own shims for ATen ops, so the C types follow
AOTInductor's conventions (bool as int32_t, str as const char*, outputs as pointers) by
construction; adding an op to the registration adds its shims.

usage: c_shims.py REGISTRATION_CPP OUTPUT_CPP

REGISTRATION_CPP holds ``TORCH_LIBRARY(<namespace>, m)`` and the ``kOpSchemas`` array, one
string literal per line. A CPU shim calls the op's CPU kernel directly, as torch's own shims
call ``at::cpu::<op>``: the library defines it as ``<namespace>::cpu::<op>`` with the
dispatcher's signature of the op (the function it registers at the CPU key; a mismatch is an
undefined symbol when the library links). A CUDA shim goes through the dispatcher. The CUDA
shims are compiled only where the library has its CUDA part (``TORCH_OP_LIBRARY_CUDA``).
"""

from __future__ import annotations

import ast
import re
import sys

from torchgen import local
from torchgen.api.types import DispatcherSignature
from torchgen.gen_aoti_c_shim import gen_declaration_and_definition
from torchgen.model import FunctionSchema

DEVICES = {"cpu": "CPU", "cuda": "CUDA"}
# The guard that registration.cpp's CUDA kernels sit behind.
CUDA_GUARD = "TORCH_OP_LIBRARY_CUDA"

_NAMESPACE = re.compile(r"^TORCH_LIBRARY\((\w+),", re.MULTILINE)
_SCHEMAS = re.compile(r"kOpSchemas\[\]\s*=\s*\{(.*?)\};", re.DOTALL)
_LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"')


class ShimError(Exception):
    """The registration file cannot be read as this generator expects."""


def read_registration(text: str) -> tuple[str, list[str]]:
    """The namespace and the schemas (as registered, without the namespace) of a registration."""
    namespaces = _NAMESPACE.findall(text)
    if len(namespaces) != 1:
        raise ShimError(
            f"expected one TORCH_LIBRARY(<namespace>, m) block, found {len(namespaces)}"
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


def parse_schema(schema: str) -> FunctionSchema:
    """torchgen's FunctionSchema of a custom op schema, with or without its namespace.

    An out= companion, ``<op>_out(..., *, Tensor(a!) out) -> Tensor(a!)`` (ops/registration.cpp
    says why it is an op of its own), is read as torchgen's ``<op>.out`` overload: torchgen
    reserves the ``_out`` suffix for that, and names the overload's shim
    aoti_torch_<device>_<op>_out, the name AOTInductor calls for the op ``<op>_out``.
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
    with _torchgen():
        decl, _ = gen_declaration_and_definition(parse_schema(schema), device, "", {})
    return decl.removeprefix("AOTI_TORCH_EXPORT ").removesuffix(";")


def kernel_namespace(namespace: str) -> str:
    """Where an op library defines the CPU kernels its CPU shims call: ``<namespace>::cpu::<op>``,
    with the dispatcher's signature of the op, the function it registers at the CPU key."""
    return f"{namespace}::cpu"


def _shims(namespace: str, schema: str, device: str) -> tuple[str, str, str, str]:
    """(the shim's declaration, the kernel's declaration or "", the backend call's definition,
    the shim's definition) for one device."""
    parsed = parse_schema(schema)
    op = schema.partition("(")[0].rsplit("::", 1)[-1]
    call = f"call_{op}_{device}"
    # torchgen's shim of an out= op passes `out` first, as at::<op>_out takes it; the kernel,
    # like the schema and the dispatcher, takes it last.
    out_first = "OutFirst" if parsed.arguments.out else ""
    with _torchgen():
        signature = DispatcherSignature.from_schema(parsed)
        decl, definition = gen_declaration_and_definition(parsed, device, f"{call}()", {})
        kernel_signature, function_type = signature.decl(name=op), signature.type()
    if device == "cpu":
        kernel = f"{kernel_namespace(namespace)}::{op}"
        kernel_decl = f"{kernel_signature};\n"
        backend = (
            f"constexpr my_ops::c_shim::Call{out_first}<&{kernel}> {call}() {{ return {{}}; }}\n"
        )
    else:
        kernel_decl = ""
        backend = (
            f"const auto& {call}() {{\n"
            f"  static const my_ops::c_shim::Redispatch{out_first}<c10::DispatchKey::"
            f'{DEVICES[device]}, {function_type}> op("{namespace}::{op}");\n'
            f"  return op;\n"
            f"}}\n"
        )
    return decl, kernel_decl, backend, definition


def generate(registration: str, source: str) -> str:
    """The C++ file of every shim of the registration's ops, for each device."""
    namespace, schemas = read_registration(registration)
    parts = [
        f"// Generated by tools/torch/c_shims.py from {source}: do not edit.\n"
        "// The AOTInductor C shims of every op of the library, one per device.\n\n"
        "#include <torch/csrc/inductor/aoti_torch/c/shim.h>\n"
        "#include <torch/csrc/inductor/aoti_torch/utils.h>\n\n"
        '#include "tools/torch/c_shim_call.h"\n\n'
        "using torch::aot_inductor::new_tensor_handle;\n"
        "using my_ops::c_shim::resolve_tensor_dispatch_flags;\n"
        "using torch::aot_inductor::resolve_tensor_list_dispatch_flags;\n"
        "using torch::aot_inductor::tensor_handle_to_tensor_pointer;\n"
    ]
    for device in DEVICES:
        shims = [_shims(namespace, schema, device) for schema in schemas]
        kernels = "".join(kernel for _, kernel, _, _ in shims)
        body = (
            'extern "C" {\n'
            + "\n".join(decl for decl, _, _, _ in shims)
            + "\n}\n\n"
            + (f"namespace {kernel_namespace(namespace)} {{\n{kernels}}}\n\n" if kernels else "")
            + "namespace {\n\n"
            + "\n".join(backend for _, _, backend, _ in shims)
            + '\n}  // namespace\n\nextern "C" {\n'
            + "".join(definition for _, _, _, definition in shims)
            + "\n}\n"
        )
        if device == "cuda":
            body = f"\n#ifdef {CUDA_GUARD}\n{body}#endif  // {CUDA_GUARD}\n"
        parts.append(f"\n// {device}\n{body}")
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
