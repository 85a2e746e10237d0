#!/usr/bin/env python3
"""gpu_check: build libmy_ops.so without Bazel and check it end to end on one machine.

usage: tools/gpu_check/gpu_check.py OUT_DIR [--cpu-only] [options]

For a GPU machine with Python, torch, a CUDA toolkit and g++ but no Bazel and no
network. A failed step stops only those that need its result (see README.md):

  build   libmy_ops.so from what torch_op_library compiles, and the C++ loader
  tests   pytest python/tests on cuda (cpu with --cpu-only)
  export  deploy/export.py, which checks its package with aoti_load_package
  loader  the C++ loader runs the package at batch 1 and 3, with --expect
  bench   ops/bench.py --json, against the targets it reports (GPU only)

Prints one verdict line (gpu_check: PASS|FAIL build=ok tests=... in N s), also
written to OUT_DIR/verdict.txt beside summary.json and each step's log. No step
starts after --budget seconds; a running one is killed 30 s later.

Exit status: 0 PASS, 1 FAIL, 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

# Python puts this file's folder on sys.path with symlinks resolved, which under Bazel is
# the checkout behind the runfiles tree; the modules must come from the unresolved folder,
# so that their ROOT is the tree this runs in (the declared data).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True

from bench_step import step_bench  # noqa: E402
from build_step import step_build  # noqa: E402
from check_run import LOG_FILES, ROOT, Killed, Run, truncate_into  # noqa: E402
from export_step import step_export, step_loader  # noqa: E402
from tests_step import step_tests  # noqa: E402

STEP_FUNCS = {"build": step_build, "tests": step_tests, "export": step_export}
STEP_FUNCS |= {"loader": step_loader, "bench": step_bench}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"gpu_check: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(
        prog="gpu_check",
        description=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s OUT_DIR [--cpu-only] [options]",
    )
    p.add_argument("out_dir", metavar="OUT_DIR", help="where the summary and logs go")
    p.add_argument("--cpu-only", action="store_true", help="no GPU, no nvcc: every step on cpu")
    p.add_argument("--budget", type=float, default=450.0, metavar="SECONDS", help="default: 450")
    p.add_argument("--nvcc-arch", default="native", metavar="ARCH", help="default: native")
    p.add_argument("--tests-subset", metavar="EXPR", help="only the tests pytest -k EXPR selects")
    args = p.parse_args(argv)
    if not args.budget > 0:  # rather than <= 0, which a nan passes
        p.error(f"--budget: expected a positive number of seconds, got {args.budget}")
    # Under `bazel run` the cwd is the runfiles tree; a relative OUT_DIR means the user's cwd.
    out = Path(os.environ.get("BUILD_WORKING_DIRECTORY", "")) / args.out_dir
    if out.exists() and not out.is_dir():
        p.error(f"OUT_DIR {out} exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        p.error(f"cannot create OUT_DIR {out}: {e.strerror}")
    args.out_dir = out.resolve()
    return args


def _on_signal(signum, _frame):
    raise Killed(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name in [*LOG_FILES.values(), "summary.json", "verdict.txt"]:
        (args.out_dir / name).unlink(missing_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_check.", dir=os.environ.get("TEST_TMPDIR")))
    (work / "tmp").mkdir()
    run = Run(args, work)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    mode = "cpu-only" if args.cpu_only else f"cuda, nvcc -arch={args.nvcc_arch}"
    run.say(f"gpu_check: {mode}, repo {ROOT}, budget {args.budget:.0f} s, work {work}")
    current = None  # the step running, for an interruption to fail
    try:
        for name, step in run.steps.items():
            if time.monotonic() >= run.deadline:
                step.detail = "not run (time budget)"
            elif name != "build" and run.lib is None:
                step.detail = "not run (no library)"
            elif name == "loader" and run.export_dir is None:
                step.detail = "not run (no package)"
            if step.detail:
                run.say(f"{name}: {step.detail}")
                continue
            run.say(f"{name} ...")
            t0, current = time.monotonic(), step
            try:
                STEP_FUNCS[name](run, step)
            except Killed:
                raise
            except Exception as e:  # noqa: BLE001 - one step's bug must not hide the others
                with open(run.log(step), "a") as f:
                    f.write(f"gpu_check: {type(e).__name__}: {e}\n")
                run.fail(step, f"{type(e).__name__}: {e}")
            finally:
                step.seconds = time.monotonic() - t0
            current = None
            run.say(f"{name}: {step.status} ({step.seconds:.1f} s) {step.detail}".rstrip())
            run.write_summary(final=False)
    except Killed as e:
        if current is not None:
            run.fail(current, f"interrupted by {e}")
        run.say(f"interrupted by {e}")
    finally:
        for proc in list(run.children):
            run.kill(proc)
        if run.pool is not None:
            run.pool.shutdown(wait=False, cancel_futures=True)
        for log in LOG_FILES.values():
            truncate_into(work / log, args.out_dir / log)
        line = run.write_summary(final=True)
        shutil.rmtree(work, ignore_errors=True)
    print(line, flush=True)
    return 0 if line.startswith("gpu_check: PASS") else 1


if __name__ == "__main__":
    sys.exit(main())
