"""Skips that test_pytest_runner.py makes the runner see, chosen by $SKIP_SAMPLE.

Like test_sample.py, each test whose body runs appends its name to $SAMPLE_RAN_LOG.

- unset: test_runs passes, test_marked is skipped, test_xfail passes.
- "calls": test_runs and test_xfail skip from their bodies.
- "module": the module skips at import, so nothing is collected.
- "mark": a module-level skip mark (pytestmark) skips every test.
- "xfail": test_xfail fails as expected (pytest.xfail).
"""

import os

import pytest

MODE = os.environ.get("SKIP_SAMPLE", "")
if MODE == "module":
    pytest.skip("SKIP_SAMPLE=module", allow_module_level=True)
if MODE == "mark":
    pytestmark = pytest.mark.skip(reason="SKIP_SAMPLE=mark")


def _ran(name: str) -> None:
    log = os.environ.get("SAMPLE_RAN_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(name + "\n")


def test_runs():
    if MODE == "calls":
        pytest.skip("SKIP_SAMPLE=calls")
    _ran("test_runs")


@pytest.mark.skip(reason="always skipped")
def test_marked():
    _ran("test_marked")


def test_xfail():
    if MODE == "calls":
        pytest.skip("SKIP_SAMPLE=calls")
    _ran("test_xfail")
    if MODE == "xfail":
        pytest.xfail("SKIP_SAMPLE=xfail")
