#!/usr/bin/env python3
"""gpu_check: build libmy_ops.so without Bazel and check it end to end on one machine.

usage: tools/gpu_check/gpu_check.py OUT_DIR [--cpu-only] [options]

Meant for a GPU machine that has Python, torch, a CUDA toolkit and g++, but no
Bazel and no network. Uses only the standard library and the torch it runs
with (that torch's headers, libraries and C++ ABI; the project's lock does not
apply). One run does everything and keeps going after a failure:

  build   compile ops/my_ops_sources.txt (the list //ops:my_ops_sources_test
          keeps equal to the Bazel target) with g++ and nvcc in parallel, link
          libmy_ops.so. nvcc 13.0 with glibc >= 2.42 gets the same rsqrt header
          overlay as tools/cuda. The C++ loader compiles alongside.
  tests   python -m pytest python/tests on cuda (cpu with --cpu-only), with
          MY_OPS_LIBRARY set to the new library. Without hypothesis,
          test_properties.py is skipped and the summary says so.
  export  deploy/export.py --device cuda, then torch._inductor.aoti_load_package
          on sample_input.pt compared with expected_output.pt.
  loader  deploy/loader/*.cpp (built against this torch) runs the package with
          --expect expected_output.pt; its output is compared again in Python.
  bench   ops/bench.py on 256 MiB tensors; bandwidth relative to
          torch.clone (a device-to-device copy) timed in the same run. Targets
          on GPU: identity_conv and fused_bias_gelu >= 0.8, fused_add_rms_norm
          >= 0.7. Not checked with --cpu-only.

Output: progress on stdout, ending in one verdict line
  gpu_check: PASS build=ok tests=412 passed/0 failed export=ok aoti_parity=ok ...
and in OUT_DIR (at most 7 files): verdict.txt, summary.json, build.log,
tests.log, export.log, loader.log, bench.txt. Logs are truncated to their
first and last lines. A failing step's log tail is also printed on stdout.

Time: no step starts after --budget seconds; a running step is killed at
--budget + 30 s, so a run ends within about 8 minutes by default. Temporary
files (objects, library, package) go to a work folder under $TEST_TMPDIR or
$TMPDIR, removed at the end unless --keep-work.

Exit status: 0 PASS, 1 FAIL, 2 bad usage.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NoReturn, TypeVar

# Not resolved: under Bazel the runfiles tree (the declared data) is the source tree.
ROOT = Path(os.path.abspath(__file__)).parents[2]
SOURCES_FILE = "ops/my_ops_sources.txt"
STEPS = ("build", "tests", "export", "loader", "bench")
# Batch sizes the loader step runs the exported package at, twice each in one process.
LOADER_BATCHES = (1, 3)
SKIPPABLE = ("tests", "export", "loader", "bench")
LOG_FILES = {
    "build": "build.log",
    "tests": "tests.log",
    "export": "export.log",
    "loader": "loader.log",
    "bench": "bench.txt",
}
# Each log keeps this much of its start and of its end; the middle is dropped.
LOG_HEAD = 40_000
LOG_TAIL = 160_000
FAIL_TAIL_LINES = 40
KILL_GRACE_S = 30
# Bandwidth targets on GPU, as fractions of torch.clone's (copy) bandwidth.
BW_TARGETS = {"identity_conv": 0.8, "fused_bias_gelu": 0.8, "fused_add_rms_norm": 0.7}
BW_NAMES = {"identity_conv": "identity", "fused_bias_gelu": "gelu", "fused_add_rms_norm": "rms"}
PARITY_ATOL = 1e-4
PARITY_RTOL = 1e-4


def _die_usage(msg: str) -> NoReturn:
    print(f"gpu_check: error: {msg} (see --help)", file=sys.stderr)
    sys.exit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        _die_usage(message)


def _positive(kind: type):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(
        prog="gpu_check",
        description=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s OUT_DIR [--cpu-only] [options]",
    )
    p.add_argument("out_dir", metavar="OUT_DIR", help="where the summary and logs go")
    p.add_argument(
        "--cpu-only",
        action="store_true",
        help="no GPU and no nvcc: build the CPU kernels only, test and export on cpu, "
        "small CPU bench without targets",
    )
    p.add_argument(
        "--archs",
        default="sm_90",
        help="comma-separated CUDA architectures (default: sm_90, H100/H200); "
        "PTX for the newest is added",
    )
    p.add_argument(
        "--tests-subset",
        metavar="EXPR",
        help="only tests matching this pytest -k expression",
    )
    p.add_argument(
        "--skip",
        default="",
        metavar="STEP,...",
        help=f"steps to leave out: {','.join(SKIPPABLE)}",
    )
    p.add_argument(
        "--budget",
        type=_positive(float),
        default=450.0,
        metavar="SECONDS",
        help="start no step after this many seconds (default: 450); a running step "
        f"is killed {KILL_GRACE_S} s later",
    )
    p.add_argument(
        "--bench-rows", type=_positive(int), metavar="N", help="default: 65536 (cpu: 4096)"
    )
    p.add_argument(
        "--bench-cols", type=_positive(int), default=1024, metavar="N", help="default: 1024"
    )
    p.add_argument(
        "--bench-compile",
        action="store_true",
        help="also time torch.compile baselines (adds their compile time)",
    )
    p.add_argument(
        "--jobs",
        type=_positive(int),
        default=os.cpu_count() or 2,
        metavar="N",
        help="parallel compile jobs (default: CPU count)",
    )
    p.add_argument(
        "--keep-work",
        action="store_true",
        help="keep the work folder (library, objects, package) and print its path",
    )
    args = p.parse_args(argv)
    args.skip = [s for s in args.skip.split(",") if s]
    for s in args.skip:
        if s not in SKIPPABLE:
            p.error(f"--skip: unknown step {s!r} (choose from {', '.join(SKIPPABLE)})")
    args.archs = [a.strip() for a in args.archs.split(",") if a.strip()]
    for a in args.archs:
        if not re.fullmatch(r"sm_\d+a?", a):
            p.error(f"--archs: expected names like sm_90, got {a!r}")
    if not args.archs:
        p.error("--archs: empty")
    if args.bench_rows is None:
        args.bench_rows = 4096 if args.cpu_only else 65536
    # Under `bazel run` the cwd is the runfiles tree; a relative OUT_DIR means the user's cwd.
    out = Path(os.environ.get("BUILD_WORKING_DIRECTORY", "")) / args.out_dir
    if out.exists() and not out.is_dir():
        p.error(f"OUT_DIR {out} exists and is not a folder")
    args.out_dir = out.resolve()
    return args


# ---------------------------------------------------------------------------
# Results and output files.


@dataclass
class Step:
    name: str
    status: str = "not run"  # ok, fail, skipped, not run
    seconds: float = 0.0
    detail: str = ""
    facts: dict = field(default_factory=dict)


class Killed(Exception):
    """SIGTERM/SIGINT: stop, but still write the summary."""


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget
        self.hard_deadline = self.deadline + KILL_GRACE_S
        self.steps = {name: Step(name) for name in STEPS}
        self.out = args.out_dir
        self.children: set[subprocess.Popen] = set()
        self.facts: dict = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)

    # -- subprocesses -------------------------------------------------------

    def run(
        self, cmd: list[str], log: Path, env: dict[str, str], cwd: Path = ROOT
    ) -> tuple[int, str]:
        """Runs cmd with its output appended to log; returns (exit status, its output)."""
        timeout = self.hard_deadline - time.monotonic()
        with open(log, "ab") as f:
            f.write(f"$ {shlex.join(cmd)}\n".encode())
            f.flush()
            start = f.tell()
            if timeout <= 0:
                f.write(b"gpu_check: not started, time budget used up\n")
                return 124, "not started, time budget used up"
            proc = subprocess.Popen(
                cmd,
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
            self.children.add(proc)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill(proc)
                rc = 124
                f.write(f"\ngpu_check: killed after {timeout:.0f} s (time budget)\n".encode())
            finally:
                self.children.discard(proc)
        with open(log, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        return rc, text

    def capture(self, cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
        """Runs a short command (build jobs, probes) and returns (status, output)."""
        timeout = max(1.0, self.hard_deadline - time.monotonic())
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        self.children.add(proc)
        try:
            out, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            self.kill(proc)
            out, _ = proc.communicate()
            out += f"\ngpu_check: killed after {timeout:.0f} s (time budget)\n".encode()
            rc = 124
        finally:
            self.children.discard(proc)
        return rc, out.decode(errors="replace")

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        # Each child leads its own process group, so compilers and test
        # workers it started go with it.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()

    def kill_children(self) -> None:
        for proc in list(self.children):
            self.kill(proc)

    # -- summary ------------------------------------------------------------

    def verdict(self, final: bool) -> tuple[bool, str]:
        s = self.steps
        failed = [st.name for st in s.values() if st.status == "fail"]
        not_run = [st.name for st in s.values() if st.status == "not run"]
        ok = final and not failed and not not_run
        parts = [f"build={s['build'].status}"]
        t = s["tests"]
        if "passed" in t.facts:
            tests = f"{t.facts['passed']} passed/{t.facts['failed'] + t.facts['errors']} failed"
            if t.facts["skipped"]:
                tests += f"/{t.facts['skipped']} skipped"
            if t.facts.get("partial"):
                tests += f" ({', '.join(t.facts['partial'])})"
            if t.status == "fail" and t.detail:
                tests += f" ({t.detail})"
            parts.append(f"tests={tests}")
        else:
            parts.append(f"tests={t.detail or t.status}")
        e = s["export"]
        parts.append(f"export={e.facts.get('export', e.status)}")
        parts.append(f"aoti_parity={e.facts.get('parity', e.status)}")
        lo = s["loader"]
        parts.append(f"loader_parity={lo.facts.get('parity', lo.status)}")
        b = s["bench"]
        parts.append(f"bench={b.detail or b.status}")
        head = "PASS" if ok else ("FAIL" if final else "RUNNING")
        line = f"gpu_check: {head} {' '.join(parts)} in {self.elapsed():.0f} s"
        if failed or (final and not_run):
            line += " [failed: " + ",".join(failed + [f"{n}(not run)" for n in not_run]) + "]"
        return ok, line

    def write_summary(self, final: bool) -> str:
        ok, line = self.verdict(final)
        total = self.elapsed()
        summary = {
            "verdict": "PASS" if ok else ("FAIL" if final else "RUNNING"),
            "line": line,
            "mode": "cpu-only" if self.args.cpu_only else "cuda",
            "seconds": round(total, 1),
            "budget_s": self.args.budget,
            "steps": {
                name: dict(
                    asdict(st),
                    seconds=round(st.seconds, 1),
                    fraction_of_total=round(st.seconds / total, 3) if total else 0.0,
                    log=LOG_FILES[name],
                )
                for name, st in self.steps.items()
            },
            "environment": self.facts,
        }
        tmp = self.out / ".summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        os.replace(tmp, self.out / "summary.json")
        (self.out / "verdict.txt").write_text(line + "\n")
        return line


def _truncate_into(src: Path, dst: Path) -> None:
    if not src.exists():
        return
    size = src.stat().st_size
    with open(src, "rb") as f:
        if size <= LOG_HEAD + LOG_TAIL:
            data = f.read()
        else:
            head = f.read(LOG_HEAD)
            f.seek(size - LOG_TAIL)
            tail = f.read()
            dropped = size - LOG_HEAD - LOG_TAIL
            data = head + f"\n\n[... {dropped} bytes left out ...]\n\n".encode() + tail
    dst.write_bytes(data)


def _tail(text: str, lines: int = FAIL_TAIL_LINES) -> str:
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join("    " + line[:300] for line in kept)


# ---------------------------------------------------------------------------
# Environment: torch, CUDA toolkit, glibc.


def _child_env(work: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # The parent's sys.path carries torch (under Bazel: the locked wheel), and
    # the checkout's python/ must win over any other my_ops.
    paths = [str(ROOT / "python")] + [p for p in sys.path if p and Path(p).is_dir()]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    tmp = work / "tmp"
    env["TMPDIR"] = str(tmp)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")
    env["TRITON_CACHE_DIR"] = str(tmp / "triton")
    if not env.get("HOME"):
        # Bazel test sandboxes may leave HOME unset; caches must land somewhere writable.
        env["HOME"] = str(work / "home")
        (work / "home").mkdir(exist_ok=True)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


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


# ---------------------------------------------------------------------------
# Step 1: build.


@dataclass
class Sources:
    cpp: list[str] = field(default_factory=list)
    cu: list[str] = field(default_factory=list)
    hdr: list[str] = field(default_factory=list)
    cpu_copt: list[str] = field(default_factory=list)
    nvcc_copt: list[str] = field(default_factory=list)
    linkopt: list[str] = field(default_factory=list)


def read_sources(path: Path) -> Sources:
    src = Sources()
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        kind, _, value = line.partition(" ")
        if not value or not hasattr(src, kind):
            raise RuntimeError(f"{path}:{n}: cannot parse {raw!r}")
        getattr(src, kind).append(value.strip())
        if kind in ("cpp", "cu", "hdr") and not (ROOT / value.strip()).exists():
            raise RuntimeError(f"{path}:{n}: {value.strip()} does not exist")
    if not src.cpp:
        raise RuntimeError(f"{path}: no cpp sources")
    return src


def _gencode(archs: list[str]) -> list[str]:
    nums = sorted((a[3:] for a in archs), key=lambda n: int(n.rstrip("a")))
    flags = [f"-gencode=arch=compute_{n},code=sm_{n}" for n in nums]
    # PTX for the newest architecture lets newer GPUs JIT-compile the kernels.
    flags.append(f"-gencode=arch=compute_{nums[-1]},code=compute_{nums[-1]}")
    return flags


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


def _isystem(include: Path | None) -> list[str]:
    # g++ searches /usr/include anyway, and naming it again with -isystem
    # moves it before libstdc++'s headers, whose #include_next then fails.
    if include is None or include.resolve() in (Path("/usr/include"), Path("/usr/local/include")):
        return []
    return ["-isystem", str(include)]


def loader_command(tc: Toolchain, binary: Path, cuda: bool) -> list[str]:
    lib = tc.torch_dir / "lib"
    # Without them the compile fails on sodium.h or nlohmann/json.hpp, which
    # step_loader explains.
    sodium = libsodium()
    sodium_include = _isystem(sodium[0] if sodium else None)
    sodium_lib = [str(sodium[1])] if sodium else []
    json_include = _isystem(nlohmann_json())
    nvidia = []
    for d in nvidia_lib_dirs():
        nvidia.append(f"-Wl,-rpath-link,{d}")
    libs = ["-ltorch", "-ltorch_cpu", "-lc10"]
    if cuda:
        libs += ["-ltorch_cuda", "-lc10_cuda"]
    return [
        tc.cxx,
        *tc.cxx_flags(),
        *sodium_include,
        *json_include,
        "-O2",
        "-pthread",
        # The loader's units include each other as "deploy/loader/x.h".
        f"-I{ROOT}",
        *sorted(str(p) for p in (ROOT / "deploy/loader").glob("*.cpp")),
        *sodium_lib,
        "-o",
        str(binary),
        f"-L{lib}",
        # DT_RPATH (not RUNPATH) also applies to the libraries the loader
        # opens, so the package's and the op library's torch dependencies
        # resolve to this torch.
        "-Wl,--disable-new-dtags",
        f"-Wl,-rpath,{lib}",
        *nvidia,
        # Keep torch_cuda although the loader calls nothing in it directly: a
        # CUDA package needs it registered before it loads.
        "-Wl,--no-as-needed",
        *libs,
        "-Wl,--as-needed",
        "-ldl",
    ]


_GPU_PROBE = """\
import json, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
info = {"count": n, "torch_cuda": torch.version.cuda}
if n:
    p = torch.cuda.get_device_properties(0)
    info.update(name=p.name, capability=f"sm_{p.major}{p.minor}", memory_gib=p.total_memory / 2**30)
