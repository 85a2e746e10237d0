"""What a run of a package costs the machine: peak RSS, start to first result, libraries mapped.

The footprint table of //deploy:bench. Each variant is one command line started `starts` times,
the variants in turns; a start is timed from fork to exit and its peak RSS is the kernel's
(wait4's ru_maxrss). The libraries are what the dynamic loader initialised in one more start
with LD_DEBUG=files, dlopen()ed ones included.

The variants: the C++ loader as built (LibTorch's libtorch_cpu.so and libc10.so only), and the
same loader with libtorch.so preloaded, which is what it linked before and what any program
linked to libtorch.so loads: libtorch_cuda.so and the CUDA stack behind it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Peak RSS of a CPU run of the default model, and its start to first result against the loader
# with libtorch.so, measured in the same run.
PEAK_RSS_TARGET_MB = 135
START_TARGET = 0.6

# LibTorch's libraries that only CUDA code needs; with the nvidia/ wheels' libraries, the CUDA
# stack of a CPU run.
TORCH_CUDA_LIBRARIES = frozenset(
    {
        "libtorch.so",
        "libtorch_cuda.so",
        "libc10_cuda.so",
        "libtorch_cuda_linalg.so",
        "libtorch_nvshmem.so",
        "libcaffe2_nvrtc.so",
    }
)


@dataclass
class Footprint:
    name: str
    walls: list[float]
    peak_rss: list[int]  # bytes
    libraries: list[str]  # paths, in load order
    needed_by: dict[str, set[str]]  # file name -> the names of the libraries that NEED it

    def cuda_libraries(self) -> list[str]:
        return [p for p in self.libraries if is_cuda_library(p)]


def is_cuda_library(path: str) -> bool:
    name = os.path.basename(path)
    return name in TORCH_CUDA_LIBRARIES or f"{os.sep}nvidia{os.sep}" in path


def loaded_libraries(stderr: str) -> list[str]:
    """The libraries in a LD_DEBUG=files trace, in the order they were initialised."""
    found = []
    for line in stderr.splitlines():
        _, sep, path = line.partition("calling init: ")
        if sep:
            found.append(path.strip())
    return found


def needed_by(stderr: str) -> dict[str, set[str]]:
    """Which libraries NEED each library, from a LD_DEBUG=files trace's "file=X; needed by Y"."""
    found: dict[str, set[str]] = {}
    for line in stderr.splitlines():
        _, sep, rest = line.partition("file=")
        name, sep2, by = rest.partition(" [0];  needed by ")
        if sep and sep2:
            found.setdefault(name.strip(), set()).add(os.path.basename(by.split(" [")[0]))
    return found


# Runs argv[1:] and prints its wall seconds and peak RSS in kilobytes. A child's ru_maxrss counts
# what it inherited before exec(): started from this small interpreter (-S: no site packages),
# not from the bench's, which holds torch, the figure is the program's own.
_MEASURE = """
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - t0, usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def _start(cmd: Sequence[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds from fork to exit, and peak RSS in bytes, of one run of cmd."""
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _MEASURE, *cmd],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        check=True,
    )
    wall, rss_kb, status = proc.stdout.split()[-3:]
    if status != "0":
        raise RuntimeError(f"{cmd[0]} exited with {status}: {' '.join(cmd)}")
    return float(wall), int(rss_kb) * 1024  # Linux reports kilobytes


def measure(
    variants: Sequence[tuple[str, Sequence[str], dict[str, str]]], starts: int
) -> list[Footprint]:
    """`starts` timed runs of each (name, command, environment), in turns, after one untimed run
    each that warms the page cache and lists the libraries."""
    results = []
    for name, cmd, env in variants:
        proc = subprocess.run(
            list(cmd), env=env | {"LD_DEBUG": "files"}, capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{name}: exit {proc.returncode}: {proc.stderr[-2000:]}")
        results.append(
            Footprint(name, [], [], loaded_libraries(proc.stderr), needed_by(proc.stderr))
        )
    for _ in range(starts):
        for (_, cmd, env), result in zip(variants, results, strict=True):
            wall, rss = _start(cmd, env)
            result.walls.append(wall)
            result.peak_rss.append(rss)
    return results


def libtorch_preload(libraries: Sequence[str]) -> str:
    """libtorch.so of the LibTorch whose libtorch_cpu.so a run loaded."""
    cpu = [p for p in libraries if os.path.basename(p) == "libtorch_cpu.so"]
    if not cpu:
        raise RuntimeError("the run loaded no libtorch_cpu.so")
    path = Path(cpu[0]).with_name("libtorch.so")
    if not path.exists():
        raise RuntimeError(f"{path} does not exist")
    return str(path)


def _mb(values: Sequence[int]) -> str:
    return f"{statistics.median(values) / 1e6:.0f} MB (max {max(values) / 1e6:.0f})"


def _library_summary(f: Footprint) -> str:
    cuda = f.cuda_libraries()
    size = sum(os.path.getsize(p) for p in cuda if os.path.exists(p))
    return f"{len(f.libraries)} libraries, {len(cuda)} of CUDA ({size / 1e6:.0f} MB of files)"


def footprint_rows(
    results: Sequence[Footprint], baseline: Footprint
) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """Table rows (measurement, value, ratio, target) and the targets missed, judged on
    results[0] (the loader as built) against `baseline`. The CUDA libraries that libtorch_cpu.so
    NEEDs itself (in LibTorch's CUDA build: the CUDA runtime, CUPTI) are the ones a CPU run may
    load; a CPU-only LibTorch has none."""
    ours = results[0]
    allowed_cuda = {n for n, by in ours.needed_by.items() if by == {"libtorch_cpu.so"}}
    rows, missed = [], []
    for f in results:
        start = statistics.median(f.walls)
        ratio = start / statistics.median(baseline.walls)
        rows.append((f"{f.name}: peak RSS (median)", _mb(f.peak_rss), "",
                     f"<= {PEAK_RSS_TARGET_MB} MB" if f is ours else ""))  # fmt: skip
        rows.append((f"{f.name}: start to first result (median)", f"{start * 1e3:.0f} ms",
                     "" if f is baseline else f"{ratio:.2f}x", f"<= {START_TARGET}x"
                     if f is ours else ""))  # fmt: skip
        rows.append((f"{f.name}: libraries", _library_summary(f), "", ""))
    extra = sorted({os.path.basename(p) for p in ours.cuda_libraries()} - allowed_cuda)
    rows.append((f"{ours.name}: CUDA libraries beyond libtorch_cpu.so's own",
                 ", ".join(extra) or "none", "", "none"))  # fmt: skip
    peak = statistics.median(ours.peak_rss) / 1e6
    if peak > PEAK_RSS_TARGET_MB:
        missed.append(f"peak RSS {peak:.0f} MB > {PEAK_RSS_TARGET_MB} MB")
    start_ratio = statistics.median(ours.walls) / statistics.median(baseline.walls)
    if start_ratio > START_TARGET:
        missed.append(f"start to first result {start_ratio:.2f}x > {START_TARGET}x")
    if extra:
        missed.append("a CPU run loads CUDA libraries: " + ", ".join(extra))
    return rows, missed
