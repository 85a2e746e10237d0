"""What a CPU run loads: LibTorch's CPU libraries, and nothing of its CUDA stack.

The loader, the op library and a CPU package's model library link libtorch_cpu.so and
libc10.so, never libtorch.so (which NEEDs libtorch_cuda.so and with it cuDNN, cuBLAS, NCCL and
the rest). The runtime loads libtorch_cuda.so itself when a package's manifest says CUDA. What
each run loaded is read from the dynamic loader's own trace (LD_DEBUG=files), which lists
every library it initialises, dlopen()ed ones included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import EXIT_CODES, child_env, error_lines, writable_copy
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from deploy.bench.footprint import TORCH_CUDA_LIBRARIES, loaded_libraries


def _needed(path: str | Path) -> list[str]:
    with open(path, "rb") as f:
        dynamic = ELFFile(f).get_section_by_name(".dynamic")
        assert isinstance(dynamic, DynamicSection), path
        return [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]


def _torch_lib() -> Path:
    """The merged LibTorch tree's torch/lib folder (pip's layout: nvidia/ two levels up)."""
    return Path(os.environ["LIBTORCH_LIB"]).parent  # $LIBTORCH_LIB names its libc10.so


def _nvidia_libraries(torch_lib: Path) -> dict[str, Path]:
    """Every library of the CUDA wheels beside this LibTorch, by file name."""
    found = {}
    for lib_dir in (torch_lib.parent.parent / "nvidia").glob("*/lib"):
        for path in lib_dir.iterdir():
            if ".so" in path.name:
                found[path.name] = path
    return found


def _loaded(stderr: str) -> list[str]:
    """The file names of the libraries the dynamic loader initialised (LD_DEBUG=files)."""
    return [os.path.basename(path) for path in loaded_libraries(stderr)]


def _run(loader: str, package: Path, ops: str, out: Path, env: dict[str, str]):
    return subprocess.run(
        [loader, "--ops", ops,
         "--package", str(package / "model.pt2"), "--input", str(package / "sample_input.pt"),
         "--output", str(out), "--expect", str(package / "expected_output.pt")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _cuda_package(default_package: Path, folder: Path) -> Path:
    """The default package whose manifest says CUDA: the runtime then needs LibTorch's CUDA
    backend before it loads anything of the package."""
    package = writable_copy(default_package, folder)
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["device"] == "cpu", manifest
    manifest["device"] = "cuda"
    (package / "manifest.json").write_text(json.dumps(manifest))
    return package


def test_cpu_libraries_are_all_the_programs_link(loader_bin, ops_library, default_package):
    # The link lines themselves: a file that NEEDs libtorch.so loads the CUDA stack wherever it
    # runs. (The package's model library is the one .so inside model.pt2.)
    with zipfile.ZipFile(default_package / "model.pt2") as package:
        (model,) = [n for n in package.namelist() if n.endswith(".so")]
        model_library = Path(os.environ["TEST_TMPDIR"]) / "model.so"
        model_library.write_bytes(package.read(model))
    for path in (loader_bin, ops_library, model_library):
        needed = _needed(path)
        assert "libtorch_cpu.so" in needed, (path, needed)
        assert not TORCH_CUDA_LIBRARIES & set(needed), (path, needed)


def test_a_cpu_run_loads_nothing_of_cuda_but_what_libtorch_cpu_needs(
    loader_bin, ops_library, default_package, tmp_path: Path
):
    env = child_env(tmp_path / "tmp") | {"LD_DEBUG": "files"}
    proc = _run(loader_bin, default_package, ops_library, tmp_path / "out.pt", env)
    assert proc.returncode == 0, error_lines(proc.stderr)[-5:]
    loaded = _loaded(proc.stderr)
    assert "libtorch_cpu.so" in loaded and "libc10.so" in loaded, loaded
    assert not TORCH_CUDA_LIBRARIES & set(loaded), loaded
    # LibTorch's CUDA build links libtorch_cpu.so itself against the CUDA runtime and CUPTI:
    # those two (mapped, not initialised for a device) are all of CUDA a CPU run may load.
    torch_lib = _torch_lib()
    cuda = set(_nvidia_libraries(torch_lib)) & set(loaded)
    assert cuda <= set(_needed(torch_lib / "libtorch_cpu.so")), sorted(cuda)


def test_a_cuda_manifest_loads_libtorch_cuda_from_the_same_libtorch(
    loader_bin, ops_library, default_package, tmp_path: Path
):
    # The package itself runs on the CPU; its manifest's device alone makes the runtime load
    # the CUDA backend, from the folder of the libtorch_cpu.so it runs on.
    package = _cuda_package(default_package, tmp_path / "cuda_package")
    env = child_env(tmp_path / "tmp") | {"LD_DEBUG": "files"}
    proc = _run(loader_bin, package, ops_library, tmp_path / "out.pt", env)
    assert proc.returncode == 0, error_lines(proc.stderr)[-5:]
    assert "libtorch_cuda.so" in _loaded(proc.stderr)


@pytest.fixture
def libtorch_without_cuda(tmp_path: Path) -> Path:
    """A LibTorch folder in pip's layout holding libtorch_cpu.so, libc10.so and what they NEED
    of the folder: no libtorch.so, no libtorch_cuda.so, no CUDA library but the CUDA runtime
    and CUPTI, which the CUDA build's libtorch_cpu.so NEEDs itself."""
    source = _torch_lib()
    nvidia = _nvidia_libraries(source)
    top = tmp_path / "libtorch"
    lib = top / "torch" / "lib"
    cuda = top / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    cuda.mkdir(parents=True)
    wanted = {"libtorch_cpu.so", "libc10.so"}
    for name in sorted(wanted):
        wanted |= set(_needed(source / name))
    for name in wanted:
        if (source / name).exists():
            os.symlink(os.path.realpath(source / name), lib / name)
        elif name in nvidia:
            os.symlink(os.path.realpath(nvidia[name]), cuda / name)
    present = {p.name for p in lib.iterdir()} | {p.name for p in cuda.iterdir()}
    assert not TORCH_CUDA_LIBRARIES & present and "libtorch_cuda.so" not in present
    return top


