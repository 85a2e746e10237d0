"""Run linux-aarch64 programs on an x86-64 machine under qemu-aarch64 (user mode).

Used by the aarch64 tests and //deploy:bench_aarch64. Debian 12's qemu 7.2
passes the host's x86 /proc/cpuinfo through, and LibTorch's cpuinfo then
crashes in its ARM parser. qemu's -L PREFIX also redirects /proc and /sys
lookups, so the prefix holds an ARM cpuinfo and the cpu lists besides the
arm64 sysroot's libraries (glibc, libstdc++, libgomp). Nothing goes through
binfmt_misc: every program is started as `qemu-aarch64-static ... PROGRAM`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

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


class QemuError(Exception):
    """qemu or the files it needs are missing; the message says what to do."""


def env_file(prog: str, name: str) -> Path:
    """The file environment variable `name` names (set by a Bazel target), or one line naming
    it and exit 1 from `prog`."""
    value = os.environ.get(name)
    if not value:
        sys.exit(f"{prog}: error: {name} is not set (run it with tools/bazel run)")
    path = Path(os.path.abspath(value))
    if not path.exists():
        sys.exit(f"{prog}: error: {name}={value} does not exist")
    return path


def find_qemu() -> str:
    path = shutil.which(QEMU)
    if path is None:
        raise QemuError(
            f"{QEMU} not found: tools/bazel installs it when run as root on Debian "
            "(apt-get install qemu-user-static)"
        )
    return path


def sysroot_of(ld: str | os.PathLike) -> Path:
    """The arm64 sysroot holding `ld` (its lib/ld-linux-aarch64.so.1), as a real folder."""
    real = Path(os.path.realpath(ld))
    for folder in real.parents:
        if (folder / "usr" / "lib" / "aarch64-linux-gnu").is_dir():
            return folder
    raise QemuError(f"{real} is not inside an arm64 sysroot")


def make_prefix(sysroot: Path, where: Path) -> Path:
    """A qemu -L prefix in `where`: the sysroot's lib and usr, an ARM cpuinfo and cpu lists."""
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
    """argv under qemu. qemu exits 1 without a word when the program is missing: checked here."""
    if argv and not os.path.isfile(argv[0]):
        raise QemuError(f"{argv[0]} does not exist")
    return [find_qemu(), "-cpu", cpu, "-L", str(prefix), *argv]


def library_path(libtorch_lib: Path) -> str:
    """LD_LIBRARY_PATH for the aarch64 LibTorch in pip's layout: torch/lib and nvidia/*/lib."""
    nvidia = libtorch_lib / ".." / ".." / "nvidia"
    dirs = [libtorch_lib]
    if nvidia.is_dir():
        dirs += sorted(p / "lib" for p in nvidia.iterdir() if (p / "lib").is_dir())
    return os.pathsep.join(str(d) for d in dirs)
