"""deploy/qemu/qemu.py for the tests: paths from the environment, failures as test failures.

Environment (set by the Bazel rules):
  AARCH64_SYSROOT_LD   the arm64 sysroot's lib/ld-linux-aarch64.so.1
  AARCH64_LIBTORCH_LIB the aarch64 LibTorch lib folder (or a file in it), in
                       pip's layout: CUDA runtime libraries in ../../nvidia/*/lib
A missing qemu fails the tests rather than skipping them: linux-aarch64 is
proven on every run, or reported broken.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import absolute_from_env

from deploy.qemu import qemu

CPU = qemu.CPU


def _env_path(name: str) -> Path:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"environment variable {name} is not set")
    path = Path(absolute_from_env(value))
    if not path.exists():
        pytest.fail(f"{name}={value} does not exist")
    return path


def libtorch_lib() -> Path:
    path = _env_path("AARCH64_LIBTORCH_LIB")
    return path if path.is_dir() else path.parent


def make_prefix(where: Path) -> Path:
    try:
        return qemu.make_prefix(qemu.sysroot_of(_env_path("AARCH64_SYSROOT_LD")), where)
    except qemu.QemuError as e:
        pytest.fail(str(e))


def command(prefix: Path, argv: list[str], cpu: str = CPU) -> list[str]:
    try:
        return qemu.command(prefix, argv, cpu)
    except qemu.QemuError as e:
        pytest.fail(str(e))


def emulator(prefix: Path, cpu: str = CPU) -> str:
    """The command line for run.sh's MY_OPS_EMULATOR."""
    return " ".join(command(prefix, [], cpu))


def environment(tmpdir: Path) -> dict[str, str]:
    """A minimal environment: the aarch64 LibTorch and CUDA runtime on the library path."""
    tmpdir.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": "/usr/bin:/bin",
        "TMPDIR": str(tmpdir),
        "LD_LIBRARY_PATH": qemu.library_path(libtorch_lib()),
    }


def run(prefix: Path, argv: list[str], tmpdir: Path, cpu: str = CPU) -> subprocess.CompletedProcess:
    """Runs a linux-aarch64 program under qemu (core `cpu`) with `environment(tmpdir)`, output
    captured."""
    return subprocess.run(
        command(prefix, argv, cpu),
        env=environment(tmpdir),
        capture_output=True,
        text=True,
        timeout=600,
    )
