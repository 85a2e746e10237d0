"""Packages that call the ops as C shims (the export's default), against --no-c-shims ones.

//deploy:default_package and //deploy:proxy_executor_package are the same model exported
with and without C shims (and likewise for linux-aarch64). What a package calls through
AOTInductor's ProxyExecutor is what its *.wrapper.json describes (one node per call); what it
calls as a C function is an undefined symbol of its model .so. Both are read from the archive.
The two packages must give the same outputs bit for bit: the kernels are the same, only the
way the wrapper reaches them differs.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import zipfile
from pathlib import Path

import pytest
import qemu_aarch64
import torch
from conftest import EXIT_CODES, absolute_from_env, error_lines, package_folder, run_loader
from elftools.elf.elffile import ELFFile

import my_ops
from deploy.exporter import c_shims
from deploy.exporter.loading import load

PROXY_EXECUTOR_CALL = "aoti_torch_proxy_executor_call_function"


@pytest.fixture(scope="module")
def proxy_package() -> Path:
    return package_folder("MY_OPS_PROXY_PACKAGE", "//deploy:proxy_executor_package")


@pytest.fixture(scope="module")
def aarch64_packages() -> tuple[Path, Path]:
    return (
        package_folder("MY_OPS_AARCH64_PACKAGE", "//deploy:default_package_linux_aarch64"),
        package_folder(
            "MY_OPS_PROXY_PACKAGE_AARCH64", "//deploy:proxy_executor_package_linux_aarch64"
        ),
    )


def _members(package: Path, suffix: str) -> list[bytes]:
    with zipfile.ZipFile(package / "model.pt2") as z:
        return [z.read(n) for n in z.namelist() if n.endswith(suffix)]


def _proxy_executor_targets(package: Path) -> list[str]:
    """What the package's wrapper sends through the ProxyExecutor, one entry per call."""
    (wrapper_json,) = _members(package, ".wrapper.json")
    return [node["node"]["target"] for node in json.loads(wrapper_json)["nodes"]]


def _undefined_symbols(package: Path) -> set[str]:
    """The functions the package's model .so expects the process to provide."""
    (model_so,) = _members(package, ".wrapper.so")
    elf = ELFFile(io.BytesIO(model_so))
    return {
        s.name
        for s in elf.get_section_by_name(".dynsym").iter_symbols()
        if s["st_shndx"] == "SHN_UNDEF" and s.name
    }


def _manifest_ops(package: Path) -> list[dict]:
    return json.loads((package / "manifest.json").read_text())["ops"]


@pytest.mark.parametrize("target", ["linux-x86_64", "linux-aarch64"])
def test_the_default_export_calls_every_op_as_a_c_shim(
    target, default_package: Path, aarch64_packages
) -> None:
    package = default_package if target == "linux-x86_64" else aarch64_packages[0]
    ops = _manifest_ops(package)
    # Each op with an out= companion is lowered to it: the package allocates the output.
    assert {"my_ops::fused_bias_gelu_out", "my_ops::silu_and_mul_out"} <= {op["name"] for op in ops}
    for op in ops:
        if op["name"].endswith("_out"):
            assert op["schema"].endswith(", *, Tensor(a!) out) -> Tensor(a!)"), op
    # AOTInductor's name for an op's CPU shim: aoti_torch_cpu_ and the op's name.
    for op in ops:
        assert op["c_shim"] == "aoti_torch_cpu_" + op["name"].removeprefix("my_ops::"), op
    assert {op["c_shim"] for op in ops} <= _undefined_symbols(package)
    # Only the custom class's method calls are left to the ProxyExecutor.
    left = _proxy_executor_targets(package)
    assert left, "the class's methods should still go through the ProxyExecutor"
    assert set(left) == {"call_torchbind"}, left