print("GPU " + json.dumps(info))
"""


def _record_gpu(run: Run, probe: tuple[int, str], lines: _AppendLog) -> None:
    rc, out = probe
    m = re.search(r"^GPU (.*)$", out, re.MULTILINE)
    info = json.loads(m.group(1)) if rc == 0 and m else {"count": 0, "error": out.strip()[-500:]}
    run.facts["gpu"] = info
    lines.append(f"gpu: {info}")
    if not info.get("count"):
        run.say("warning: torch sees no CUDA device; the cuda steps will fail")
        return
    cap = info.get("capability", "")
    newest = max(run.args.archs, key=lambda a: int(a[3:].rstrip("a")))
    if cap not in run.args.archs and int(cap[3:]) < int(newest[3:].rstrip("a")):
        run.say(f"warning: GPU is {cap}, --archs {','.join(run.args.archs)} has no code for it")
    run.say(f"gpu: {info.get('name')} ({cap}, {info.get('memory_gib', 0):.0f} GiB)")


class _AppendLog:
    """A list-like sink whose lines go straight to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, line: str) -> None:
        with open(self.path, "a") as f:
            f.write(line + "\n")

    def text(self) -> str:
        return self.path.read_text() if self.path.exists() else ""


def _timed(run: Run, cmd: list[str]) -> tuple[int, str, float]:
    # Timed inside the pool: queueing for a free worker is not compile time.
    t0 = time.monotonic()
    rc, out = run.capture(cmd)
    return rc, out, time.monotonic() - t0


