"""The x86-64 and linux-aarch64 bundles side by side: sizes, start-up and per-call latency.

  tools/bazel run //deploy:bench_aarch64 [-- --runs 50 --starts 3]

The aarch64 loader runs under qemu-aarch64 (user mode) on this x86-64
machine, so its times are emulated: they show that the bundle works and what
emulation costs, not how fast an ARM64 machine is. Both columns come from the
same run; compare them as a ratio, never across runs.

Paths come from the environment, set by the Bazel target: X86_BUNDLE_TAR,
AARCH64_BUNDLE_TAR, X86_LIBTORCH_LIB, AARCH64_LIBTORCH_LIB (a file in each
LibTorch lib folder) and AARCH64_SYSROOT_LD.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from deploy.qemu import qemu

_P50 = re.compile(r"p50 ([0-9.]+) ms p99 ([0-9.]+) ms")


def _env_file(name: str) -> Path:
    return qemu.env_file("bench_aarch64", name)


class Side:
    """One bundle, unpacked, and how to start its loader."""

    def __init__(self, name: str, tar: Path, lib: Path, where: Path, prefix: Path | None) -> None:
        self.name = name
        self.tar_bytes = tar.stat().st_size
        with tarfile.open(tar) as t:
            t.extractall(where / name, filter="data")
        self.dir = where / name / "my_ops_bundle"
        self.prefix = prefix
        self.env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(where)}
        self.env["LD_LIBRARY_PATH"] = qemu.library_path(lib) if prefix else str(lib)
        self.out = where / f"{name}.pt"

    def argv(self, *args: str) -> list[str]:
        argv = [str(self.dir / "loader"), *args]
        return qemu.command(self.prefix, argv) if self.prefix else argv

    def run_args(self) -> list[str]:
        d = self.dir
        return [
            "--ops", str(d / "libmy_ops.so"),
            "--package", str(d / "model.pt2"),
            "--input", str(d / "sample_input.pt"),
            "--expect", str(d / "expected_output.pt"),
            "--output", str(self.out),
        ]  # fmt: skip

    def median_wall(self, argv: list[str], starts: int) -> float:
        walls = []
        for _ in range(starts):
            t0 = time.perf_counter()
            subprocess.run(argv, env=self.env, check=True, capture_output=True)
            walls.append(time.perf_counter() - t0)
        return statistics.median(walls)

    def per_call(self, runs: int) -> tuple[float, float]:
        proc = subprocess.run(
            self.argv(*self.run_args(), "--bench", str(runs)),
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )
        m = _P50.search(proc.stdout + proc.stderr)
        if m is None:
            sys.exit(f"bench_aarch64: error: no p50/p99 in the {self.name} loader's output")
        return float(m.group(1)), float(m.group(2))


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def main() -> int:
    p = argparse.ArgumentParser(prog="bench_aarch64", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=50, help="calls per --bench measurement")
    p.add_argument("--starts", type=int, default=3, help="process starts per median")
    args = p.parse_args()
    if args.runs < 1 or args.starts < 1:
        p.error("--runs and --starts must be >= 1")
    try:
        qemu.find_qemu()
        sysroot = qemu.sysroot_of(_env_file("AARCH64_SYSROOT_LD"))
    except qemu.QemuError as e:
        sys.exit(f"bench_aarch64: error: {e}")
    with tempfile.TemporaryDirectory(prefix="bench_aarch64.") as tmp:
        where = Path(tmp)
        prefix = qemu.make_prefix(sysroot, where)
        sides = [
            Side(
                "linux-x86_64",
                _env_file("X86_BUNDLE_TAR"),
                _env_file("X86_LIBTORCH_LIB").parent,
                where,
                None,
            ),
            Side(
                "linux-aarch64",
                _env_file("AARCH64_BUNDLE_TAR"),
                _env_file("AARCH64_LIBTORCH_LIB").parent,
                where,
                prefix,
            ),
        ]
        rows: list[tuple[str, list[str], str]] = []
        for f in ("bundle .tar.gz", "loader", "libmy_ops.so", "model.pt2"):
            sizes = [
                s.tar_bytes if f.endswith(".tar.gz") else (s.dir / f).stat().st_size for s in sides
            ]
            rows.append((f, [_mb(n) for n in sizes], f"{sizes[1] / sizes[0]:.2f}"))
        print(f"measuring start-up ({args.starts} starts each) ...", file=sys.stderr, flush=True)
        starts = [s.median_wall(s.argv("--help"), args.starts) for s in sides]
        rows.append(("start-up (loader --help)", [f"{t:.2f} s" for t in starts], _r(starts)))
        firsts = [s.median_wall(s.argv(*s.run_args()), args.starts) for s in sides]
        rows.append(("start to first result", [f"{t:.2f} s" for t in firsts], _r(firsts)))
        print(f"measuring per-call latency ({args.runs} calls each) ...", file=sys.stderr)
        calls = [s.per_call(args.runs) for s in sides]
        rows.append(("per call p50", [f"{c[0]:.3f} ms" for c in calls], _r([c[0] for c in calls])))
        rows.append(("per call p99", [f"{c[1]:.3f} ms" for c in calls], _r([c[1] for c in calls])))
    print("| | linux-x86_64 (native) | linux-aarch64 (qemu, emulated) | aarch64 / x86-64 |")
    print("|---|---|---|---|")
    for name, values, ratio in rows:
        print(f"| {name} | {values[0]} | {values[1]} | {ratio} |")
    return 0


def _r(values: list[float]) -> str:
    return f"{values[1] / values[0]:.1f}x" if values[0] > 0 else "n/a"


if __name__ == "__main__":
    sys.exit(main())