def test_ops_with_a_companion_write_into_buffers_the_package_plans(
    default_package: Path, proxy_package: Path
) -> None:
    (wrapper,) = _members(default_package, ".wrapper.cpp")
    text = wrapper.decode()
    called = re.findall(r"\b(aoti_torch_cpu_\w+)\(", text)
    companions = {op["c_shim"] for op in _manifest_ops(default_package)}
    companions = {c for c in companions if c.endswith("_out")}
    assert companions and companions <= set(called)
    # ... and never through the op's own shim, which allocates its output on every call.
    assert not {c.removesuffix("_out") for c in companions} & set(called)
    # The --no-c-shims package still calls the ops themselves.
    assert {op["name"] for op in _manifest_ops(proxy_package)} >= {
        "my_ops::" + c.removeprefix("aoti_torch_cpu_").removesuffix("_out") for c in companions
    }


def test_the_package_checks_its_inputs_but_not_each_op_output(default_package: Path) -> None:
    # Under AOTI_RUNTIME_CHECK_INPUTS (the loader's) the inputs are checked once per run; an
    # assert_size_stride after each op call would cost more than a small op's work.
    (wrapper,) = _members(default_package, ".wrapper.cpp")
    text = wrapper.decode()
    assert "check_input_0(input_handles);" in text
    assert "assert_size_stride(" not in text


def test_the_no_c_shims_export_calls_every_op_through_the_proxy_executor(
    proxy_package: Path,
) -> None:
    ops = _manifest_ops(proxy_package)
    assert ops and not any("c_shim" in op for op in ops)
    targets = _proxy_executor_targets(proxy_package)
    assert {op["name"] for op in ops} <= set(targets)
    assert not {f"aoti_torch_cpu_{op['name'].split('::')[1]}" for op in ops} & (
        _undefined_symbols(proxy_package)
    )


def _run_cpp(
    loader: str, package: Path, library: str, inputs: Path, out: Path
) -> list[torch.Tensor]:
    argv = ["--ops", library, "--package", str(package / "model.pt2"),
            "--manifest", str(package / "manifest.json"),
            "--input", str(inputs), "--output", str(out)]  # fmt: skip
    proc = run_loader(loader, argv, out.parent / "tmp")
    assert proc.returncode == 0, proc.stderr
    return list(torch.load(out))