def step_build(run: Run, step: Step, work: Path, log_path: Path) -> dict:
    """Compiles everything (the loader too) in one pool; returns the loader job's future info."""
    args = run.args
    # Written as it goes, so a run killed mid-build still leaves its log.
    lines = _AppendLog(log_path)
    cuda = not args.cpu_only
    sources = read_sources(ROOT / SOURCES_FILE)
    tc = detect_toolchain(args.cpu_only, work, lines)
    run.facts.update(
        torch=tc.torch_version,
        torch_dir=str(tc.torch_dir),
        cxx11_abi=tc.abi,
        glibc=".".join(map(str, tc.glibc)) if tc.glibc else None,
        python=sys.version.split()[0],
        nvcc=tc.nvcc_version,
        cuda_root=str(tc.cuda_root) if tc.cuda_root else None,
        rsqrt_overlay=tc.overlay is not None,
        cudart=str(tc.cudart) if tc.cudart else None,
        archs=args.archs if cuda else [],
    )
    lines.append("\n".join(f"{k}: {v}" for k, v in run.facts.items()))
    obj_dir = work / "obj"
    obj_dir.mkdir(parents=True, exist_ok=True)

    jobs: list[tuple[str, list[str]]] = []  # (label, command): nvcc first, the slowest
    objects: list[Path] = []
    if cuda:
        cu_flags = [
            "-std=c++20",
            "-x",
            "cu",
            "-ccbin",
            shutil.which(tc.cxx) or tc.cxx,
            "-Xcompiler",
            "-fPIC",
            "-O2",
            # Only skips nvcc's host-compiler version check: on a borrowed
            # machine a g++ newer than nvcc knows would otherwise cost the run.
            "-allow-unsupported-compiler",
            *_gencode(args.archs),
        ]
        if tc.overlay:
            cu_flags.append(f"-I{tc.overlay}")
        cu_flags += [
            f"-D_GLIBCXX_USE_CXX11_ABI={tc.abi}",
            f"-I{ROOT}",
            "-isystem",
            str(tc.torch_dir / "include"),
            "-isystem",
            str(tc.torch_dir / "include/torch/csrc/api/include"),
        ]
        if tc.nvidia_include:
            cu_flags += ["-isystem", str(tc.nvidia_include)]
        cu_flags += sources.nvcc_copt
        for src in sources.cu:
            obj = obj_dir / (src.replace("/", "__") + ".o")
            objects.append(obj)
            jobs.append((src, [tc.nvcc, *cu_flags, "-c", str(ROOT / src), "-o", str(obj)]))
    for src in sources.cpp:
        obj = obj_dir / (src.replace("/", "__") + ".o")
        objects.append(obj)
        jobs.append(
            (
                src,
                [tc.cxx, *tc.cxx_flags(), *sources.cpu_copt, "-c", str(ROOT / src), "-o", str(obj)],
            )
        )
    # Queued last: the library is needed first, and the loader only after
    # the tests and the export, so it finishes in their shadow.
    loader_bin = work / "loader"
    loader_label = "deploy/loader/*.cpp (loader binary)"
    if "loader" not in args.skip and "export" not in args.skip:
        jobs.append((loader_label, loader_command(tc, loader_bin, cuda)))

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
    # Asked in a child so this process never holds a CUDA context (and its
    # memory) while the tests and the bench run.
    gpu_probe = pool.submit(run.capture, [sys.executable, "-c", _GPU_PROBE]) if cuda else None
    futures = {label: pool.submit(_timed, run, cmd) for label, cmd in jobs}
    commands = dict(jobs)
    labels = {f: label for label, f in futures.items() if label != loader_label}
    results: dict[str, tuple[int, str, float]] = {}
    for f in concurrent.futures.as_completed(labels):
        label = labels[f]
        rc, out, seconds = results[label] = f.result()
        lines.append(f"\n$ {shlex.join(commands[label])}")
        if out.strip():
            lines.append(out.rstrip())
        lines.append(f"[{'ok' if rc == 0 else f'FAILED ({rc})'}] {label} ({seconds:.1f} s)")
    if gpu_probe is not None:
        _record_gpu(run, gpu_probe.result(), lines)
    failed = [label for label, (rc, _, _) in results.items() if rc != 0]
    lib = work / "libmy_ops.so"
    if not failed:
        torch_lib = tc.torch_dir / "lib"
        link = [
            tc.cxx,
            "-shared",
            "-o",
            str(lib),
            *map(str, objects),
            *sources.linkopt,
            f"-L{torch_lib}",
            f"-Wl,-rpath,{torch_lib}",
            "-ltorch",
            "-ltorch_cpu",
            "-lc10",
        ]
        if cuda:
            assert tc.cudart is not None
            link += [
                "-ltorch_cuda",
                "-lc10_cuda",
                f"-L{tc.cudart.parent}",
                f"-Wl,-rpath,{tc.cudart.parent}",
                f"-l:{tc.cudart.name}",
            ]
        rc, out = run.capture(link)
        lines.append(f"\n$ {shlex.join(link)}")
        if out.strip():
            lines.append(out.rstrip())
        lines.append(f"[{'ok' if rc == 0 else f'FAILED ({rc})'}] link libmy_ops.so")
        if rc != 0:
            failed.append("link")
    step.facts["compile_s"] = {label: round(s, 1) for label, (_, _, s) in results.items()}
    step.facts["sources"] = {"cpp": len(sources.cpp), "cu": len(sources.cu) if cuda else 0}
    if failed:
        step.status = "fail"
        step.detail = "failed: " + ",".join(failed)
        first = failed[0]
        text = results[first][1] if first in results else lines.text()
        run.say(f"build failed ({', '.join(failed)}):\n{_tail(text)}")
    else:
        step.status = "ok"
        step.detail = f"{len(results)} objects"
        step.facts["library"] = str(lib)
    return {
        "future": futures.get(loader_label),
        "cmd": commands.get(loader_label),
        "binary": loader_bin,
        "pool": pool,
        "lib": lib if step.status == "ok" else None,
    }


