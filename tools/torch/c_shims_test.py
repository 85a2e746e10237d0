"""tools/torch/c_shims.py: what it reads of a registration file, and the C it writes.

The expected declarations are AOTInductor's calling convention written out by hand (the types
the generated wrapper passes: handles for tensors, int32_t for bool, const char* for str,
double for float, pointers for outputs), not read back from the generator.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import c_shims
import pytest

_NS = 'constexpr char kNamespace[] = "a";'


def _registration(*schemas: str) -> str:
    """A registration file of namespace `a` holding `schemas`."""
    literals = ", ".join('"' + s.replace('"', '\\"') + '"' for s in schemas)
    return f"{_NS}\nconst char* kOpSchemas[] = {{{literals}}};"


REGISTRATION = r"""
namespace {
// clang-format off
constexpr const char* kOpSchemas[] = {
    "scale(Tensor x, float alpha=1.0) -> Tensor",  // a comment
    "mix(Tensor x, Tensor y, bool swap=False, str mode=\"sum\", int n=2) -> (Tensor, Tensor)",
};
// clang-format on
}  // namespace

constexpr char kNamespace[] = "test_ns";
"""


def test_reads_the_namespace_and_every_schema():
    namespace, schemas = c_shims.read_registration(REGISTRATION)
    assert namespace == "test_ns"
    assert schemas == [
        "scale(Tensor x, float alpha=1.0) -> Tensor",
        'mix(Tensor x, Tensor y, bool swap=False, str mode="sum", int n=2) -> (Tensor, Tensor)',
    ]


def test_declarations_follow_aotis_c_conventions():
    assert c_shims.declaration("scale(Tensor x, float alpha=1.0) -> Tensor", "cpu") == (
        "AOTITorchError aoti_torch_cpu_scale("
        "AtenTensorHandle x, double alpha, AtenTensorHandle* ret0)"
    )
    # With its namespace, as torch prints a registered schema.
    assert c_shims.declaration(
        'test_ns::mix(Tensor x, Tensor y, bool swap=False, str mode="sum", int n=2) '
        "-> (Tensor, Tensor)",
        "cuda",
    ) == (
        "AOTITorchError aoti_torch_cuda_mix(AtenTensorHandle x, AtenTensorHandle y, "
        "int32_t swap, const char* mode, int64_t n, AtenTensorHandle* ret0, AtenTensorHandle* ret1)"
    )


def test_generated_file_registers_and_shims_each_kernel_per_device():
    text = c_shims.generate(REGISTRATION, "registration.cpp")
    cpu, cuda = text.split(f"#ifdef {c_shims.CUDA_GUARD}")
    for device, part in (("cpu", cpu), ("cuda", cuda)):
        # The kernels the library defines as <namespace>::<device>::<op>: a mismatch with the
        # schema is an undefined symbol when the library links.
        assert (
            f"namespace test_ns::{device} {{\n"
            "using my_ops::OwnedTensor;\nusing my_ops::TensorRef;\n"
            "OwnedTensor scale(TensorRef x, double alpha);\n"
            "std::tuple<OwnedTensor, OwnedTensor> mix(TensorRef x, TensorRef y, bool swap, "
            "std::string_view mode, int64_t n);\n}"
        ) in part
        # Registered at the device's key through boxed entries that own the argument handles
        # torch made for the call and hand the results' handles back on the stack.
        key = {"cpu": "CPU", "cuda": "CUDA"}[device]
        assert (
            f"STABLE_TORCH_LIBRARY_IMPL(test_ns, {key}, m) {{\n"
            f'  m.impl("scale", &{device}_scale);\n'
            f'  m.impl("mix", &{device}_mix);\n}}'
        ) in part
        assert (
            f"void {device}_scale("
            "StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {\n"
            '  my_ops::boxed::check_arity("scale", num_args, 2, num_outputs, 1);\n'
            "  OwnedTensor x = my_ops::boxed::tensor(stack[0]);\n"
            "  auto alpha = my_ops::boxed::value<double>(stack[1]);\n"
            f"  stack[0] = my_ops::boxed::result(test_ns::{device}::scale(x, alpha));\n}}"
        ) in part
        assert (
            f"void {device}_mix(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {{\n"
            '  my_ops::boxed::check_arity("mix", num_args, 5, num_outputs, 2);\n'
            "  OwnedTensor x = my_ops::boxed::tensor(stack[0]);\n"
            "  OwnedTensor y = my_ops::boxed::tensor(stack[1]);\n"
            "  auto swap = my_ops::boxed::value<bool>(stack[2]);\n"
            "  auto mode = my_ops::boxed::value<std::string>(stack[3]);\n"
            "  auto n = my_ops::boxed::value<int64_t>(stack[4]);\n"
            f"  auto results = test_ns::{device}::mix(x, y, swap, mode, n);\n"
            "  stack[0] = my_ops::boxed::result(std::move(std::get<0>(results)));\n"
            "  stack[1] = my_ops::boxed::result(std::move(std::get<1>(results)));\n}"
        ) in part
        # The C shims: AOTInductor's C types turned into the kernel's, each result handed over.
        assert (
            f"AOTI_TORCH_EXPORT AOTITorchError aoti_torch_{device}_scale(AtenTensorHandle x, "
            "double alpha, AtenTensorHandle* ret0) {\n"
            f'  return my_ops::c_shim::run("aoti_torch_{device}_scale", [&] {{\n'
            f"    *ret0 = test_ns::{device}::scale(TensorRef(x), alpha).release();\n"
            "  });\n}"
        ) in part
        assert (
            f"auto results = test_ns::{device}::mix(TensorRef(x), TensorRef(y), swap != 0, "
            "std::string_view(mode), n);\n"
            "    *ret0 = std::get<0>(results).release();\n"
            "    *ret1 = std::get<1>(results).release();"
        ) in part
    assert "test_ns::cpu" not in cuda
    assert cuda.rstrip().endswith(f"#endif  // {c_shims.CUDA_GUARD}")


def test_an_optional_tensor_is_a_handle_pointer_and_none_an_undefined_tensor_ref():
    schema = "f(Tensor x, Tensor? b=None) -> Tensor"
    # AOTInductor passes an optional tensor as a pointer to its handle, nullptr for None.
    assert c_shims.declaration(schema, "cpu") == (
        "AOTITorchError aoti_torch_cpu_f("
        "AtenTensorHandle x, AtenTensorHandle* b, AtenTensorHandle* ret0)"
    )
    text = c_shims.generate(_registration(schema), "registration.cpp")
    assert "OwnedTensor f(TensorRef x, TensorRef b);" in text
    assert "  OwnedTensor b = my_ops::boxed::optional_tensor(stack[1]);\n" in text
    assert "a::cpu::f(TensorRef(x), TensorRef(b != nullptr ? *b : nullptr))" in text


@pytest.mark.parametrize(
    "text, reason",
    [
        ("constexpr const char* kOpSchemas[] = {};", "kNamespace"),
        (_NS + '\nconstexpr char kNamespace[] = "b";', "found 2"),
        (_NS, "no kOpSchemas"),
        (_NS + "\nconst char* kOpSchemas[] = {};", "kOpSchemas is empty"),
        (
            _NS + '\nconst char* kOpSchemas[] = {kName, "f(Tensor x) -> Tensor"};',
            "something other than string literals: 'kName'",
        ),
        (_registration("f(Tensor[] x) -> Tensor"), "arguments of type Tensor\\[\\] have no C shim"),
        (_registration("f(Tensor x) -> float"), "only Tensor results"),
    ],
)
def test_refuses_a_registration_it_cannot_read_exactly(text, reason):
    with pytest.raises(c_shims.ShimError, match=reason):
        c_shims.generate(text, "registration.cpp")


def test_an_out_companion_takes_out_first_as_aotinductor_passes_it():
    # Inductor's call of a lowered op: aoti_torch_<device>_<op>_out(out, <the op's arguments>).
    schema = "scale_out(Tensor x, float alpha=1.0, *, Tensor(a!) out) -> Tensor(a!)"
    assert c_shims.declaration(schema, "cpu") == (
        "AOTITorchError aoti_torch_cpu_scale_out(AtenTensorHandle out, AtenTensorHandle x, "
        "double alpha)"
    )
    text = c_shims.generate(
        'constexpr char kNamespace[] = "test_ns";\nconst char* kOpSchemas[] = {"' + schema + '"};',
        "registration.cpp",
    )
    # The kernel, like the schema, has `out` last and fills it; it has no CUDA kernel.
    assert "void scale_out(TensorRef x, double alpha, TensorRef out);" in text
    assert "test_ns::cpu::scale_out(TensorRef(x), alpha, TensorRef(out));" in text
    assert "cuda_scale_out" not in text and "aoti_torch_cuda_scale_out" not in text
    # The boxed entry hands back `out`'s own handle, as the schema's Tensor(a!) result.
    assert (
        "  OwnedTensor out = my_ops::boxed::tensor(stack[2]);\n"
        "  test_ns::cpu::scale_out(x, alpha, out);\n"
        "  stack[0] = my_ops::boxed::result(std::move(out));\n}"
    ) in text


@pytest.mark.parametrize(
    "schema, reason",
    [
        (
            "two_out(Tensor x, *, Tensor(a!) a, Tensor(b!) b) -> (Tensor(a!), Tensor(b!))",
            "exactly one",
        ),
        ("bad_out(Tensor x, *, Tensor(a!) out) -> Tensor", "must have matching return"),
    ],
)
def test_refuses_a_companion_it_cannot_call(schema, reason):
    text = _registration(schema)
    with pytest.raises(c_shims.ShimError, match=reason):
        c_shims.generate(text, "registration.cpp")


def test_refuses_an_overload_whose_shim_name_would_clash():
    text = _registration("f.out(Tensor x) -> Tensor")
    with pytest.raises(c_shims.ShimError, match="default overloads only"):
        c_shims.generate(text, "registration.cpp")


def test_command_line_writes_the_file_or_fails_with_one_line(tmp_path: Path):
    script = Path(c_shims.__file__)
    registration = tmp_path / "registration.cpp"
    registration.write_text(REGISTRATION)
    out = tmp_path / "shims.cpp"
    ok = subprocess.run([sys.executable, script, registration, out], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert out.read_text() == c_shims.generate(REGISTRATION, str(registration))

    registration.write_text("int x;")
    bad = tmp_path / "bad.cpp"
    failed = subprocess.run(
        [sys.executable, script, registration, bad], capture_output=True, text=True
    )
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == [
        f"c_shims: {registration}: expected one "
        'constexpr char kNamespace[] = "<namespace>"; line, found 0'
    ]
    assert not bad.exists()


def test_an_in_place_form_writes_its_arguments_and_returns_nothing():
    # <op>_(Tensor(a!) x, ...) -> (): read past torchgen's ATen in-place rule (a `self`
    # returned); the shim keeps the name AOTInductor calls and takes the one null result
    # handle AOTInductor's call of an op without results still passes.
    schema = "norm_(Tensor(a!) x, Tensor(b!) r, Tensor w, float eps=1e-6) -> ()"
    want = (
        "AOTITorchError aoti_torch_{}_norm_(AtenTensorHandle x, AtenTensorHandle r, "
        "AtenTensorHandle w, double eps, AtenTensorHandle* ret0)"
    )
    assert c_shims.declaration(schema, "cpu") == want.format("cpu")
    text = c_shims.generate(_registration(schema), "registration.cpp")
    assert "void norm_(TensorRef x, TensorRef r, TensorRef w, double eps);" in text
    for device in ("cpu", "cuda"):
        assert want.format(device) + " {" in text
        assert f"a::{device}::norm_(TensorRef(x), TensorRef(r), TensorRef(w), eps);" in text
    # The boxed entry: four arguments, no result.
    assert 'my_ops::boxed::check_arity("norm_", num_args, 4, num_outputs, 0);' in text
    assert "stack[0] = " not in text.split("void cpu_norm_")[1].split("}")[0]
