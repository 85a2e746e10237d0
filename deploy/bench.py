"""Latency of the default model: eager Python vs Python AOTI vs the C++ loader.

Measures, at batch 1:
  * per-call latency (p50/p99) of eager PyTorch, of the package through
    torch._inductor.aoti_load_package, and of the C++ loader (--bench);
  * process start to first result: the C++ loader vs a Python script doing the
    same load + run + save.

Targets: C++ per-call p50 <= 0.8x Python AOTI; C++ start-to-first-result
<= 0.3x Python's. Exit status 1 when a target is missed (--no-check: always 0).

Paths come from flags or the environment (MY_OPS_LOADER, MY_OPS_LIBRARY), as in
the tests. Without --package the default model is exported first into a
private temporary folder.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# absolute(), not resolve(): keep to the runfiles tree under Bazel.
HERE = Path(os.path.abspath(__file__)).parent

PER_CALL_TARGET = 0.8
STARTUP_TARGET = 0.3

# Same work as `loader --package P --input I --output O`, for the start-up race.
PY_FIRST_RESULT = """
import sys, torch, my_ops
m = torch._inductor.aoti_load_package(sys.argv[1])
inputs = torch.load(sys.argv[2])
out = m(*inputs)
torch.save(tuple(out) if isinstance(out, (list, tuple)) else (out,), sys.argv[3])
"""


def _resolve(path: str | None, env: str, what: str) -> str:
    value = path or os.environ.get(env)
    if not value:
        sys.exit(f"bench: error: pass --{what} or set {env}")
    # `bazel run` starts us in the runfiles tree, where data paths are relative
    # links; the loader opens files themselves, never through a symbolic link.
    p = os.path.realpath(value)
    if not os.path.exists(p):
        sys.exit(f"bench: error: {what} not found: {value}")
    return p


def _percentiles(samples_ms: list[float]) -> tuple[float, float]:
    s = sorted(samples_ms)
    return s[len(s) // 2], s[min(len(s) - 1, int(0.99 * len(s)))]


def _time_calls(fn, iters: int, warmup: int = 10) -> tuple[float, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return _percentiles(samples)


def _median_wall(cmd: list[str], env: dict[str, str], runs: int) -> float:
    # The first run only warms the page cache, so both sides start equal.
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--loader", help="C++ loader binary (default: $MY_OPS_LOADER)")
    p.add_argument("--ops", help="libmy_ops.so (default: $MY_OPS_LIBRARY)")
    p.add_argument("--package", help="model.pt2 of the default model (default: export one)")
    p.add_argument("--iters", type=int, default=300, help="timed calls per variant")
    p.add_argument("--starts", type=int, default=5, help="process starts per variant")
    p.add_argument("--no-check", action="store_true", help="do not fail on missed targets")
    args = p.parse_args(argv)

    loader = _resolve(args.loader, "MY_OPS_LOADER", "loader")
    ops = _resolve(args.ops, "MY_OPS_LIBRARY", "ops")
    os.environ["MY_OPS_LIBRARY"] = ops

    work = Path(tempfile.mkdtemp(prefix="my_ops_bench."))
    try:
        return _run(args, loader, ops, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(args: argparse.Namespace, loader: str, ops: str, work: Path) -> int:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *[p for p in sys.path if p]])
    env["TMPDIR"] = str(work / "tmp")
    (work / "tmp").mkdir()

    if args.package:
        # Under `bazel run` a relative path is relative to the user's directory.
        user_cwd = os.environ.get("BUILD_WORKING_DIRECTORY", "")
        package = os.path.abspath(os.path.join(user_cwd, args.package))
    else:
        if not (HERE / "export.py").exists():
            sys.exit("bench: error: export.py is not beside bench.py; pass --package")
        print("exporting the default model ...", flush=True)
        out = work / "out"
        subprocess.run(
            [sys.executable, str(HERE / "export.py"), "--out", str(out)], env=env, check=True
        )
        package = str(out / "model.pt2")

    # Imported late so the TMPDIR above also covers this process's extraction.
    os.environ["TMPDIR"] = env["TMPDIR"]
    tempfile.tempdir = env["TMPDIR"]
    sys.path.insert(0, str(HERE))
    import default_model
    import torch

    # CPU only: torch's CUDA_HOME guess and the portable-ISA notice are noise.
    for name in ("torch.utils.cpp_extension", "torch.export.pt2_archive._package"):
        logging.getLogger(name).setLevel(logging.ERROR)

    spec = default_model.make_model()
    inputs = spec.make_inputs(1)
    torch.save(inputs, work / "in.pt")
    module = spec.module.eval()
    compiled = torch._inductor.aoti_load_package(package)

    with torch.no_grad():
        eager = _time_calls(lambda: module(*inputs), args.iters)
    aoti = _time_calls(lambda: compiled(*inputs), args.iters)

    base = [loader, "--ops", ops, "--package", package, "--input", str(work / "in.pt")]
    proc = subprocess.run(
        [*base, "--output", str(work / "b.pt"), "--bench", str(args.iters)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    words = proc.stdout.split()
    cpp = (float(words[words.index("p50") + 1]), float(words[words.index("p99") + 1]))

    script = work / "first_result.py"
    script.write_text(PY_FIRST_RESULT)
    py_start = _median_wall(
        [sys.executable, str(script), package, str(work / "in.pt"), str(work / "p.pt")],
        env, args.starts,
    )  # fmt: skip
    cpp_start = _median_wall([*base, "--output", str(work / "c.pt")], env, args.starts)

    per_call_ratio = cpp[0] / aoti[0]
    start_ratio = cpp_start / py_start
    rows = [
        ("per-call p50, eager Python", f"{eager[0]:.3f} ms", "", ""),
        ("per-call p99, eager Python", f"{eager[1]:.3f} ms", "", ""),
        ("per-call p50, Python AOTI", f"{aoti[0]:.3f} ms", "", ""),
        ("per-call p99, Python AOTI", f"{aoti[1]:.3f} ms", "", ""),
        ("per-call p50, C++ loader", f"{cpp[0]:.3f} ms",
         f"{per_call_ratio:.2f}x Py AOTI", f"<= {PER_CALL_TARGET}x"),
        ("per-call p99, C++ loader", f"{cpp[1]:.3f} ms", f"{cpp[1] / aoti[1]:.2f}x Py AOTI", ""),
        ("start to first result, Python", f"{py_start * 1e3:.0f} ms", "", ""),
        ("start to first result, C++", f"{cpp_start * 1e3:.0f} ms",
         f"{start_ratio:.2f}x Python", f"<= {STARTUP_TARGET}x"),
    ]  # fmt: skip
    print(f"\nbatch 1, {args.iters} calls per variant, {args.starts} starts per variant, "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs")  # fmt: skip
    header = ("measurement", "value", "ratio", "target")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())

    missed = []
    if per_call_ratio > PER_CALL_TARGET:
        missed.append(f"per-call {per_call_ratio:.2f}x > {PER_CALL_TARGET}x")
    if start_ratio > STARTUP_TARGET:
        missed.append(f"start-up {start_ratio:.2f}x > {STARTUP_TARGET}x")
    print("targets: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
    return 1 if missed and not args.no_check else 0


if __name__ == "__main__":
    sys.exit(main())