# ---------------------------------------------------------------------------
# Step 2a: tests.

# testing_utils imports these two names at module level; only
# test_properties.py uses them, and it is skipped when hypothesis is missing.
_HYPOTHESIS_STUB = """\
class HealthCheck:
    too_slow = data_too_large = None


def settings(*args, **kwargs):
    raise RuntimeError("hypothesis is not installed")
"""


def _pytest_counts(text: str) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    summary = ""
    for line in text.splitlines():
        if re.search(r"\d+ (passed|failed|error|errors|skipped|deselected)\b", line) and (
            " in " in line
        ):
            summary = line
    for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed)", summary):
        key = "errors" if word.startswith("error") else word
        counts[key] = counts.get(key, 0) + int(n)
    return counts


def step_tests(run: Run, step: Step, work: Path, lib: Path, log_path: Path) -> None:
    import importlib.util

    device = "cpu" if run.args.cpu_only else "cuda"
    extra = {"MY_OPS_LIBRARY": str(lib), "MY_OPS_TEST_DEVICES": device}
    cmd = [sys.executable, "-m", "pytest", "python/tests", "-q", "-p", "no:cacheprovider"]
    cmd += ["--durations=5"]
    notes = []
    # Shown in the verdict, so a PASS over part of the suite says so.
    partial = []
    if importlib.util.find_spec("pytest") is None:
        step.status = "fail"
        step.detail = "pytest not installed"
        return
    if device == "cuda" and not run.facts.get("gpu", {}).get("count"):
        # Every cuda test would be skipped, and a run of skips is no pass.
        step.status = "fail"
        step.detail = "no CUDA device visible to torch"
        return
    env = _child_env(work, extra)
    if importlib.util.find_spec("hypothesis") is None:
        stub = work / "hypothesis_stub"
        (stub / "hypothesis").mkdir(parents=True, exist_ok=True)
        (stub / "hypothesis/__init__.py").write_text(_HYPOTHESIS_STUB)
        env["PYTHONPATH"] += os.pathsep + str(stub)
        cmd += ["--ignore=python/tests/test_properties.py"]
        notes.append("hypothesis missing: test_properties.py skipped")
        partial.append("no test_properties: hypothesis missing")
        run.say("note: hypothesis is not installed; skipping python/tests/test_properties.py")
    if run.args.tests_subset:
        cmd += ["-k", run.args.tests_subset]
        notes.append(f"subset -k {run.args.tests_subset!r}")
        partial.append("subset")
        run.say(f"note: only the tests matching -k {run.args.tests_subset!r}")
    rc, out = run.run(cmd, log_path, env)
    counts = _pytest_counts(out)
    step.facts.update(counts, device=device, notes=notes, partial=partial, exit_status=rc)
    if rc == 0 and counts["passed"] > 0:
        step.status = "ok"
    else:
        step.status = "fail"
        step.detail = "killed (time budget)" if rc == 124 else f"pytest exit {rc}"
        run.say(f"tests failed (exit {rc}):\n{_tail(out)}")