def _assert_bit_identical(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        assert torch.equal(g.view(torch.int32), w.view(torch.int32)), (g - w).abs().max()


def _outputs(out) -> list[torch.Tensor]:
    """A Python AOTI model's outputs as a list: it returns a single output bare."""
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _batches(package: Path, tmp_path: Path) -> list[Path]:
    """The export's sample input, and the same rows at batch 1."""
    sample = torch.load(package / "sample_input.pt")
    one = tmp_path / "batch1.pt"
    torch.save(tuple(t[:1].clone() for t in sample), one)
    return [package / "sample_input.pt", one]


def test_cpp_loader_outputs_are_bit_identical_to_the_proxy_executor_package(
    loader_bin: str, ops_library: str, default_package: Path, proxy_package: Path, tmp_path: Path
) -> None:
    for i, inputs in enumerate(_batches(default_package, tmp_path)):
        shim = _run_cpp(loader_bin, default_package, ops_library, inputs, tmp_path / f"s{i}.pt")
        proxy = _run_cpp(loader_bin, proxy_package, ops_library, inputs, tmp_path / f"p{i}.pt")
        _assert_bit_identical(shim, proxy)
    # And they are the model's eager outputs, which the export saved (float32: the package's
    # fused Inductor kernels round differently from eager's op-by-op ones).
    eager = list(torch.load(default_package / "expected_output.pt"))
    torch.testing.assert_close(_run_cpp(loader_bin, default_package, ops_library,
                                        default_package / "sample_input.pt", tmp_path / "e.pt"),
                               eager)  # fmt: skip


def test_python_outputs_are_bit_identical_and_run_no_python_of_the_ops(
    loader_bin: str, ops_library: str, default_package: Path, proxy_package: Path, tmp_path: Path
) -> None:
    # After import my_ops, whose autograd formulas are Python: a C shim reaches the kernel
    # below the Autograd key, so the package's calls run no Python frame of the op modules.
    assert my_ops.load_library() == ops_library
    inputs = torch.load(default_package / "sample_input.pt")
    shim_model = load(str(default_package / "model.pt2"))
    proxy_model = load(str(proxy_package / "model.pt2"))
    frames: list[str] = []

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            frames.append(frame.f_code.co_filename)

    with torch.no_grad():
        sys.setprofile(profile)
        try:
            shim = _outputs(shim_model(*inputs))
        finally:
            sys.setprofile(None)
        proxy = _outputs(proxy_model(*inputs))
    ops_dir = os.path.dirname(my_ops.__file__)
    python_of_ops = [f for f in frames if f.startswith(ops_dir) or "torch/_library" in f]
    assert not python_of_ops, sorted(set(python_of_ops))
    _assert_bit_identical(shim, proxy)
    cpp = _run_cpp(loader_bin, default_package, ops_library, default_package / "sample_input.pt",
                   tmp_path / "cpp.pt")  # fmt: skip
    _assert_bit_identical(shim, cpp)


def test_aarch64_outputs_are_bit_identical_under_qemu(aarch64_packages, tmp_path: Path) -> None:
    shim_package, proxy_package = aarch64_packages
    prefix = qemu_aarch64.make_prefix(tmp_path)
    loader = os.path.realpath(absolute_from_env(os.environ["AARCH64_LOADER"]))
    library = os.path.realpath(absolute_from_env(os.environ["AARCH64_OPS_LIBRARY"]))
    outputs = []
    for name, package in (("shim", shim_package), ("proxy", proxy_package)):
        out = tmp_path / f"{name}.pt"
        argv = [loader, "--ops", library, "--package", str(package / "model.pt2"),
                "--manifest", str(package / "manifest.json"),
                "--input", str(shim_package / "sample_input.pt"), "--output", str(out)]  # fmt: skip
        result = qemu_aarch64.run(prefix, argv, tmp_path / "tmp")
        assert result.returncode == 0, result.stderr
        outputs.append(list(torch.load(out)))
    _assert_bit_identical(*outputs)


def test_a_library_without_the_shim_is_refused_before_the_package_loads(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    # As if exported with a newer library, whose shim for the op is a second version.
    manifest = json.loads((pkg / "manifest.json").read_text())
    (op,) = [op for op in manifest["ops"] if op["name"] == "my_ops::fused_bias_gelu_out"]
    op["c_shim"] = "aoti_torch_cpu_fused_bias_gelu_out_v2"
    (pkg / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    out = tmp_path / "out.pt"
    argv = ["--ops", str(pkg / "libmy_ops.so"), "--package", str(pkg / "model.pt2"),
            "--input", str(pkg / "sample_input.pt"), "--output", str(out)]  # fmt: skip
    proc = run_loader(loader_bin, argv, tmp_path / "tmp")
    assert proc.returncode == EXIT_CODES["ops_library"], proc.stderr
    assert error_lines(proc.stderr) == [
        "loader: error: no op library defines aoti_torch_cpu_fused_bias_gelu_out_v2, the C shim "
        "of op my_ops::fused_bias_gelu_out that the package calls "
        f"(looked in {pkg / 'libmy_ops.so'}): "
        "use the library it was exported with, or export with --no-c-shims"
    ]
    assert not out.exists()


def test_the_exporter_declares_each_shim_as_the_library_defines_it() -> None:
    # Two writers of one declaration: the library's generated source and the exporter, which
    # gives Inductor the declarations it compiles the wrapper's calls against.
    source = Path(absolute_from_env(os.environ["MY_OPS_C_SHIMS_SOURCE"])).read_text()
    defined = set(re.findall(r"^AOTI_TORCH_EXPORT (AOTITorchError aoti_torch_\w+\(.*\)) \{$",
                             source, re.MULTILINE))  # fmt: skip
    my_ops.load_library()
    # Every op the library registers: torch.ops.my_ops lists only those looked up so far.
    names = {s.name.split("::")[1] for s in torch._C._jit_get_all_schemas()
             if s.name.startswith("my_ops::")}  # fmt: skip
    ops = [getattr(torch.ops.my_ops, name).default for name in sorted(names)]
    # An out= companion has a CPU kernel only, so the library defines its CPU shim only.
    declared = {
        c_shims.declaration(op, device)
        for op in ops
        for device in ("cpu", "cuda")
        if device == "cpu" or not any(a.is_out for a in op._schema.arguments)
    }
    assert len(ops) >= 6
    assert declared == defined
