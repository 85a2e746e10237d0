"""my-ops-run: the C++ loader that the wheel installs, started with this environment's torch.

The loader is linked against LibTorch, which a pip environment holds in torch/lib,
and (in the CUDA build) against the CUDA libraries of the nvidia-* wheels. This
launcher finds both without importing torch, puts them on LD_LIBRARY_PATH, and
replaces itself with the loader: its flags, messages and exit statuses are the
loader's (my-ops-run --help). The op library sits beside the loader, where the
loader looks by default.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

# The loader's own status for a usage error (deploy/loader/failure.h).
EXIT_USAGE = 2
LOADER = "loader"


def _die(msg: str) -> NoReturn:
    print(f"my-ops-run: error: {msg}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def installed_loader() -> str:
    """The loader binary of the installed my_ops wheel: my_ops/lib/loader."""
    package = _package_dir("my_ops")
    if package is None:
        _die("the my_ops package is not importable in this environment")
    return os.path.join(package, "lib", LOADER)


def library_dirs() -> list[str]:
    """torch/lib, and the lib folders of the nvidia-* wheels on sys.path, in that order.

    pip installs them side by side, where torch's own RPATH finds them; a torch
    made importable from elsewhere (a .pth file, PYTHONPATH) has them in other
    folders, which is why sys.path is searched as torch itself does.
    """
    torch = _package_dir("torch")
    if torch is None:
        _die("torch is not installed in this environment (pip install torch==2.14.1)")
    dirs = [os.path.join(torch, "lib")]
    for entry in sys.path:
        dirs.extend(
            sorted(glob.glob(os.path.join(glob.escape(entry or "."), "nvidia", "*", "lib")))
        )
    return list(dict.fromkeys(os.path.abspath(d) for d in dirs))


# The op library's companion, named for the torch release the wheel's C++ (the loader too) is
# built for: my_ops/lib/libmy_ops_torch<release>.so.
COMPANION_PREFIX = "libmy_ops_torch"


def check_torch_release(lib_dir: str) -> None:
    """Exits in one line unless the installed torch is the release the loader is built for.

    The loader is built on LibTorch's C++ API, whose ABI changes with every release, so under
    another torch it would fail to start on a missing symbol, or worse.
    """
    built = [
        os.path.basename(p)[len(COMPANION_PREFIX) : -len(".so")]
        for p in glob.glob(os.path.join(glob.escape(lib_dir), COMPANION_PREFIX + "*.so"))
    ]
    try:
        installed = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return  # library_dirs says so
    release = installed.split("+")[0]
    if built and release not in built:
        _die(
            f"the loader is built for torch {' or '.join(sorted(built))}; this environment has "
            f"torch {installed} (pip install torch=={sorted(built)[-1]})"
        )


def main(argv: Sequence[str] | None = None) -> NoReturn:
    args = list(sys.argv[1:] if argv is None else argv)
    loader = installed_loader()
    if not os.access(loader, os.X_OK):
        _die(f"{loader} is missing or not executable; reinstall the my_ops wheel")
    check_torch_release(os.path.dirname(loader))
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [*library_dirs(), *filter(None, env.get("LD_LIBRARY_PATH", "").split(os.pathsep))]
    )
    try:
        os.execve(loader, [loader, *args], env)
    except OSError as e:
        _die(f"cannot run {loader}: {e.strerror}")


if __name__ == "__main__":
    main()
