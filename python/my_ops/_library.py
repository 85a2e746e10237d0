"""Locate and load ``libmy_ops.so`` exactly once.

Search order:

1. an explicit :func:`load_library` call with a path;
2. the ``MY_OPS_LIBRARY`` environment variable;
3. ``lib/libmy_ops.so`` inside this package, where the wheel installs it;
4. Bazel runfiles (``rules_python`` runfiles library, then ``RUNFILES_DIR`` /
   ``TEST_SRCDIR``; see :mod:`my_ops._runfiles`), key ``_main/ops/libmy_ops.so``;
5. the path relative to this package, ``../../ops/libmy_ops.so``, which is where
   the library sits in a Bazel runfiles tree.

Whoever loads the library (this module, ``torch.ops.load_library`` or ``ctypes``), the
first call here that finds the ``my_ops`` operators registered adopts them and runs the
post-load hooks once, so the fakes and autograd formulas are never missing. A second
copy of the library is never opened: its TORCH_LIBRARY block would abort the process.

``libmy_ops.so`` is built on LibTorch's stable ABI and runs under every torch from 2.13 on.
Its companion, ``libmy_ops_torch<release>.so`` beside it, holds what that ABI cannot express
(the ``RMSNorm`` TorchBind class and the C++ autograd entries) and is built for one torch
release, which its name gives: it is loaded after the library when that is the running
torch's release. Without it the ops work (their autograd formulas are Python's) and using
the class raises :class:`CompanionUnavailableError`, naming the torch it needs.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import threading
from pathlib import Path

import torch

from . import _runfiles

ENV_VAR = "MY_OPS_LIBRARY"
RUNFILES_KEY = "_main/ops/libmy_ops.so"
LIBRARY_NAME = "libmy_ops.so"
# Where an installed wheel keeps the library, relative to this package.
PACKAGED_LIBRARY = os.path.join("lib", LIBRARY_NAME)

# Any schema from the TORCH_LIBRARY block: they are all registered together.
_PROBE_OP = "identity_conv_op"

COMPANION_PREFIX = "libmy_ops_torch"

_lock = threading.RLock()
_loaded = False
_loaded_path: str | None = None
_companion_path: str | None = None
_post_load_hooks: list = []


# Caps the CPU kernels' instruction-set tier (ops/common/cpu_isa.h): scalar, avx2, avx512,
# avx512_vnni, amx on x86-64; scalar, neon, neon_dot, neon_i8mm on aarch64.
CPU_ISA_ENV_VAR = "MY_OPS_CPU_ISA"


class CpuIsaError(ValueError):
    """Raised on loading the library when MY_OPS_CPU_ISA names an unknown tier or one this
    CPU lacks; the message is the library's one line, naming the variable and the tiers."""


class CompanionUnavailableError(RuntimeError):
    """Raised on using what only the companion library provides (the RMSNorm class) when it
    is not loaded: it is built for another torch release, or missing."""


def torch_release(version: str | None = None) -> str:
    """``major.minor.patch`` of a torch version (default: the running torch's)."""
    version = torch.__version__ if version is None else version
    match = re.match(r"\d+\.\d+\.\d+", version)
    return match.group(0) if match else version


def companion_name(release: str | None = None) -> str:
    """The companion's file name for a torch release (default: the running torch's)."""
    return f"{COMPANION_PREFIX}{torch_release(release)}.so"


def _companion_folders(library: str | None) -> list[str]:
    """Where a companion is looked for: beside ``library``, then the package's own places."""
    folders = [os.path.dirname(library)] if library else []
    folders += [os.path.dirname(p) for p in candidate_paths() if os.path.dirname(p)]
    return list(dict.fromkeys(folders))


def _load_companion(library: str) -> None:
    """Loads the companion built for the running torch, if there is one: beside ``library``,
    or else where this package would look for the library itself (a library loaded by hand
    from a folder of its own still gets the package's companion)."""
    global _companion_path
    if _companion_path is not None:
        return
    found = next(
        (
            c
            for c in (os.path.join(f, companion_name()) for f in _companion_folders(library))
            if os.path.isfile(c)
        ),
        None,
    )
    if _class_registered():
        # Loaded by another loader: a second copy would register the class again.
        _companion_path = os.path.realpath(found) if found else "(loaded by another loader)"
    elif found is not None:
        torch.ops.load_library(found)
        _companion_path = os.path.realpath(found)


