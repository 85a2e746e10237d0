#!/usr/bin/env python3
"""gpu_check: build libmy_ops.so without Bazel and check it end to end on one machine.

usage: tools/gpu_check/gpu_check.py OUT_DIR [--cpu-only] [options]

For a GPU machine with Python, torch, a CUDA toolkit and g++ but no Bazel and no
network. A failed step stops only those that need its result (see README.md):

  build   libmy_ops.so from what torch_op_library compiles, and the C++ loader
  tests   pytest python/tests on cuda (cpu with --cpu-only); --tests PATH, a file
          or folder relative to the repository, runs that instead
  export  python -m deploy.exporter, which checks its package with aoti_load_package
  loader  the C++ loader runs the package at batch 1 and 3, with --expect
  bench   ops/bench.py --json, against the targets it reports (GPU only)

Prints one verdict line (gpu_check: PASS|FAIL build=ok tests=... in N s), also
written to OUT_DIR/verdict.txt beside summary.json and each step's log. No step
starts after --budget seconds; a running one is killed 30 s later.

--dry-run prints every command instead, with the toolkit it would use, runs none
and writes nothing (OUT_DIR is not touched); it exits 1 with one line on stderr
when it cannot plan them all (e.g. no nvcc without --cpu-only).

Exit status: 0 PASS, 1 FAIL, 2 bad usage (--dry-run: 0 planned, 1 not).
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

from bench_step import plan_bench, step_bench  # noqa: E402
from build_step import LIBRARY, plan_build, step_build  # noqa: E402
from check_run import LOG_FILES, ROOT, Killed, Run, truncate_into  # noqa: E402
from export_step import (  # noqa: E402
    EXPORT,
    loader_env,
    plan_export,
    plan_loader,
    step_export,
    step_loader,
)
from tests_step import DEFAULT_TESTS, plan_tests, step_tests  # noqa: E402

STEP_FUNCS = {"build": step_build, "tests": step_tests, "export": step_export}
STEP_FUNCS |= {"loader": step_loader, "bench": step_bench}
# For --dry-run: each step's commands, with their environments (None: Run.base_env()).
PLANS = {
    "build": lambda run: [(cmd, None) for cmd in plan_build(run).commands()],
    "tests": lambda run: [plan_tests(run)[:2]],
    "export": lambda run: [(plan_export(run), run.child_env())],
    "loader": lambda run: [
        (cmd, loader_env(run)) for r in plan_loader(run) for cmd in (r.repeat, r.cmd) if cmd
    ],
    "bench": lambda run: [(cmd, run.child_env()) for cmd, _ in plan_bench(run).values()],
}


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
    p.add_argument(
        "--tests",
        default=DEFAULT_TESTS,
        metavar="PATH",
        help=f"what the tests step runs (default: {DEFAULT_TESTS})",
    )
    p.add_argument("--tests-subset", metavar="EXPR", help="only the tests pytest -k EXPR selects")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    args = p.parse_args(argv)
    if not args.budget > 0:  # rather than <= 0, which a nan passes
        p.error(f"--budget: expected a positive number of seconds, got {args.budget}")
    # Under `bazel run` the cwd is the runfiles tree; a relative OUT_DIR means the user's cwd.
    out = Path(os.environ.get("BUILD_WORKING_DIRECTORY", "")) / args.out_dir
    if out.exists() and not out.is_dir():
        p.error(f"OUT_DIR {out} exists and is not a folder")
    try:
        if not args.dry_run:
            out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        p.error(f"cannot create OUT_DIR {out}: {e.strerror}")
    args.out_dir = out.resolve()
    return args


def dry_run(run: Run) -> int:
    """Prints each step's commands, as run would start them; 1 if one cannot be planned."""
    # What the build and export would leave for the steps after them.
    run.lib, run.export_dir = run.work / LIBRARY, run.work / EXPORT
    count = 0
    for name, plan in PLANS.items():
        try:
            commands = plan(run)
        except Exception as e:  # noqa: BLE001 - whatever it is, the run would fail on it
            print(f"gpu_check: dry run: cannot plan {name}: {e}", file=sys.stderr, flush=True)
            return 1
        print(f"{name}:")
        for cmd, env in commands:
            print(f"  $ {run.show(cmd, env)}")
        count += len(commands)
    cuda = f"CUDA_HOME={run.cuda_home}" if run.cuda_home else "no CUDA toolkit"
    print(f"gpu_check: DRY RUN {count} commands planned, none run ({cuda})", flush=True)
    return 0


def _on_signal(signum, _frame):
    raise Killed(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mode = "cpu-only" if args.cpu_only else f"cuda, nvcc -arch={args.nvcc_arch}"
    work = Path(tempfile.mkdtemp(prefix="gpu_check.", dir=os.environ.get("TEST_TMPDIR")))
    if args.dry_run:  # the work folder only holds what finding the toolkit writes
        print(f"gpu_check: dry run, {mode}, repo {ROOT}, work {work} (removed)", flush=True)
        try:
            return dry_run(Run(args, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for name in [*LOG_FILES.values(), "summary.json", "verdict.txt"]:
        (args.out_dir / name).unlink(missing_ok=True)
    (work / "tmp").mkdir()
    run = Run(args, work)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
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
