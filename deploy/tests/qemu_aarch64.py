"""Run linux-aarch64 programs on this x86-64 machine under qemu-aarch64 (user mode).

Environment (set by the Bazel rules):
  AARCH64_SYSROOT_LD   the arm64 sysroot's lib/ld-linux-aarch64.so.1; its
                       libraries (glibc, libstdc++, libgomp) are the target's
  AARCH64_LIBTORCH_LIB the aarch64 LibTorch lib folder (or a file in it), in
                       pip's layout: CUDA runtime libraries in ../../nvidia/*/lib

Debian 12's qemu 7.2 passes the host's x86 /proc/cpuinfo through, and
LibTorch's cpuinfo then crashes in its ARM parser. qemu's -L PREFIX also
redirects /proc and /sys lookups, so the prefix holds an ARM cpuinfo and the
cpu lists besides the sysroot's libraries. Nothing runs through binfmt_misc:
every program is started as `qemu-aarch64-static ... PROGRAM`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import absolute_from_env

QEMU = "qemu-aarch64-static"

# Neoverse-N1 (Graviton2, Ampere Altra): armv8.2-a with NEON and dot
# product, no SVE. The features are the ones qemu's model of it reports.
CPU = "neoverse-n1"
_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm \
lrcpc dcpop asimddp ssbs
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1

"""


def qemu() -> str:
    path = shutil.which(QEMU)
    if path is None:
        # Not a skip: ARM64 support is proven on every run or reported broken.
        pytest.fail(
            f"{QEMU} not found: tools/bazel installs it when run as root on Debian "
            "(apt-get install qemu-user-static)"
        )
    return path


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


def cuda_lib_dirs() -> list[Path]:
    nvidia = libtorch_lib() / ".." / ".." / "nvidia"
    return sorted(p / "lib" for p in nvidia.iterdir() if (p / "lib").is_dir())


def make_prefix(where: Path) -> Path:
    """A qemu -L prefix: the arm64 sysroot's lib and usr, an ARM /proc/cpuinfo and cpu lists."""
    # The sysroot is the folder above the dynamic linker's real path that
    # holds usr/lib/aarch64-linux-gnu: the repository itself, whole.
    ld = Path(os.path.realpath(_env_path("AARCH64_SYSROOT_LD")))
    sysroot = next(
        (p for p in ld.parents if (p / "usr" / "lib" / "aarch64-linux-gnu").is_dir()), None
    )
    if sysroot is None:
        pytest.fail(f"{ld} is not inside an arm64 sysroot")
    prefix = where / "qemu-prefix"
    (prefix / "proc").mkdir(parents=True)
    cpu = prefix / "sys" / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True)
    for name in ("lib", "usr"):
        (prefix / name).symlink_to(sysroot / name)
    (prefix / "proc" / "cpuinfo").write_text(_CPUINFO)
    for name in ("possible", "present", "online"):
        (cpu / name).write_text("0\n")
    return prefix


def command(prefix: Path, argv: list[str], cpu: str = CPU) -> list[str]:
    # qemu exits 1 without a word when the program is missing.
    if argv and not os.path.isfile(argv[0]):
        pytest.fail(f"{argv[0]} does not exist")
    return [qemu(), "-cpu", cpu, "-L", str(prefix), *argv]


def emulator(prefix: Path, cpu: str = CPU) -> str:
    """The command line for run.sh's MY_OPS_EMULATOR."""
    return " ".join(command(prefix, [], cpu))


def environment(tmpdir: Path) -> dict[str, str]:
    """A minimal environment: the aarch64 LibTorch and CUDA runtime on the library path."""
    dirs = [libtorch_lib(), *cuda_lib_dirs()]
    tmpdir.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": "/usr/bin:/bin",
        "TMPDIR": str(tmpdir),
        "LD_LIBRARY_PATH": os.pathsep.join(str(d) for d in dirs),
    }
