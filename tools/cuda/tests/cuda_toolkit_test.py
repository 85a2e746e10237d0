"""cuda_toolkit.py, the toolkit search and rsqrt overlay @cuda and tools/gpu_check share.

Runs it on a fake toolkit: no machine here has CUDA 13.0 with glibc >= 2.42 for sure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_RUNFILES = os.environ.get("TEST_SRCDIR")
if _RUNFILES:
    SCRIPT = Path(_RUNFILES) / os.environ["CUDA_TOOLKIT_PY"]
else:
    SCRIPT = Path(__file__).parents[3] / "third_party/rules_cuda/cuda/private/cuda_toolkit.py"

MATH_FUNCTIONS = """\
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ double                 rsqrt(double x);
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ float                  rsqrtf(float x);
__func__(double rsqrt(double a));
__func__(float rsqrtf(float a));
extern double sqrt(double x) __THROW;
"""


def _toolkit(root: Path, version: str, math_functions: str = MATH_FUNCTIONS) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "include/crt").mkdir(parents=True)
    nvcc = root / "bin/nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {version}, V{version}.1'\n")
    nvcc.chmod(0o755)
    (root / "include/cuda_runtime.h").write_text("")
    (root / "include/math_functions.h").write_text('#include "crt/math_functions.h"\n')
    (root / "include/crt/math_functions.h").write_text(math_functions)
    (root / "include/crt/host_config.h").write_text("")
    return root


def _run(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    # No nvcc on PATH: only the variables under test point at a toolkit.
    env = {"PATH": "/bin:/usr/bin"} | env
    overlay = tmp_path / "overlay"
    cmd = [sys.executable, str(SCRIPT), "--overlay", str(overlay), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def test_cuda_13_0_gets_the_patched_overlay(tmp_path):
    root = _toolkit(tmp_path / "cuda", "13.0")
    proc = _run(tmp_path, {"CUDA_PATH": str(root)})
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["root"] == str(root) and info["how"] == "$CUDA_PATH"
    assert info["version"] == "13.0" and info["nvcc"] == str(root / "bin/nvcc")
    assert info["overlay"] == str(tmp_path / "overlay") and info["overlay_min_glibc"] == "2.42"
    glibc = tuple(map(int, info["glibc"].split("."))) if info["glibc"] else None
    assert info["host_needs_overlay"] == (glibc is None or glibc >= (2, 42))
    overlay = tmp_path / "overlay"
    # Everything else is the toolkit's own file, the top-level math_functions.h included.
    assert (overlay / "math_functions.h").resolve() == root / "include/math_functions.h"
    assert (overlay / "crt/host_config.h").resolve() == root / "include/crt/host_config.h"
    patched = (overlay / "crt/math_functions.h").read_text()
    assert not (overlay / "crt/math_functions.h").is_symlink()
    assert patched.count("__THROW") == 5
    assert "rsqrtf(float x) __THROW;" in patched and "rsqrt(double a) __THROW);" in patched


def test_other_versions_get_no_overlay(tmp_path):
    root = _toolkit(tmp_path / "cuda", "12.8")
    proc = _run(tmp_path, {"CUDA_HOME": str(root)})
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["how"] == "$CUDA_HOME" and info["version"] == "12.8"
    assert info["overlay"] is None and not (tmp_path / "overlay").exists()
    assert info["host_needs_overlay"] is False


def test_a_header_the_patch_no_longer_matches_is_an_error(tmp_path):
    root = _toolkit(tmp_path / "cuda", "13.0", math_functions="double rsqrt(double);\n")
    proc = _run(tmp_path, {"CUDA_PATH": str(root)})
    assert proc.returncode != 0
    assert "no longer matches the rsqrt patch" in proc.stderr


def test_cuda_path_without_nvcc_is_a_warning_and_the_search_goes_on(tmp_path):
    root = _toolkit(tmp_path / "cuda", "13.0")
    proc = _run(tmp_path, {"CUDA_PATH": str(tmp_path / "nothing"), "CUDA_HOME": str(root)})
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["how"] == "$CUDA_HOME"
    assert info["warnings"] == [
        f"$CUDA_PATH={tmp_path / 'nothing'} has no bin/nvcc; looking elsewhere"
    ]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", *sys.argv[1:]]))


def test_toolkit_path_is_the_only_place_looked_at(tmp_path):
    # The toolchain extension's toolkit_path: the variables' toolkit is not taken instead.
    chosen = _toolkit(tmp_path / "chosen", "12.8")
    other = _toolkit(tmp_path / "other", "13.0")
    proc = _run(tmp_path, {"CUDA_PATH": str(other)}, "--toolkit-path", str(chosen))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["root"], info["how"], info["version"]) == (str(chosen), "toolkit_path", "12.8")

    proc = _run(tmp_path, {"CUDA_PATH": str(other)}, "--toolkit-path", str(tmp_path / "nothing"))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["root"] is None and info["nvcc"] is None
    assert info["warnings"] == [f"toolkit_path {tmp_path / 'nothing'} has no bin/nvcc"]