# ---------------------------------------------------------------------------
# Step 2b/2c: export, AOTI parity, loader parity.

_PARITY = f"""\
import sys
import torch
import my_ops  # loads MY_OPS_LIBRARY: the package's custom ops and class

def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)

mode = sys.argv[1]
if mode == "repeat":
    # A batch of N copies of every tensor in a file: the default model treats batch rows alike.
    n, source, dest = int(sys.argv[2]), sys.argv[3], sys.argv[4]
    torch.save(tuple(torch.cat([t] * n) for t in as_tuple(torch.load(source))), dest)
    sys.exit(0)
if mode == "aoti":
    package, inputs, expected, device = sys.argv[2:6]
    model = torch._inductor.aoti_load_package(package)
    args = tuple(t.to(device) for t in as_tuple(torch.load(inputs)))
    with torch.no_grad():
        got = as_tuple(model(*args))
else:
    got_file, expected = sys.argv[2:4]
    got = as_tuple(torch.load(got_file))
want = as_tuple(torch.load(expected))
ok = len(got) == len(want)
worst = 0.0
for g, w in zip(got, want):
    g = g.cpu()
    if g.shape != w.shape or g.dtype != w.dtype:
        print(f"shape/dtype {{tuple(g.shape)}} {{g.dtype}} != {{tuple(w.shape)}} {{w.dtype}}")
        ok = False
        continue
    if g.numel():
        worst = max(worst, (g.double() - w.double()).abs().max().item())
    ok = ok and torch.allclose(g, w, atol={PARITY_ATOL}, rtol={PARITY_RTOL})
print(f"parity {{'ok' if ok else 'MISMATCH'}}: {{len(got)}} outputs, max abs diff {{worst:.3g}}")
sys.exit(0 if ok else 1)
"""


