"""Files in a Bazel runfiles tree, for this package and for deploy/.

The lookup is the ``rules_python`` runfiles library's (``@rules_python//python/runfiles``),
which also reads a runfiles manifest and maps apparent repository names. The code also
runs outside Bazel, where that library is absent; then, and after it, ``RUNFILES_DIR``
and ``TEST_SRCDIR`` (which the library does not read) are tried by hand.

Keys are runfiles paths as ``$(rlocationpath ...)`` gives them: ``_main/ops/libmy_ops.so``
for this repository, ``<repository>/path`` for another. Importing this module imports
``my_ops``, and so torch: code that must not (the deploy tests' conftest, which resolves
``MY_OPS_LIBRARY`` before ``my_ops`` may read it) uses the library directly.
"""

from __future__ import annotations

import functools
import os
from typing import Any

MAIN_REPOSITORY = "_main"
# The variables a runfiles tree is named by when the library cannot be used.
_ROOT_VARIABLES = ("RUNFILES_DIR", "TEST_SRCDIR")


# What runfiles.Create() reads; the object is made once per combination.
_LIBRARY_VARIABLES = ("RUNFILES_MANIFEST_FILE", "RUNFILES_DIR", "RUNFILES_MANIFEST_ONLY")


def _library() -> Any | None:
    """A runfiles object of the rules_python library for this process's environment."""
    return _library_for(tuple(os.environ.get(v) for v in _LIBRARY_VARIABLES))


# Loading a manifest-based tree parses the whole manifest (about 0.2 s for the
# exporter's), and one export looks up a dozen files.
@functools.lru_cache(maxsize=4)
def _library_for(_env: tuple[str | None, ...]) -> Any | None:
    try:
        from python.runfiles import runfiles
    except ImportError:
        return None
    try:
        return runfiles.Create()
    except (OSError, ValueError):
        # A RUNFILES_MANIFEST_FILE that cannot be read: the roots by hand still may.
        return None


def candidates(key: str) -> list[str]:
    """Where the runfile ``key`` may be, best first, none checked to exist."""
    found: list[str] = []
    r = _library()
    if r is not None:
        try:
            # source_repo="": keys are written as this repository sees them,
            # whichever file this module was loaded from.
            loc = r.Rlocation(key, source_repo="")
        except (TypeError, ValueError):
            loc = None
        if loc:
            found.append(loc)
    for var in _ROOT_VARIABLES:
        root = os.environ.get(var)
        if root:
            found.append(os.path.join(root, key))
    return list(dict.fromkeys(found))


def rlocation(key: str) -> str | None:
    """The path of the runfile ``key``, or None when no runfiles tree holds it."""
    return next((p for p in candidates(key) if os.path.exists(p)), None)


def root() -> str | None:
    """The runfiles directory, for files that name others relative to it; None outside Bazel."""
    r = _library()
    if r is not None:
        directory = r.EnvVars().get("RUNFILES_DIR")
        if directory and os.path.isdir(directory):
            return directory
    for var in _ROOT_VARIABLES:
        directory = os.environ.get(var)
        if directory and os.path.isdir(directory):
            return directory
    return None
