"""Runs pytest on the files a pytest_test target names (see defs.bzl).

pytest runs from $TEST_TMPDIR, so its caches and hypothesis' example
database land in Bazel's per-test scratch space, not in the runfiles tree.
"""

import os
import sys

import pytest


def main(argv: list[str]) -> int:
    files = [os.path.abspath(arg) if arg.endswith(".py") else arg for arg in argv]
    scratch = os.environ.get("TEST_TMPDIR")
    if scratch:
        os.chdir(scratch)
    junit = os.environ.get("XML_OUTPUT_FILE")
    extra = [f"--junitxml={junit}"] if junit else []
    return pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *extra, *files])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
