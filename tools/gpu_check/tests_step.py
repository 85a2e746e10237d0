"""The tests step: python/tests (or --tests PATH) under pytest, against the library just built."""

from __future__ import annotations

import importlib.util
import os
import re
import sys

from check_run import ROOT, Run, Step

DEFAULT_TESTS = "python/tests"
# The suite's file whose tests need hypothesis itself, not the stub below.
_PROPERTIES = "python/tests/test_properties.py"

# Without hypothesis the suite runs against this stub of what testing_utils imports at
# module level; the files that need more skip themselves or are left out.
_HYPOTHESIS_STUB = """class HealthCheck:
    too_slow = data_too_large = None
def settings(*args, **kwargs):
    raise RuntimeError("hypothesis is not installed")
"""


def pytest_counts(text: str) -> dict[str, int]:
    """The counts of pytest's last summary line ("3 passed, 1 skipped in 2.0s")."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    summaries = [s for s in text.splitlines() if re.search(r"\d+ \w+.* in [\d.]+s", s)]
    for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", (summaries or [""])[-1]):
        counts["errors" if word.startswith("error") else word] += int(n)
    return counts


def _overlaps(a: str, b: str) -> bool:
    """Whether one of two paths relative to the root holds the other (or they are one)."""
    a, b = (os.path.normpath(p).split(os.sep) for p in (a, b))
    a, b = ([] if p == ["."] else p for p in (a, b))
    return a[: len(b)] == b or b[: len(a)] == a


def _needs_stub(tests: str) -> bool:
    """The stub stands in for hypothesis only where the run reaches into python/tests."""
    return importlib.util.find_spec("hypothesis") is None and _overlaps(tests, DEFAULT_TESTS)


def plan_tests(run: Run) -> tuple[list[str], dict[str, str], list[str]]:
    """pytest's command and environment, and what part of the suite it leaves out."""
    if importlib.util.find_spec("pytest") is None:
        raise RuntimeError("pytest not installed")
    # Named devices are a demand: the suite fails, rather than skips, where one is missing.
    device = "cpu" if run.args.cpu_only else "cuda"
    env = run.child_env() | {"MY_OPS_TEST_DEVICES": device}
    tests = run.args.tests
    # Checked here rather than left to pytest: a dry run would plan a step bound to fail.
    if not (ROOT / tests).exists():
        raise RuntimeError(f"--tests {tests}: no such file or folder in {ROOT}")
    cmd = [sys.executable, "-m", "pytest", tests, "-q", "-p", "no:cacheprovider"]
    cmd.append("--durations=5")
    partial = []  # shown in the verdict, so that a PASS over part of the suite says so
    if tests != DEFAULT_TESTS:
        partial.append(f"only {tests}")
    if _needs_stub(tests):
        env["PYTHONPATH"] += os.pathsep + str(run.work / "hypothesis_stub")
        if _overlaps(tests, _PROPERTIES):
            cmd.append(f"--ignore={_PROPERTIES}")
            partial.append("hypothesis missing: its tests skipped")
    if run.args.tests_subset:
        cmd += ["-k", run.args.tests_subset]
        partial.append("subset")
    return cmd, env, partial


def step_tests(run: Run, step: Step) -> None:
    if importlib.util.find_spec("pytest") is None:
        return run.fail(step, "pytest not installed")
    cmd, env, partial = plan_tests(run)
    if _needs_stub(run.args.tests):
        stub = run.work / "hypothesis_stub/hypothesis"
        stub.mkdir(parents=True, exist_ok=True)
        (stub / "__init__.py").write_text(_HYPOTHESIS_STUB)
    for note in partial:
        run.say(f"note: {note}")
    job = run.run(cmd, run.log(step), env)
    c = pytest_counts(job.output)
    step.facts.update(c, device=env["MY_OPS_TEST_DEVICES"], partial=partial, exit_status=job.rc)
    shown = f"{c['passed']} passed/{c['failed'] + c['errors']} failed"
    shown += f"/{c['skipped']} skipped" if c["skipped"] else ""
    shown += f" ({', '.join(partial)})" if partial else ""
    if job.rc == 0 and c["passed"] > 0:
        step.status, step.detail = "ok", shown
    else:
        run.fail(step, f"{shown} (pytest exit {job.rc})", job)