def _library_path(libtorch: Path) -> str:
    return f"{libtorch}/torch/lib:{libtorch}/nvidia/cu13/lib"


def _bundle(loader_bin: str, ops_library: str, folder: Path) -> tuple[str, str]:
    """The loader and op library copied out of Bazel's tree, as the edge bundle ships them:
    nothing of their RPATHs then leads back to the build's LibTorch."""
    folder.mkdir()
    shutil.copy(loader_bin, folder / "loader")
    shutil.copy(ops_library, folder / "libmy_ops.so")
    return str(folder / "loader"), str(folder / "libmy_ops.so")


def test_a_cpu_package_runs_on_a_libtorch_without_cuda(
    loader_bin, ops_library, default_package, libtorch_without_cuda: Path, tmp_path: Path
):
    loader, ops = _bundle(loader_bin, ops_library, tmp_path / "bundle")
    env = child_env(tmp_path / "tmp") | {
        "LD_LIBRARY_PATH": _library_path(libtorch_without_cuda),
        "LD_DEBUG": "files",
    }
    proc = _run(loader, default_package, ops, tmp_path / "out.pt", env)
    assert proc.returncode == 0, error_lines(proc.stderr)[-5:]
    assert (tmp_path / "out.pt").is_file()
    assert "libtorch_cpu.so" in _loaded(proc.stderr)


def test_a_cuda_package_on_a_libtorch_without_cuda_is_refused(
    loader_bin, ops_library, default_package, libtorch_without_cuda: Path, tmp_path: Path
):
    loader, ops = _bundle(loader_bin, ops_library, tmp_path / "bundle")
    package = _cuda_package(default_package, tmp_path / "cuda_package")
    env = child_env(tmp_path / "tmp") | {
        "LD_LIBRARY_PATH": _library_path(libtorch_without_cuda),
    }
    out = tmp_path / "out.pt"
    proc = _run(loader, package, ops, out, env)
    assert proc.returncode == EXIT_CODES["no_cuda_backend"], proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("loader: error: "), lines
    assert "runs on CUDA" in lines[0] and "libtorch_cuda.so" in lines[0], lines[0]
    assert not out.exists()
    assert os.listdir(tmp_path / "tmp") == []
