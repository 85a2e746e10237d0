"""The export's persistent compile cache: --cache-dir DIR (default ~/.cache/my_ops/inductor).

Layout:

    lock                     flock: shared while an export uses the cache,
                             exclusive while one evicts
    packages/<key>/          a verified model.pt2 and entry.json (its sha256
                             and size); <key> covers the toolchain key, the
                             Inductor options, the exporter's sources and the
                             serialized exported program, so an unchanged model
                             is not compiled again
    toolchains/<key>/        Inductor's and Triton's own caches, the compiler
                             wrapper and the precompiled headers, shared by
                             every model exported with one toolchain key
    bytecode/                Python bytecode of torch and the exporter
                             (sys.pycache_prefix), which halves the import time

The toolchain key covers what makes a compiled package specific to this
machine's setup: the sha256 of the libmy_ops.so in use, torch's and Python's
versions, the compiler's path, version and flags (the sysroot toolchain and the
host's differ there), the target, device and instruction set, and for CUDA the
toolkit and the GPU. Inductor's own caches do not key on the op library, so
they live under it too: an entry never serves another library or toolchain.

Every entry appears by one rename of a finished folder, so a reader never sees
half of one, and a package is read once and checked against its recorded
sha256 before use; a mismatch is a miss. The size bound is kept at the end of
each export: the least recently used entries go first, those the export just
used are kept. While another export holds the cache, eviction waits for a later
run rather than delete what that export is reading.

AOTInductor writes each compile's wrapper, kernels and weights to a folder of
its own under Inductor's cache before zipping them into the package, and never
reads that folder again: for a 30-layer LLM it is about 1 GB per compile. Those
folders are removed at the same point, whatever the bound, so the toolchain
entry an export is using cannot outgrow it (the small kernels Inductor compiles
to benchmark its tuning choices stay: a later compile reuses them).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# Bumped when the layout or what a key covers changes.
CACHE_FORMAT = 1

DEFAULT_MAX_MB = 4096

_STAMP = ".last_used"
_TMP_PREFIX = ".tmp-"
# The file that marks one of AOTInductor's per-compile output folders.
_AOTI_WRAPPER_SUFFIX = ".wrapper.cpp"


def default_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "my_ops", "inductor")


def digest(parts: Any) -> str:
    """sha256 of a JSON value, independent of dict order."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _touch(path: str) -> None:
    with open(path, "a"):
        pass
    os.utime(path)


def _size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _last_used(path: str) -> float:
    for p in (os.path.join(path, _STAMP), path):
        with contextlib.suppress(OSError):
            return os.stat(p).st_mtime
    return 0.0


