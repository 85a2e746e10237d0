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
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

# Python puts this file's folder on sys.path with symlinks resolved, which
# under Bazel is the checkout behind the runfiles tree. The modules beside
# this file come from the unresolved folder instead, so their ROOT is the
# tree this script runs in (the declared data). No bytecode is written into
# the checkout, as for a single-file script.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True

from bench_step import step_bench  # noqa: E402
from build_step import step_build  # noqa: E402
from check_run import KILL_GRACE_S, LOG_FILES, ROOT, STEPS, Killed, Run, Step, truncate_into  # noqa: E402
from export_step import step_export  # noqa: E402
from loader_step import step_loader  # noqa: E402
from tests_step import step_tests  # noqa: E402

SKIPPABLE = ("tests", "export", "loader", "bench")


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
            truncate_into(logs[name], args.out_dir / LOG_FILES[name])
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