def _class_registered() -> bool:
    try:
        torch.classes.my_ops.RMSNorm  # noqa: B018 (raises when the class is not registered)
    except RuntimeError:
        return False
    return True


def companion_path() -> str | None:
    """The companion library loaded with the ops, or None."""
    with _lock:
        return _companion_path


def require_companion(what: str) -> None:
    """Raise :class:`CompanionUnavailableError`, in one line, unless the companion is loaded."""
    ensure_loaded()
    if _companion_path is not None:
        return
    built = sorted(
        {
            torch_release(os.path.basename(p)[len(COMPANION_PREFIX) : -len(".so")])
            for folder in _companion_folders(_loaded_path)
            for p in glob.glob(os.path.join(glob.escape(folder), COMPANION_PREFIX + "*.so"))
        }
    )
    needs = f"torch {' or '.join(built)}" if built else f"its companion library, {companion_name()}"
    raise CompanionUnavailableError(
        f"my_ops: {what} needs {needs}; this is torch {torch.__version__} (the ops work without it)"
    )


class LibraryNotFoundError(ImportError):
    """Raised when ``libmy_ops.so`` cannot be found.

    ``paths_tried`` lists every location that was checked, in order.
    """

    def __init__(self, message: str, paths_tried: list[str]):
        super().__init__(message)
        self.paths_tried = list(paths_tried)


def candidate_paths(package_dir: str | os.PathLike | None = None) -> list[str]:
    """Return the automatic search locations (environment variable first), in order.

    ``package_dir`` defaults to this package's directory. The library is expected at
    ``<package_dir>/lib/libmy_ops.so`` in an installed wheel, and in a Bazel tree at
    ``<package_dir>/../../ops/libmy_ops.so``, both as written (a symlinked runfiles
    tree) and with symlinks resolved.
    """
    pkg = Path(package_dir) if package_dir is not None else Path(__file__).parent
    candidates: list[str] = []
    env = os.environ.get(ENV_VAR)
    if env:
        candidates.append(env)
    # Before the runfiles: a wheel's package uses its own library even when run
    # from a Bazel target whose runfiles hold another build of it.
    candidates.append(str(pkg / PACKAGED_LIBRARY))
    candidates.extend(_runfiles.candidates(RUNFILES_KEY))
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


def _ops_registered() -> bool:
    return hasattr(torch.ops.my_ops, _PROBE_OP)


def _mapped_files() -> list[str]:
    """Files mapped into this process: the libraries opened by any means (Linux only)."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    fields = (line.split(maxsplit=5) for line in lines)
    return list(dict.fromkeys(f[5] for f in fields if len(f) == 6 and f[5].startswith("/")))


def _library_in_process() -> str | None:
    """The path of the ``libmy_ops.so`` another loader opened, when it can be told apart."""
    seen = [os.path.realpath(p) for p in torch.ops.loaded_libraries] + _mapped_files()
    named = list(dict.fromkeys(p for p in seen if os.path.basename(p) == LIBRARY_NAME))
    return named[0] if len(named) == 1 else None


def _make_global(path: str) -> None:
    """Put the loaded library's symbols in the global scope (RTLD_NOLOAD: never a new copy).

    An AOTInductor package exported with C shims calls aoti_torch_<device>_<op>
    functions that its .so leaves undefined; the dynamic linker finds them only
    in a library loaded with RTLD_GLOBAL, and torch.ops.load_library (ctypes)
    loads with RTLD_LOCAL.
    """
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError:
        pass  # not loaded under this name: the package's load then names the missing shim


def _mark_loaded(path: str | None) -> None:
    global _loaded, _loaded_path
    _loaded, _loaded_path = True, path
    if path is not None:
        _make_global(path)
        _load_companion(path)
    for hook in _post_load_hooks:
        hook()
    cpu_isa()  # a refused MY_OPS_CPU_ISA fails the load, not the first op


def _isa_symbols() -> ctypes.CDLL:
    # The library is RTLD_GLOBAL once loaded (_make_global); its file, where known, is the
    # surer handle.
    if _loaded_path is not None:
        return ctypes.CDLL(_loaded_path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    return ctypes.CDLL(None)


def _isa_string(name: str) -> str | None:
    function = getattr(_isa_symbols(), name)
    function.restype = ctypes.c_char_p
    function.argtypes = []
    value = function()
    return None if value is None else value.decode()


def cpu_isa() -> str:
    """The instruction-set tier the CPU kernels run at in this process: the CPU's highest, or
    MY_OPS_CPU_ISA's cap. Raises :class:`CpuIsaError` when the cap is refused."""
    ensure_loaded()
    name = _isa_string("my_ops_cpu_isa")
    if name is None:
        raise CpuIsaError(_isa_string("my_ops_cpu_isa_error"))
    return name


