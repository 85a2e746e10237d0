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

REGISTRATION = r"""
namespace {
// clang-format off
constexpr const char* kOpSchemas[] = {
    "scale(Tensor x, float alpha=1.0) -> Tensor",  // a comment
    "mix(Tensor x, Tensor y, bool swap=False, str mode=\"sum\", int n=2) -> (Tensor, Tensor)",
};
// clang-format on
}  // namespace

TORCH_LIBRARY(test_ns, m) {
  for (const char* schema : kOpSchemas) m.def(schema);
}
TORCH_LIBRARY_IMPL(test_ns, CPU, m) {}
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


def test_generated_file_defines_each_shim_per_device_calling_below_autograd():
    text = c_shims.generate(REGISTRATION, "registration.cpp")
    cpu, cuda = text.split(f"#ifdef {c_shims.CUDA_GUARD}")
    for device, part in (("cpu", cpu), ("cuda", cuda)):
        for op in ("scale", "mix"):
            assert f"AOTI_TORCH_EXPORT AOTITorchError aoti_torch_{device}_{op}(" in part
            assert f"\nAOTITorchError aoti_torch_{device}_{op}(" in part  # the definition
    # CPU: the kernel the library defines as <namespace>::cpu::<op>, with the dispatcher's
    # signature of the op, called directly.
    assert (
        "namespace test_ns::cpu {\n"
        "at::Tensor scale(const at::Tensor & x, double alpha);\n"
        "::std::tuple<at::Tensor,at::Tensor> mix(const at::Tensor & x, const at::Tensor & y, "
        "bool swap, c10::string_view mode, int64_t n);\n}"
    ) in cpu
    assert "Call<&test_ns::cpu::scale>" in cpu
    assert "Call<&test_ns::cpu::mix>" in cpu
    assert "Redispatch" not in cpu
    # CUDA: through the dispatcher, whose typed() checks the signature against the schema.
    for op in ("scale", "mix"):
        assert f'op("test_ns::{op}")' in cuda
    assert (
        "Redispatch<c10::DispatchKey::CUDA, ::std::tuple<at::Tensor,at::Tensor> "
        "(const at::Tensor &, const at::Tensor &, bool, c10::string_view, int64_t)>"
    ) in cuda
    assert "test_ns::cpu" not in cuda
    assert "*ret1 = new_tensor_handle(std::move(std::get<1>(tmp_result)));" in cpu
    assert cuda.rstrip().endswith(f"#endif  // {c_shims.CUDA_GUARD}")


@pytest.mark.parametrize(
    "text, reason",
    [
        ("constexpr const char* kOpSchemas[] = {};", "TORCH_LIBRARY"),
        ("TORCH_LIBRARY(a, m) {}\nTORCH_LIBRARY(b, m) {}", "found 2"),
        ("TORCH_LIBRARY(a, m) {}", "no kOpSchemas"),
        ("TORCH_LIBRARY(a, m) {}\nconst char* kOpSchemas[] = {};", "kOpSchemas is empty"),
        (
            'TORCH_LIBRARY(a, m) {}\nconst char* kOpSchemas[] = {kName, "f(Tensor x) -> Tensor"};',
            "something other than string literals: 'kName'",
        ),
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
        'TORCH_LIBRARY(test_ns, m) {}\nconst char* kOpSchemas[] = {"' + schema + '"};',
        "registration.cpp",
    )
    # The kernel, like the schema and the dispatcher, has `out` last; CallOutFirst and
    # RedispatchOutFirst move it there.
    assert "at::Tensor & scale_out(const at::Tensor & x, double alpha, at::Tensor & out);" in text
    assert "CallOutFirst<&test_ns::cpu::scale_out>" in text
    assert (
        "RedispatchOutFirst<c10::DispatchKey::CUDA, at::Tensor & (const at::Tensor &, double, "
        'at::Tensor &)> op("test_ns::scale_out")'
    ) in text
    assert "*tensor_handle_to_tensor_pointer(out), resolve_tensor_dispatch_flags(x), alpha" in text


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
    text = 'TORCH_LIBRARY(a, m) {}\nconst char* kOpSchemas[] = {"' + schema + '"};'
    with pytest.raises(c_shims.ShimError, match=reason):
        c_shims.generate(text, "registration.cpp")


def test_refuses_an_overload_whose_shim_name_would_clash():
    text = 'TORCH_LIBRARY(a, m) {}\nconst char* kOpSchemas[] = {"f.out(Tensor x) -> Tensor"};'
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
        f"c_shims: {registration}: expected one TORCH_LIBRARY(<namespace>, m) block, found 0"
    ]
    assert not bad.exists()