def _parity_script(work: Path) -> Path:
    path = work / "parity.py"
    if not path.exists():
        path.write_text(_PARITY)
    return path


def _run_parity(run, step, cmd: list[str], log_path, env, failure: str) -> None:
    """Runs a parity script and records its verdict (and the max abs diff) on the step."""
    rc, out = run.run(cmd, log_path, env)
    step.facts["max_abs_diff"] = _max_diff(out)
    passed = rc == 0
    step.status = "ok" if passed else "fail"
    step.facts["parity"] = "ok" if passed else "fail"
    if not passed:
        step.detail = failure
        run.say(f"{failure} (exit {rc}):\n{_tail(out)}")


def _max_diff(out: str) -> str | None:
    m = re.search(r"max abs diff (\S+)", out)
    return m.group(1) if m else None


def step_export(run: Run, step: Step, work: Path, lib: Path, log_path: Path) -> Path | None:
    device = "cpu" if run.args.cpu_only else "cuda"
    export_dir = work / "export"
    env = _child_env(work, {"MY_OPS_LIBRARY": str(lib)})
    cmd = [sys.executable, "deploy/export.py", "--device", device, "--out", str(export_dir)]
    rc, out = run.run(cmd, log_path, env)
    step.facts["device"] = device
    if rc != 0:
        step.status = "fail"
        step.facts["export"] = "fail"
        step.facts["parity"] = "not run"
        step.detail = "killed (time budget)" if rc == 124 else f"export.py exit {rc}"
        run.say(f"export failed (exit {rc}):\n{_tail(out)}")
        return None
    step.facts["export"] = "ok"
    times = re.search(r"exported in .*", out)
    if times:
        step.facts["export_times"] = times.group(0)
    files = [export_dir / n for n in ("model.pt2", "sample_input.pt", "expected_output.pt")]
    missing = [f.name for f in files if not f.exists()]
    if missing:
        step.status = "fail"
        step.facts["parity"] = "not run"
        step.detail = "missing " + ",".join(missing)
        return None
    step.facts["package_bytes"] = files[0].stat().st_size
    cmd = [sys.executable, str(_parity_script(work)), "aoti", *map(str, files), device]
    _run_parity(run, step, cmd, log_path, env, "aoti_load_package parity failed")
    return export_dir


