"""//deploy:sdk as a user gets it: unpacked, its example configured by CMake outside Bazel
(find_package(my_ops) with LibTorch located by the SDK's config, no CUDA toolkit looked for),
built with the host compiler, and run on the default package: outputs equal the expected
ones bit for bit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import sdk_archive
from conftest import absolute_from_env, child_env


@pytest.fixture(scope="module")
def sdk(tmp_path_factory) -> Path:
    return sdk_archive.unpack("MY_OPS_SDK", tmp_path_factory.mktemp("sdk"))


@pytest.fixture(scope="module")
def libtorch() -> Path:
    # The runfiles copy of LibTorch's tree: include/ and lib/ under site-packages/torch.
    return Path(absolute_from_env(os.environ["LIBTORCH_LIB"])).parent.parent


def test_sdk_layout(sdk: Path):
    names = {str(p.relative_to(sdk)) for p in sdk.rglob("*")}
    for name in [
        "include/my_ops/model.h",
        "include/my_ops/error.h",
        "lib/libmy_ops.so",
        "lib/libmy_ops_deploy.so",
        "lib/cmake/my_ops/my_opsConfig.cmake",
        "lib/cmake/my_ops/my_opsConfigVersion.cmake",
        "share/my_ops/example/CMakeLists.txt",
        "share/my_ops/example/main.cpp",
    ]:
        assert name in names, f"{name} missing from the SDK"
    # The soname the example links against, and the file it names.
    soname_link = sdk / "lib/libmy_ops_deploy.so.0"
    assert soname_link.is_symlink() and soname_link.resolve().is_file()


# How the SDK's config finds LibTorch: by itself (the default, which needs no CUDA toolkit, so
# CUDA's find modules are turned off to prove it), or through Torch's own CMake package, told
# to skip its CUDA search (this machine has no CUDA toolkit a CPU-only user would have).
# A third way is the one LibTorch's own instructions give: the SDK and
# torch.utils.cmake_prefix_path (torch's share/cmake) on CMAKE_PREFIX_PATH, found by the SDK's own
# search. Each case's flags come after -DCMAKE_PREFIX_PATH=<sdk>, so its own setting wins.
NO_CUDA_SEARCH = [
    "-DCMAKE_DISABLE_FIND_PACKAGE_CUDA=ON",
    "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON",
]
LIBTORCH_CASES = {
    "own_search": lambda sdk, torch: [f"-DMY_OPS_LIBTORCH_DIR={torch}", *NO_CUDA_SEARCH],
    "prefix_path": lambda sdk, torch: [
        f"-DCMAKE_PREFIX_PATH={sdk};{torch / 'share' / 'cmake'}",
        *NO_CUDA_SEARCH,
    ],
    "torch_config": lambda sdk, torch: [
        "-DMY_OPS_USE_TORCH_CONFIG=ON",
        "-DMY_OPS_TORCH_CONFIG_WITHOUT_CUDA=ON",
        f"-DTorch_DIR={torch / 'share/cmake/Torch'}",
    ],
}


@pytest.mark.parametrize("how", sorted(LIBTORCH_CASES))
def test_example_builds_with_cmake_and_runs_the_package(
    how: str, sdk: Path, libtorch: Path, default_package: Path, tmp_path: Path
):
    example = sdk_archive.build_example(
        sdk, tmp_path / "build", f"-DCMAKE_PREFIX_PATH={sdk}", "-DCMAKE_CXX_COMPILER=g++",
        *LIBTORCH_CASES[how](sdk, libtorch),
    )  # fmt: skip
    # The package as a user has it: plain files (the loader refuses symbolic links).
    package = tmp_path / "package"
    package.mkdir()
    for name in (
        "model.pt2",
        "manifest.json",
        "weights.bin",
        "weights.json",
        "sample_input.pt",
        "expected_output.pt",
    ):
        shutil.copy(default_package / name, package / name)
    proc = sdk_archive.run(
        [
            str(example),
            str(package / "model.pt2"),
            str(package / "sample_input.pt"),
            str(package / "expected_output.pt"),
        ],
        cwd=tmp_path,
    )
    assert "outputs match bit for bit" in proc.stdout, proc.stdout


def test_example_reports_an_api_error_with_its_code(sdk: Path, libtorch: Path, tmp_path: Path):
    example = sdk_archive.build_example(
        sdk, tmp_path / "build", f"-DCMAKE_PREFIX_PATH={sdk}",
        f"-DMY_OPS_LIBTORCH_DIR={libtorch}", "-DCMAKE_CXX_COMPILER=g++",
    )  # fmt: skip
    proc = subprocess.run(
        [str(example), str(tmp_path / "absent.pt2"), str(tmp_path / "in.pt")],
        env=child_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr  # kPackageMissing
    assert proc.stderr.startswith("example: error: ") and "absent.pt2" in proc.stderr
