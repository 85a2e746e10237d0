"""The tests step: the op tests (python/tests) under pytest, against the library just built."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from check_run import Run, Step, child_env, tail

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
    env = child_env(work, extra)
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
        run.say(f"tests failed (exit {rc}):\n{tail(out)}")