@dataclass
class Cache:
    """An open cache folder; use as a context manager (holds the shared lock)."""

    root: str
    max_bytes: int = DEFAULT_MAX_MB << 20
    used: set[str] = field(default_factory=set)
    _lock_fd: int | None = None

    def __enter__(self) -> Cache:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> Cache:
        """Create the folder if needed and take the shared lock; OSError if it cannot be used."""
        for sub in ("packages", "toolchains", "bytecode"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        self._lock_fd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._lock_fd, fcntl.LOCK_SH)
        return self

    def close(self) -> None:
        """Release the lock, evicting first when no other export holds the cache."""
        if self._lock_fd is None:
            return
        fd, self._lock_fd = self._lock_fd, None
        try:
            # Upgrading in place could deadlock two exports that both wait for
            # the other's shared lock; drop it, then try for the exclusive one.
            fcntl.flock(fd, fcntl.LOCK_UN)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another export is using the cache; it evicts at its end
            self.evict()
        finally:
            os.close(fd)

    # -- the three kinds of entry --

    def bytecode_dir(self) -> str:
        path = os.path.join(self.root, "bytecode")
        self._use(path)
        return path

    def toolchain_dir(self, key_parts: dict[str, Any]) -> str:
        """The folder for one toolchain key, created with its key.json on first use."""
        key = digest(key_parts)
        path = os.path.join(self.root, "toolchains", key[:32])
        if not os.path.isdir(path):
            self._publish(path, {"key.json": json.dumps(key_parts, indent=1, sort_keys=True)})
        for sub in ("inductor", "triton", "bin"):
            os.makedirs(os.path.join(path, sub), exist_ok=True)
        self._use(path)
        return path

    def get_package(self, key: str) -> bytes | None:
        """The cached package for `key`, or None; the bytes are read once and checked."""
        path = os.path.join(self.root, "packages", key)
        if not os.path.isdir(path):
            return None
        try:
            with open(os.path.join(path, "entry.json")) as f:
                entry = json.load(f)
            with open(os.path.join(path, "model.pt2"), "rb") as f:
                data = f.read()
        except (OSError, ValueError):
            entry, data = None, b""
        if (
            not isinstance(entry, dict)
            or entry.get("size") != len(data)
            or entry.get("sha256") != hashlib.sha256(data).hexdigest()
        ):
            # Entries appear whole, by one rename, so this is damage: drop it,
            # or it would block the fresh entry this export stores.
            print(f"cache: entry {key[:16]} does not match its sha256; compiling", flush=True)
            shutil.rmtree(path, ignore_errors=True)
            return None
        self._use(path)
        return data

    def put_package(self, key: str, package: str) -> None:
        """Store the finished package file under `key` (the first of two racing exports wins)."""
        with open(package, "rb") as f:
            data = f.read()
        entry = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "created": time.time(),
        }
        path = os.path.join(self.root, "packages", key)
        self._publish(path, {"model.pt2": data, "entry.json": json.dumps(entry)})
        self._use(path)

    # -- writing and evicting --

    def _publish(self, path: str, files: dict[str, str | bytes]) -> None:
        tmp = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=os.path.dirname(path))
        try:
            for name, content in files.items():
                mode = "wb" if isinstance(content, bytes) else "w"
                with open(os.path.join(tmp, name), mode) as f:
                    f.write(content)
                    f.flush()
                    os.fsync(f.fileno())
            try:
                os.rename(tmp, path)
            except OSError as e:
                # Another export published the same key first; theirs is as good.
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _use(self, path: str) -> None:
        self.used.add(path)
        with contextlib.suppress(OSError):
            _touch(os.path.join(path, _STAMP))

    def entries(self) -> list[str]:
        out = [os.path.join(self.root, "bytecode")]
        for sub in ("packages", "toolchains"):
            folder = os.path.join(self.root, sub)
            with contextlib.suppress(OSError):
                out += [os.path.join(folder, n) for n in sorted(os.listdir(folder))]
        return out

    def evict(self) -> list[str]:
        """Delete the least recently used entries until the cache fits max_bytes.

        Needs the exclusive lock: no other export is running, so any temporary
        folder left is from one that was killed. Returns what was deleted.
        """
        removed = self._remove_compile_outputs()
        sizes = {}
        for path in self.entries():
            if os.path.basename(path).startswith(_TMP_PREFIX):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            elif os.path.isdir(path):
                sizes[path] = _size(path)
        total = sum(sizes.values())
        for path in sorted(sizes, key=_last_used):
            if total <= self.max_bytes:
                break
            if path in self.used:
                continue
            shutil.rmtree(path, ignore_errors=True)
            total -= sizes[path]
            removed.append(path)
        return removed

    def _remove_compile_outputs(self) -> list[str]:
        """AOTInductor's per-compile folders under every toolchain entry (see the module doc)."""
        removed = []
        toolchains = os.path.join(self.root, "toolchains")
        with contextlib.suppress(OSError):
            for key in sorted(os.listdir(toolchains)):
                inductor = os.path.join(toolchains, key, "inductor")
                with contextlib.suppress(OSError):
                    for name in sorted(os.listdir(inductor)):
                        path = os.path.join(inductor, name)
                        if not os.path.isdir(path) or os.path.islink(path):
                            continue
                        with contextlib.suppress(OSError):
                            if any(f.endswith(_AOTI_WRAPPER_SUFFIX) for f in os.listdir(path)):
                                shutil.rmtree(path, ignore_errors=True)
                                removed.append(path)
        return removed


def _has_bytecode_beside(module: str) -> bool:
    """Whether `module` (not imported) has its bytecode in the __pycache__ beside it, as a
    Bazel build's wheels do (third_party/python/bytecode.bzl)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    name = os.path.basename(spec.origin)[: -len(".py")]
    cache_tag = sys.implementation.cache_tag
    beside = os.path.join(os.path.dirname(spec.origin), "__pycache__", f"{name}.{cache_tag}.pyc")
    return os.path.isfile(beside)


@contextlib.contextmanager
def bytecode_in(folder: str) -> Iterator[None]:
    """Write and read Python bytecode under `folder` for modules imported from now on.

    Environments that set PYTHONDONTWRITEBYTECODE (many container images) make
    every run compile torch's Python from source, about half of an export's
    import time; the prefix keeps the bytecode out of the source trees. Where
    torch's bytecode is already beside its sources, nothing changes: with a
    prefix set, Python would read bytecode from the prefix only.
    """
    if _has_bytecode_beside("torch"):
        yield
        return
    saved = sys.dont_write_bytecode, sys.pycache_prefix
    sys.dont_write_bytecode, sys.pycache_prefix = False, folder
    try:
        yield
    finally:
        sys.dont_write_bytecode, sys.pycache_prefix = saved