def step_loader(
    run: Run, step: Step, work: Path, lib: Path, export_dir: Path, build: dict, log_path: Path
) -> None:
    future = build["future"]
    if future is None:
        step.status = "fail"
        step.detail = "loader was not built"
        return
    # Compiled in the build pool; waiting here only if it is still running.
    rc, out, build_s = future.result()
    with open(log_path, "a") as f:
        f.write(f"$ {shlex.join(build['cmd'])}\n{out}")
        f.write(f"[{'ok' if rc == 0 else f'FAILED ({rc})'}] loader build ({build_s:.1f} s)\n")
    step.facts["build"] = "ok" if rc == 0 else "fail"
    # Compiled during the build and tests steps; not part of this step's time.
    step.facts["build_s_in_pool"] = round(build_s, 1)
    if rc != 0:
        step.status = "fail"
        step.facts["parity"] = "build_failed"
        step.detail = "loader build failed"
        if "sodium.h" in out:
            step.detail += " (needs libsodium: apt-get install libsodium-dev, or MY_OPS_LIBSODIUM)"
        if "nlohmann/json.hpp" in out:
            step.detail += " (needs nlohmann/json: apt-get install nlohmann-json3-dev"
            step.detail += ", or MY_OPS_NLOHMANN_JSON)"
        run.say(f"loader build failed (exit {rc}):\n{_tail(out)}")
        return
    env = _child_env(work, {"MY_OPS_LIBRARY": str(lib)})
    dirs = [str(d) for d in nvidia_lib_dirs()]
    if env.get("LD_LIBRARY_PATH"):
        dirs.append(env["LD_LIBRARY_PATH"])
    if dirs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(dirs)
    # Two runs in one process at each of two batch sizes: a CUDA package loads
    # its kernels on first use, and a second shape takes other kernel paths.
    for batch in LOADER_BATCHES:
        inputs = export_dir / "sample_input.pt"
        expected = export_dir / "expected_output.pt"
        if batch != 1:
            for source, dest in ((inputs, work / f"input_b{batch}.pt"),
                                 (expected, work / f"expected_b{batch}.pt")):  # fmt: skip
                cmd = [sys.executable, str(_parity_script(work)), "repeat", str(batch),
                       str(source), str(dest)]  # fmt: skip
                rc, out = run.run(cmd, log_path, env)
                if rc != 0:
                    step.status = "fail"
                    step.detail = f"cannot make the batch-{batch} input"
                    run.say(f"{step.detail} (exit {rc}):\n{_tail(out)}")
                    return
            inputs, expected = work / f"input_b{batch}.pt", work / f"expected_b{batch}.pt"
        result = work / f"loader_out_b{batch}.pt"
        # The loader reads no env for libraries; pass the op library explicitly.
        cmd = [
            str(build["binary"]),
            "--ops", str(lib),
            "--package", str(export_dir / "model.pt2"),
            "--input", str(inputs),
            "--output", str(result),
            "--expect", str(expected),
            "--atol", str(PARITY_ATOL),
            "--rtol", str(PARITY_RTOL),
            "--runs", "2",
        ]  # fmt: skip
        rc, out = run.run(cmd, log_path, env)
        step.facts[f"loader_exit_b{batch}"] = rc
        if rc != 0:
            step.status = "fail"
            step.facts["parity"] = "fail"
            step.detail = f"loader exit {rc} at batch {batch}"
            run.say(f"loader failed at batch {batch} (exit {rc}, see loader --help):\n{_tail(out)}")
            return
        cmd = [sys.executable, str(_parity_script(work)), "files", str(result), str(expected)]
        _run_parity(run, step, cmd, log_path, env, f"loader output differs at batch {batch}")
        if step.status != "ok":
            return


# ---------------------------------------------------------------------------
# Step 2d: bench.


def parse_bench(text: str) -> dict[str, dict[str, float]]:
    """{op: {impl: clone_bw_fraction}} from bench.py's table rows."""
    table: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        f = line.split()
        # op impl ms GB/s x-vs-eager x-vs-compiled clone-frac compile-s
        if len(f) == 8 and re.fullmatch(r"[\d.]+", f[2]) and re.fullmatch(r"[\d.]+", f[6]):
            table.setdefault(f[0], {})[f[1]] = float(f[6])
            if f[0] == "clone":
                table["clone"]["gbps"] = float(f[3])
    return table


