"""pytest configuration shared by the my_ops tests."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest

# From a source checkout (`python -m pytest python/tests`), make the package importable.
# Under Bazel the py_test deps already provide it.
if importlib.util.find_spec("my_ops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Keep hypothesis' scratch files out of the source tree (Bazel runs from $TEST_TMPDIR).
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY",
    os.path.join(os.environ.get("TEST_TMPDIR") or tempfile.gettempdir(), "my_ops_hypothesis"),
)


def pytest_configure(config):
    # Once for the whole run, before collection: a missing device is one clear error
    # instead of every cuda case skipped (a run that could still pass) or failed.
    from testing_utils import devices_problem

    problem = devices_problem()
    if problem:
        raise pytest.UsageError(problem)
    # A run meant for one torch release (the op suites under the oldest supported one) that
    # found another would pass without testing what it is for.
    expected = os.environ.get("MY_OPS_EXPECTED_TORCH")
    if expected:
        import torch

        if torch.__version__.split("+")[0] != expected:
            raise pytest.UsageError(
                f"MY_OPS_EXPECTED_TORCH={expected}, but this is torch {torch.__version__}"
            )


def pytest_report_header(config):
    import torch

    import my_ops
    from testing_utils import DEVICES, DEVICES_VARIABLE

    asked = os.environ.get(DEVICES_VARIABLE)
    return [
        f"my_ops library: {my_ops.loaded_path()}",
        f"companion: {my_ops.companion_path()}",
        f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}",
        f"devices under test: {', '.join(DEVICES)} "
        + (f"({DEVICES_VARIABLE}={asked})" if asked is not None else "(what this machine has)"),
    ]
