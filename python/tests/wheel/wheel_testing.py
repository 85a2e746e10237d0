"""Paths the wheel tests share: the wheel files and other runfiles, by environment variable."""

from __future__ import annotations

import os


def runfile(path: str) -> str:
    """A $(rootpath ...) value as an absolute path (pytest runs from $TEST_TMPDIR)."""
    root = os.environ.get("RUNFILES_DIR") or os.environ["TEST_SRCDIR"]
    for candidate in (os.path.join(root, "_main", path), os.path.join(root, path)):
        if os.path.exists(candidate):
            return os.path.normpath(candidate)
    raise FileNotFoundError(f"{path} is not in the runfiles under {root}")


def wheel_path(variable: str = "MY_OPS_WHEEL") -> str:
    """The wheel a test target names in `variable` ($(rootpath :wheel))."""
    return runfile(os.environ[variable])
