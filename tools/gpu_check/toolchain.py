"""What the build takes from this machine: torch, g++, CUDA, glibc, libsodium, nlohmann/json."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from check_run import ROOT


@dataclass
class Toolchain:
    torch_dir: Path
    torch_version: str
    abi: int
    site_packages: Path
    cxx: str
    nvcc: str | None = None
    cuda_root: Path | None = None
    nvcc_version: str | None = None
    glibc: tuple[int, int] | None = None
    overlay: Path | None = None
    cudart: Path | None = None
    nvidia_include: Path | None = None

    def cxx_flags(self) -> list[str]:
        return [
            "-std=c++20",
            "-fPIC",
            f"-D_GLIBCXX_USE_CXX11_ABI={self.abi}",
            "-isystem",
            str(self.torch_dir / "include"),
            "-isystem",
            str(self.torch_dir / "include/torch/csrc/api/include"),
            f"-I{ROOT}",
        ]


def _glibc_version() -> tuple[int, int] | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _nvcc_top(nvcc: str) -> Path | None:
    # nvcc on PATH may be a wrapper script; its dry run names the real bin dir.
    try:
        out = subprocess.run(
            [nvcc, "--dryrun", "--version"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("#$ _HERE_="):
            top = Path(line.split("=", 1)[1].strip()).parent
            if (top / "include/cuda_runtime.h").exists():
                return top
    return None


def find_cuda_root() -> Path | None:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(var)
        if value and (Path(value) / "bin/nvcc").exists():
            return Path(value)
    nvcc = shutil.which("nvcc")
    if nvcc:
        top = _nvcc_top(nvcc)
        if top:
            return top
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return Path("/usr/local/cuda")
    return None


def write_rsqrt_overlay(include_dir: Path, overlay: Path) -> None:
    """Mirrors the toolkit's include dir with crt/math_functions.h patched.

    The same fix as tools/cuda/private/toolkit.bzl: glibc >= 2.42 declares
    rsqrt/rsqrtf noexcept, CUDA 13.0 without, and nvcc rejects the pair.
    Quoted includes resolve beside the including file, so every header that
    reaches crt/math_functions.h must be seen through the overlay too.
    """
    (overlay / "crt").mkdir(parents=True)
    for entry in include_dir.iterdir():
        if entry.name != "crt":
            (overlay / entry.name).symlink_to(entry)
    for entry in (include_dir / "crt").iterdir():
        if entry.name != "math_functions.h":
            (overlay / "crt" / entry.name).symlink_to(entry)
    original = (include_dir / "crt/math_functions.h").read_text()
    patched = original
    for decl in ("double rsqrt(double a)", "float rsqrtf(float a)"):
        patched = patched.replace(decl + ");", decl + " __THROW);")
    for decl in (
        "double                 rsqrt(double x)",
        "float                  rsqrtf(float x)",
    ):
        patched = patched.replace(decl + ";", decl + " __THROW;")
    if patched.count("__THROW") < original.count("__THROW") + 4:
        raise RuntimeError(
            "crt/math_functions.h no longer matches the rsqrt patch "
            "(see tools/cuda/private/toolkit.bzl)"
        )
    (overlay / "crt/math_functions.h").write_text(patched)


def detect_toolchain(cpu_only: bool, work: Path, log) -> Toolchain:
    import torch

    torch_dir = Path(torch.__file__).resolve().parent
    cxx = os.environ.get("CXX") or "g++"
    if not shutil.which(cxx):
        raise RuntimeError(f"C++ compiler {cxx!r} not found (set CXX)")
    tc = Toolchain(
        torch_dir=torch_dir,
        torch_version=torch.__version__,
        abi=int(torch._C._GLIBCXX_USE_CXX11_ABI),
        site_packages=torch_dir.parent,
        cxx=cxx,
        glibc=_glibc_version(),
    )
    if cpu_only:
        return tc
    root = find_cuda_root()
    if root is None:
        raise RuntimeError(
            "no CUDA toolkit ($CUDA_HOME, $CUDA_PATH, nvcc on PATH, /usr/local/cuda)"
        )
    tc.cuda_root = root
    tc.nvcc = str(root / "bin/nvcc")
    out = subprocess.run([tc.nvcc, "--version"], capture_output=True, text=True, timeout=60)
    m = re.search(r"release (\d+\.\d+)", out.stdout)
    if not m:
        raise RuntimeError(f"cannot read the version from {tc.nvcc} --version")
    tc.nvcc_version = m.group(1)
    nvidia = tc.site_packages / "nvidia"
    # nvidia/cu13 (cu12, ...): the CUDA runtime wheel's tree, not cusparselt and friends.
    cu_dirs = sorted(
        (d / "include" for d in nvidia.glob("cu*") if re.fullmatch(r"cu\d+", d.name)),
        key=lambda d: int(d.parent.name[2:]),
    )
    cu_dirs = [d for d in cu_dirs if d.is_dir()]
    # ATen/cuda/CUDAContext.h needs cublas_v2.h and cusparse.h, which a minimal
    # toolkit may lack; torch's own CUDA wheels have them.
    tc.nvidia_include = cu_dirs[-1] if cu_dirs else None
    if tc.glibc is not None and tc.glibc >= (2, 42) and tc.nvcc_version == "13.0":
        tc.overlay = work / "cuda_overlay"
        write_rsqrt_overlay(root / "include", tc.overlay)
        log.append(f"glibc {tc.glibc[0]}.{tc.glibc[1]} + nvcc 13.0: rsqrt overlay {tc.overlay}")
    # Prefer the cudart torch itself loads, so there is one copy in the process.
    candidates = [d.parent / "lib" for d in cu_dirs[::-1]] + [root / "lib64", root / "lib"]
    for d in candidates:
        for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
            if (d / name).exists():
                tc.cudart = d / name
                break
        if tc.cudart:
            break
    if tc.cudart is None:
        raise RuntimeError("libcudart.so not found in the nvidia wheels or the toolkit")
    return tc


def nvidia_lib_dirs() -> list[Path]:
    """Library dirs of the nvidia wheels on sys.path.

    A CUDA torch's libtorch.so needs libtorch_cuda.so, which finds cuDNN,
    cuBLAS, ... through $ORIGIN/../../nvidia/*/lib, and those find each other
    through their own $ORIGIN. Where pip installed the wheels side by side
    that works; where each wheel has its own tree (Bazel's rules_python) it
    does not, and since those libraries have RUNPATHs, the loader's RPATH
    does not reach them either: linking gets -rpath-link, running gets
    LD_LIBRARY_PATH. Python's torch preloads them from sys.path itself.
    """
    dirs: list[Path] = []
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        if base.is_dir():
            dirs += sorted(d for d in base.glob("*/lib") if d.is_dir())
    return list(dict.fromkeys(dirs))


