"""Locate and load ``libmy_ops.so`` exactly once.

Search order:

1. an explicit :func:`load_library` call with a path;
2. the ``MY_OPS_LIBRARY`` environment variable;
3. Bazel runfiles (``rules_python`` runfiles library, then ``RUNFILES_DIR`` /
   ``TEST_SRCDIR``), key ``_main/ops/libmy_ops.so``;
4. the path relative to this package, ``../../ops/libmy_ops.so``, which is where
   the library sits in a Bazel runfiles tree.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import torch

ENV_VAR = "MY_OPS_LIBRARY"
RUNFILES_KEY = "_main/ops/libmy_ops.so"
LIBRARY_NAME = "libmy_ops.so"

_lock = threading.RLock()
_loaded_path: str | None = None
_post_load_hooks: list = []


class LibraryNotFoundError(ImportError):
    """Raised when ``libmy_ops.so`` cannot be found.

    ``paths_tried`` lists every location that was checked, in order.
    """

    def __init__(self, message: str, paths_tried: list[str]):
        super().__init__(message)
        self.paths_tried = list(paths_tried)


def _runfiles_candidates() -> list[str]:
    candidates: list[str] = []
    runfiles_mod = None
    for modname in ("rules_python.python.runfiles.runfiles", "python.runfiles.runfiles"):
        try:
            runfiles_mod = __import__(modname, fromlist=["Create"])
            break
        except ImportError:
            continue
    if runfiles_mod is not None:
        try:
            r = runfiles_mod.Create()
            loc = r.Rlocation(RUNFILES_KEY) if r is not None else None
            if loc:
                candidates.append(loc)
        except Exception:  # runfiles lookup is best effort
            pass
    for var in ("RUNFILES_DIR", "TEST_SRCDIR"):
        root = os.environ.get(var)
        if root:
            candidates.append(os.path.join(root, RUNFILES_KEY))
    return candidates


def candidate_paths(package_dir: str | os.PathLike | None = None) -> list[str]:
    """Return the automatic search locations (environment variable first), in order.

    ``package_dir`` defaults to this package's directory; the library is expected at
    ``<package_dir>/../../ops/libmy_ops.so``, both as written (a symlinked runfiles tree)
    and with symlinks resolved.
    """
    pkg = Path(package_dir) if package_dir is not None else Path(__file__).parent
    candidates: list[str] = []
    env = os.environ.get(ENV_VAR)
    if env:
        candidates.append(env)
    candidates.extend(_runfiles_candidates())
    candidates.append(os.path.normpath(pkg / ".." / ".." / "ops" / LIBRARY_NAME))
    candidates.append(str((pkg.resolve() / ".." / ".." / "ops" / LIBRARY_NAME).resolve()))
    return list(dict.fromkeys(candidates))  # drop duplicates, keep order


def find_library(package_dir: str | os.PathLike | None = None) -> str:
    """Return the first existing candidate path without loading it.

    An ``MY_OPS_LIBRARY`` setting that points to a missing file is an error rather than
    silently falling through to the other locations.

    Raises:
        LibraryNotFoundError: naming every path tried and how to fix it.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        if os.path.isfile(env):
            return env
        raise _not_found([env], f"{ENV_VAR} points to a missing file")
    tried = candidate_paths(package_dir)
    for c in tried:
        if os.path.isfile(c):
            return c
    raise _not_found(tried, "not found")


def _not_found(paths: list[str], reason: str) -> LibraryNotFoundError:
    lines = "\n".join(f"  - {p}" for p in paths) or "  (none)"
    return LibraryNotFoundError(
        f"my_ops: could not load {LIBRARY_NAME} ({reason}). Paths tried, in order:\n{lines}\n"
        f"Set the {ENV_VAR} environment variable to the library's path, or call "
        f"my_ops.load_library(path).",
        paths,
    )


def _do_load(path: str) -> str:
    global _loaded_path
    real = os.path.realpath(path)
    if _loaded_path is not None:
        if os.path.realpath(_loaded_path) == real:
            return _loaded_path
        raise RuntimeError(
            f"my_ops: library already loaded from {_loaded_path!r}; refusing to load a "
            f"second copy from {path!r}"
        )
    torch.ops.load_library(real)
    _loaded_path = real
    for hook in _post_load_hooks:
        hook()
    return real


def load_library(path: str | os.PathLike | None = None) -> str:
    """Load ``libmy_ops.so`` (idempotent) and register its Python-side pieces.

    With ``path``, load exactly that file. Without it, search the locations listed
    in :func:`candidate_paths`. Returns the path that was loaded.

    Raises:
        LibraryNotFoundError: if no library file was found.
    """
    with _lock:
        if path is not None:
            p = os.fspath(path)
            if not os.path.isfile(p):
                raise _not_found([p], "explicit path does not exist")
            return _do_load(p)
        if _loaded_path is not None:
            return _loaded_path
        return _do_load(find_library())


def try_load() -> bool:
    """Load the library if it can be found; the error is raised again on first use."""
    try:
        load_library()
    except LibraryNotFoundError:
        return False
    return True


def is_loaded() -> bool:
    return _loaded_path is not None


def loaded_path() -> str | None:
    return _loaded_path


def ensure_loaded() -> None:
    """Load the library now, or raise :class:`LibraryNotFoundError`."""
    if _loaded_path is None:
        with _lock:
            if _loaded_path is None:
                load_library()


def add_post_load_hook(fn) -> None:
    """Run ``fn`` after the library is loaded (immediately if it already is)."""
    with _lock:
        _post_load_hooks.append(fn)
        if _loaded_path is not None:
            fn()