def step_bench(run: Run, step: Step, work: Path, lib: Path, log_path: Path) -> None:
    args = run.args
    device = "cpu" if args.cpu_only else "cuda"
    cmd = [
        sys.executable,
        "ops/bench.py",
        "--device",
        device,
        "--rows",
        str(args.bench_rows),
        "--cols",
        str(args.bench_cols),
    ]
    if args.cpu_only:
        # One thread: OpenMP teams spin-wait, so on a shared, loaded CPU the
        # multi-threaded ops would measure the machine's load, not the kernels.
        cmd += ["--iters", "20", "--warmup", "3", "--threads", "1"]
    else:
        # A 256 MiB copy takes ~0.15 ms on an H200: many samples cost nothing.
        cmd += ["--iters", "50", "--warmup", "5"]
    if not args.bench_compile:
        cmd.append("--no-compile")
    env = _child_env(work, {"MY_OPS_LIBRARY": str(lib)})
    rc, out = run.run(cmd, log_path, env)
    table = parse_bench(out)
    fractions = {op: table[op]["my_ops"] for op in BW_TARGETS if "my_ops" in table.get(op, {})}
    mib = args.bench_rows * args.bench_cols * 4 / 2**20
    step.facts.update(
        device=device,
        shape=[args.bench_rows, args.bench_cols],
        tensor_mib_fp32=round(mib, 1),
        clone_gbps=table.get("clone", {}).get("gbps"),
        clone_bw_fraction=fractions,
        targets=BW_TARGETS,
    )
    shown = " ".join(f"{BW_NAMES[op]} {v:.2f}" for op, v in fractions.items())
    if rc != 0 or len(fractions) != len(BW_TARGETS):
        step.status = "fail"
        step.detail = "killed (time budget)" if rc == 124 else f"bench.py exit {rc}"
        run.say(f"bench failed (exit {rc}):\n{_tail(out)}")
        return
    if args.cpu_only:
        step.status = "ok"
        step.detail = f"{shown} of copy (cpu, targets not checked)"
        return
    missed = [op for op, v in fractions.items() if v < BW_TARGETS[op]]
    step.facts["targets_missed"] = missed
    if missed:
        step.status = "fail"
        want = ", ".join(f"{BW_NAMES[op]} >= {BW_TARGETS[op]}" for op in missed)
        step.detail = f"{shown} of copy (targets missed: {want})"
    else:
        step.status = "ok"
        step.detail = f"{shown} of copy (targets met)"


# ---------------------------------------------------------------------------


def _on_signal(signum, _frame):
    raise Killed(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _die_usage(f"cannot create OUT_DIR {args.out_dir}: {e.strerror}")
    for name in list(LOG_FILES.values()) + ["summary.json", "verdict.txt"]:
        (args.out_dir / name).unlink(missing_ok=True)
    scratch = os.environ.get("TEST_TMPDIR") or None
    work = Path(tempfile.mkdtemp(prefix="gpu_check.", dir=scratch))
    (work / "tmp").mkdir()
    logs = {name: work / LOG_FILES[name] for name in STEPS}
    run = Run(args)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    mode = "cpu-only" if args.cpu_only else f"cuda {','.join(args.archs)}"
    run.say(f"gpu_check: {mode}, repo {ROOT}, budget {args.budget:.0f} s, work {work}")
    build: dict = {}
    current: Step | None = None
    t0 = time.monotonic()
    try:
        for name in STEPS:
            step = run.steps[name]
            if name in args.skip or (name == "loader" and "export" in args.skip):
                step.status = "skipped"
                continue
            if time.monotonic() >= run.deadline:
                step.detail = "not run (time budget)"
                run.say(f"{name}: not started, time budget of {args.budget:.0f} s used up")
                continue
            lib = build.get("lib")
            if name != "build" and lib is None:
                step.detail = "not run (no library)"
                continue
            if name == "loader" and run.steps["export"].status != "ok":
                step.detail = "not run (no package)"
                continue
            run.say(f"{name} ...")
            current = step
            t0 = time.monotonic()
            try:
                if name == "build":
                    build = step_build(run, step, work, logs[name])
                elif name == "tests":
                    step_tests(run, step, work, lib, logs[name])
                elif name == "export":
                    build["export_dir"] = step_export(run, step, work, lib, logs[name])
                elif name == "loader":
                    step_loader(run, step, work, lib, build["export_dir"], build, logs[name])
                else:
                    step_bench(run, step, work, lib, logs[name])
            except Killed:
                raise
            except Exception as e:  # noqa: BLE001 - one step's bug must not hide the others
                step.status = "fail"
                step.detail = f"{type(e).__name__}: {e}"
                with open(logs[name], "a") as f:
                    f.write(f"gpu_check: {step.detail}\n")
                run.say(f"{name} failed: {step.detail}")
            step.seconds = time.monotonic() - t0
            current = None
            shown = step.detail or ""
            run.say(f"{name}: {step.status} ({step.seconds:.1f} s) {shown}".rstrip())
            run.write_summary(final=False)
    except Killed as e:
        run.kill_children()
        if current is not None:
            current.status = "fail"
            current.detail = f"interrupted by {e}"
            current.seconds = time.monotonic() - t0
        run.say(f"interrupted by {e}")
    finally:
        run.kill_children()
        pool = build.get("pool")
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        for name in STEPS:
            _truncate_into(logs[name], args.out_dir / LOG_FILES[name])
        line = run.write_summary(final=True)
        if args.keep_work:
            run.say(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for name, st in run.steps.items():
        frac = st.seconds / run.elapsed() if run.elapsed() else 0.0
        print(f"  {name:<7} {st.status:<8} {st.seconds:6.1f} s  ({frac:4.0%})")
    print(line, flush=True)
    return 0 if line.startswith("gpu_check: PASS") else 1


if __name__ == "__main__":
    sys.exit(main())
