"""The CPU features of deploy/contract/package_contract.json as the exporter uses them.

The loader compiles the same rows in (deploy/runtime/src/package_contract.h); its
side is tested in deploy/runtime/tests/cpu_check_test.cpp, and the reader of
the file in test_package_contract.py. Nothing here exports or loads a
package: manifests are made from stand-in files, and torch is a stand-in.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import types
from pathlib import Path

import pytest

from deploy.contract import package_contract
from deploy.contract.package_contract import CpuFeature
from deploy.exporter import cpu_features as export_cpu
from deploy.exporter import manifest as export_manifest
from deploy.exporter.errors import ExportError
from deploy.exporter.hashing import sha256_file
from deploy.exporter.program_calls import PackageCalls

CROSS_CXX = "aarch64-linux-gnu-g++-12"
# A package that calls no custom op or class (the manifest's "ops" and "classes" are empty).
NO_CALLS = PackageCalls(ops=(), classes=())
# gcc 12 for aarch64 defines every __ARM_FEATURE_* macro of the table with these.
AARCH64_EVERYTHING = (
    "armv8.6-a+crypto+sha3+sm4+fp16fml+sve2-bitperm+sve2-aes+sve2-sha3+sve2-sm4"
    "+f32mm+f64mm+rng+memtag"
)
# ... and gcc for x86-64 every x86 macro with this.
X86_EVERYTHING = "sapphirerapids"


def _cross_cxx() -> str:
    cxx = shutil.which(CROSS_CXX)
    if cxx is None:
        # Not a skip: the aarch64 build needs it too, and tools/bazel installs it.
        pytest.fail(
            f"{CROSS_CXX}, the aarch64 cross compiler, is not installed "
            "(apt-get install g++-12-aarch64-linux-gnu)"
        )
    return cxx


def _host_x86_cxx() -> str:
    if platform.machine() != "x86_64":
        pytest.skip(f"this host is {platform.machine()}, and its g++ does not compile for x86-64")
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ is not installed")
    return cxx


def _rows(target: str) -> list[CpuFeature]:
    return [row for row in export_cpu.read_cpu_features() if row.target == target]


def test_every_row_and_macro_of_the_contract_is_read() -> None:
    # Counted from the raw JSON: a row the reader skipped would be checked by
    # the loader and never asked for by the exporter.
    raw = json.loads(Path(package_contract.CONTRACT_PATH).read_text())["targets"]
    raw_rows = [row for t in raw.values() for row in t["cpu_levels"] + t["cpu_features"]]
    rows = export_cpu.read_cpu_features()
    assert len(rows) == len(raw_rows)
    assert {row.macro for row in rows if row.macro} == {
        r["macro"] for r in raw_rows if "macro" in r
    }
    assert set(export_cpu.target_macros()) == set(raw) == {"linux-x86_64", "linux-aarch64"}


def test_levels_are_the_ones_export_writes() -> None:
    assert export_cpu.cpu_levels("linux-x86_64") == ["x86-64-v2", "x86-64-v3", "x86-64-v4"]
    assert export_cpu.cpu_levels("linux-aarch64") == ["armv8-a"]
    from deploy.exporter.compile import MARCH

    assert set(MARCH.values()) - {"native"} <= set(export_cpu.cpu_levels("linux-x86_64"))


def test_manifest_format_is_the_contracts() -> None:
    assert export_manifest.manifest_format() == "my_ops.manifest/2"


def test_armv8_a_needs_fp_and_asimd_only() -> None:
    features = export_cpu.cpu_features(_cross_cxx(), "armv8-a", "linux-aarch64")
    assert features == ["asimd", "fp"]


def test_armv8_2_a_with_dotprod_needs_asimddp() -> None:
    features = export_cpu.cpu_features(_cross_cxx(), "armv8.2-a+dotprod", "linux-aarch64")
    assert {"asimd", "fp", "asimddp", "asimdrdm", "atomics", "crc32"} <= set(features)
    assert "sve" not in features


def test_gcc_defines_every_aarch64_macro_of_the_table() -> None:
    # A misspelt macro would never be defined, and its feature never asked for.
    features = export_cpu.cpu_features(_cross_cxx(), AARCH64_EVERYTHING, "linux-aarch64")
    assert sorted(row.name for row in _rows("linux-aarch64") if row.macro) == features


def test_gcc_defines_every_x86_macro_of_the_table() -> None:
    features = export_cpu.cpu_features(_host_x86_cxx(), X86_EVERYTHING, "linux-x86_64")
    assert sorted(row.name for row in _rows("linux-x86_64") if row.macro) == features


def test_a_compiler_for_another_target_is_refused() -> None:
    with pytest.raises(ExportError, match="does not compile for linux-x86_64"):
        export_cpu.cpu_features(_cross_cxx(), "armv8-a", "linux-x86_64")
    with pytest.raises(ExportError, match="unknown target 'linux-riscv64'"):
        export_cpu.cpu_features(_cross_cxx(), "armv8-a", "linux-riscv64")


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A stand-in package and op library, and torch as far as the manifest reads it."""
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.14.1+cpu"))
    package = tmp_path / "model.pt2"
    package.write_bytes(b"PK stand-in package")
    library = tmp_path / "libmy_ops.so"
    library.write_bytes(b"\x7fELF stand-in aarch64 op library")
    return package, library