# What caps torch's own CPU code at each of our tiers, for a comparison at one tier: ATen's
# kernel dispatch (ATEN_CPU_CAPABILITY), oneDNN's (ONEDNN_MAX_CPU_ISA) and MKL's.
_TORCH_CAPS = {
    "scalar": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    "avx512_vnni": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"},
    "amx": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"},
}


def cpu_isa_environment(tier: str) -> dict[str, str]:
    """The environment variables that run a new process's kernels at `tier`: ours
    (MY_OPS_CPU_ISA) and, where torch has a switch for them, torch's own (ATen, oneDNN, MKL),
    so that a benchmark compares the two at one tier. A tier outside our tables gets only ours
    (and is refused by the library)."""
    return {CPU_ISA_ENV_VAR: tier, **_TORCH_CAPS.get(tier, {})}


def cpu_isas() -> list[str]:
    """The tiers this CPU has, lowest first: the values MY_OPS_CPU_ISA may take here."""
    ensure_loaded()
    return (_isa_string("my_ops_cpu_isas") or "").split(",")


def _adopt_registered_ops() -> bool:
    """Whether the ops are registered; adopts them if another loader registered them."""
    if not _loaded and _ops_registered():
        _mark_loaded(_library_in_process())
    return _loaded


def _do_load(path: str) -> str:
    global _loaded_path
    real = os.path.realpath(path)
    if _adopt_registered_ops():
        if _loaded_path is None and real in _mapped_files():
            # Registered by a file this module could not name until now.
            _loaded_path = real
            _make_global(real)
            _load_companion(real)
        if _loaded_path == real:
            return real
        source = repr(_loaded_path) if _loaded_path else "a library that cannot be identified"
        raise RuntimeError(
            f"my_ops: library already loaded from {source}; refusing to load a "
            f"second copy from {path!r}"
        )
    torch.ops.load_library(real)
    _mark_loaded(real)
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
        if _adopt_registered_ops() and _loaded_path is not None:
            return _loaded_path
        return _do_load(find_library())


def try_load() -> bool:
    """Load the library if it can be found; the error is raised again on first use."""
    with _lock:
        if _adopt_registered_ops():
            return True
        try:
            load_library()
        except LibraryNotFoundError:
            return False
        return True


def is_loaded() -> bool:
    """Whether the ops are registered in this process, by this package or any other loader."""
    with _lock:
        return _adopt_registered_ops()


def loaded_path() -> str | None:
    """The library file the ops came from; None if not loaded or not identifiable."""
    with _lock:
        _adopt_registered_ops()
        return _loaded_path


def ensure_loaded() -> None:
    """Load the library now, or raise :class:`LibraryNotFoundError`."""
    if not _loaded:
        with _lock:
            if not _adopt_registered_ops():
                load_library()


def add_post_load_hook(fn) -> None:
    """Run ``fn`` once the ops are registered (immediately if they already are)."""
    with _lock:
        _post_load_hooks.append(fn)
        if _loaded:
            fn()
