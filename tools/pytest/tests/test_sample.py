"""Sample tests that test_pytest_runner.py runs through the runner.

Each test that runs appends its name to $SAMPLE_RAN_LOG (when set), so the
caller sees what ran, independently of pytest's output. Under Bazel this file
is also :sharded_sample_test (shard_count = 2).
"""

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _record(request: pytest.FixtureRequest):
    log = os.environ.get("SAMPLE_RAN_LOG")
    if log:
        name = request.node.nodeid.split("::", 1)[1]
        with open(log, "a", encoding="utf-8") as out:
            out.write(name + "\n")
    yield


def test_alpha():
    pass


def test_beta():
    # SAMPLE_FAIL=test_beta makes this one fail, for the JUnit XML check.
    assert os.environ.get("SAMPLE_FAIL") != "test_beta"


def test_gamma():
    pass


@pytest.mark.parametrize("n", [1, 2, 3])
def test_param(n: int):
    assert n in (1, 2, 3)


class TestGroup:
    def test_one(self):
        pass

    def test_two(self):
        pass


def test_writes_output(undeclared_outputs_dir: Path):
    (undeclared_outputs_dir / "sample_output.txt").write_text("written by test_writes_output\n")
