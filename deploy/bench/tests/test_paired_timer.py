"""//deploy/bench:paired_timer, the tax table's C++ runner: two packages in one process.

It must time both packages (one "ours theirs" line per round, each a positive p50), run each
exactly as the loader would (a package the loader refuses is refused here too), and answer a
bad command line with one line and the loader's exit codes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import EXIT_CODES, absolute_from_env, child_env, error_lines, package_folder


@pytest.fixture(scope="module")
def timer() -> str:
    return absolute_from_env(os.environ["MY_OPS_PAIRED_TIMER"])


@pytest.fixture(scope="module")
def proxy_package() -> Path:
    return package_folder("MY_OPS_PROXY_PACKAGE", "//deploy:proxy_executor_package")


def run(timer: str, *args: str) -> subprocess.CompletedProcess:
    env = child_env() | {"OMP_NUM_THREADS": "1"}
    return subprocess.run([timer, *args], env=env, capture_output=True, text=True, timeout=600)


def test_times_both_packages_once_per_round(
    timer, ops_library, default_package: Path, proxy_package: Path
):
    proc = run(
        timer, "--ops", ops_library, "--input", str(default_package / "sample_input.pt"),
        "--calls", "20", "--rounds", "3", "--block", "4",
        str(default_package / "model.pt2"), str(proxy_package / "model.pt2"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rounds = [line.split() for line in proc.stdout.splitlines()]
    assert len(rounds) == 3
    for ours, theirs in rounds:
        assert 0 < float(ours) < 1e4 and 0 < float(theirs) < 1e4


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--calls", "0"], "usage", "--calls: expected a positive integer, got '0'"),
        (["--frobnicate", "1"], "usage", "unknown option --frobnicate (see --help)"),
        (["ONE.pt2"], "usage", "expected two packages, OURS.pt2 THEIRS.pt2"),
    ],
)
def test_a_bad_command_line_is_one_line(timer, args, code, message):
    proc = run(timer, *args)
    assert proc.returncode == EXIT_CODES[code]
    assert error_lines(proc.stderr) == [f"paired_timer: error: {message}"]


def test_a_missing_package_is_refused_as_the_loader_refuses_it(
    timer, ops_library, default_package: Path, tmp_path: Path
):
    missing = tmp_path / "missing.pt2"
    proc = run(
        timer, "--ops", ops_library, "--input", str(default_package / "sample_input.pt"),
        str(default_package / "model.pt2"), str(missing),
    )  # fmt: skip
    assert proc.returncode == EXIT_CODES["package_missing"]
    [line] = error_lines(proc.stderr)
    assert line.startswith("paired_timer: error: ") and str(missing) in line