def test_manifest_for_aarch64(files: tuple[Path, Path], tmp_path: Path) -> None:
    package, library = files
    stage = tmp_path / "stage"
    stage.mkdir()
    export_manifest.write_manifest(
        str(stage),
        str(package),
        "portable",
        "cpu",
        None,
        calls=NO_CALLS,
        target="linux-aarch64",
        march="armv8-a",
        cxx=_cross_cxx(),
        op_library=str(library),
    )
    manifest = json.loads((stage / "manifest.json").read_text())
    assert manifest["target"] == "linux-aarch64"
    assert manifest["isa"] == "armv8-a"
    assert manifest["cpu_features"] == ["asimd", "fp"]
    assert manifest["op_libraries"] == [
        {"file": "libmy_ops.so", "sha256": sha256_file(str(library))}
    ]
    assert manifest["ops"] == [] and manifest["classes"] == []
    assert not (stage / "manifest.sig").exists()


def test_manifest_defaults_to_x86_64(files: tuple[Path, Path]) -> None:
    package, library = files
    text = export_manifest.make_manifest(
        str(package), [str(library)], "portable", "cpu", calls=NO_CALLS, cxx=_host_x86_cxx()
    )
    manifest = json.loads(text)
    assert manifest["target"] == "linux-x86_64"
    assert manifest["isa"] == "x86-64-v3"
    assert {"avx2", "fma", "bmi2"} <= set(manifest["cpu_features"])


def test_a_level_the_loader_cannot_check_is_refused(files: tuple[Path, Path]) -> None:
    package, library = files
    with pytest.raises(ExportError, match=r"-march=armv8\.2-a is not a level .* armv8-a or native"):
        export_manifest.make_manifest(
            str(package),
            [str(library)],
            "portable",
            "cpu",
            calls=NO_CALLS,
            target="linux-aarch64",
            march="armv8.2-a",
            cxx=CROSS_CXX,
        )
    with pytest.raises(ExportError, match="cannot read op library"):
        export_manifest.make_manifest(
            str(package),
            [str(library) + ".missing"],
            "portable",
            "cpu",
            calls=NO_CALLS,
            target="linux-aarch64",
            march="armv8-a",
            cxx=CROSS_CXX,
        )


def test_manifest_names_what_the_package_calls(files: tuple[Path, Path]) -> None:
    package, library = files
    calls = PackageCalls(
        ops=(("my_ops::f", "my_ops::f(Tensor x) -> Tensor"),),
        classes=(
            ("my_ops::C", (("forward", "forward(__torch__.torch.classes.my_ops.C _0) -> ()"),)),
        ),
    )
    text = export_manifest.make_manifest(
        str(package), [str(library)], "portable", "cpu", calls=calls, cxx=_host_x86_cxx()
    )
    manifest = json.loads(text)
    assert manifest["ops"] == [{"name": "my_ops::f", "schema": "my_ops::f(Tensor x) -> Tensor"}]
    assert manifest["classes"] == [
        {
            "name": "my_ops::C",
            "methods": [
                {"name": "forward", "schema": "forward(__torch__.torch.classes.my_ops.C _0) -> ()"}
            ],
        }
    ]
