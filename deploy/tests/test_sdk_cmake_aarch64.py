"""//deploy:sdk_linux_aarch64 as a user cross-building for an ARM64 edge machine gets it: the
example cross-configured by CMake with the SDK's toolchain file (Debian's cross GCC, the arm64
sysroot) against the aarch64 LibTorch, and run under qemu on the aarch64 default package:
outputs equal the aarch64 loader's bit for bit.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import qemu_aarch64
import sdk_archive
from conftest import absolute_from_env, package_folder

from deploy.qemu import qemu


@pytest.fixture(scope="module")
def sdk(tmp_path_factory) -> Path:
    top = sdk_archive.unpack("MY_OPS_SDK_AARCH64", tmp_path_factory.mktemp("sdk"))
    assert top.name.endswith("-linux-aarch64"), top.name
    return top


def test_example_cross_builds_and_runs_under_qemu(sdk: Path, tmp_path: Path):
    sysroot = qemu.sysroot_of(Path(absolute_from_env(os.environ["AARCH64_SYSROOT_LD"])))
    example = sdk_archive.build_example(
        sdk,
        tmp_path / "build",
        "--toolchain", str(sdk / "share/my_ops/aarch64-linux-gnu.toolchain.cmake"),
        f"-DMY_OPS_AARCH64_SYSROOT={sysroot}",
        # Found by its folder: a cross build looks for packages inside the sysroot only.
        f"-Dmy_ops_DIR={sdk / 'lib/cmake/my_ops'}",
        f"-DMY_OPS_LIBTORCH_DIR={qemu_aarch64.libtorch_lib().parent}",
    )  # fmt: skip
    header = example.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183, (
        "the example is not an aarch64 ELF file (e_machine EM_AARCH64)"
    )

    source = package_folder("MY_OPS_AARCH64_PACKAGE", "//deploy:default_package_linux_aarch64")
    package = tmp_path / "package"
    package.mkdir()
    for name in ("model.pt2", "manifest.json", "sample_input.pt"):
        shutil.copy(source / name, package / name)
    prefix = qemu_aarch64.make_prefix(tmp_path / "prefix")
    # The reference: the aarch64 loader's outputs on the same package under qemu. (The package's
    # expected_output.pt comes from eager on the exporting x86-64 machine, which the aarch64 code
    # matches within tolerance, not bit for bit.)
    reference = tmp_path / "loader_outputs.pt"
    loader = run_loader(prefix, package, reference, tmp_path)
    assert loader.returncode == 0, loader.stderr
    proc = qemu_aarch64.run(
        prefix,
        [
            str(example),
            str(package / "model.pt2"),
            str(package / "sample_input.pt"),
            str(reference),
        ],
        tmp_path / "tmp",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "outputs match bit for bit" in proc.stdout, proc.stdout


def run_loader(prefix: Path, package: Path, out: Path, tmp_path: Path):
    """The cross-built loader on `package` under qemu, with the SDK's aarch64 op library."""
    loader = os.path.realpath(absolute_from_env(os.environ["AARCH64_LOADER"]))
    library = os.path.realpath(absolute_from_env(os.environ["AARCH64_OPS_LIBRARY"]))
    argv = [loader, "--ops", library, "--package", str(package / "model.pt2"),
            "--input", str(package / "sample_input.pt"), "--output", str(out)]  # fmt: skip
    return qemu_aarch64.run(prefix, argv, tmp_path / "tmp")