T = TypeVar("T")


def _dependency(env_var: str, repo_glob: str, found: Callable[[Path], T | None]) -> T | None:
    """The first `found(base)` that is not None, over these prefixes and their usr/.

    $env_var names a prefix; then Bazel's repository (matching repo_glob)
    beside this checkout in a runfiles tree; then the system (a Debian -dev
    package).
    """
    prefixes = [Path(p) for p in [os.environ.get(env_var)] if p]
    prefixes += sorted(ROOT.parent.glob(repo_glob))
    prefixes.append(Path("/"))
    for prefix in prefixes:
        for base in (prefix, prefix / "usr"):
            result = found(base)
            if result is not None:
                return result
    return None


def libsodium() -> tuple[Path, Path] | None:
    """The include dir and static library of libsodium, which the loader links.

    From $MY_OPS_LIBSODIUM, @libsodium or libsodium-dev (see _dependency).
    """

    def found(base: Path) -> tuple[Path, Path] | None:
        for lib in ("lib/x86_64-linux-gnu/libsodium.a", "lib64/libsodium.a", "lib/libsodium.a"):
            if (base / "include/sodium.h").is_file() and (base / lib).is_file():
                return base / "include", base / lib
        return None

    return _dependency("MY_OPS_LIBSODIUM", "*libsodium*", found)


def nlohmann_json() -> Path | None:
    """The include dir of nlohmann/json (header-only), which the loader parses its manifest with.

    From $MY_OPS_NLOHMANN_JSON, @nlohmann_json or nlohmann-json3-dev (see _dependency).
    """

    def found(base: Path) -> Path | None:
        return base / "include" if (base / "include/nlohmann/json.hpp").is_file() else None

    return _dependency("MY_OPS_NLOHMANN_JSON", "*nlohmann_json*", found)
