"""my-ops-bundle: an edge bundle from an export folder, as //deploy:bundle makes one.

usage: my-ops-bundle EXPORT_DIR [--out my_ops_bundle.tar.gz] [--loader PATH] [--ops LIB.so]

The tarball unpacks to my_ops_bundle/: the loader and the op library (by default the
ones this wheel installed), the export's files, run.sh and README.md. Each file is
copied once into a private folder, the copies are checked (the export's file names,
manifest.json's format and its sha256 of model.pt2 and of the op library, as the
loader will check them) and the tarball is written from those same copies, so a
bundle that every edge machine's loader would refuse is never made.

Exit status: 0 on success, 2 on bad usage, 10 when model.pt2 or the op library does
not match manifest.json, 1 on any other failure (the loader's numbers for the same
failures). On failure --out is left as it was.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from ..contract.command_line import NonEmptyValueParser
from .check import (
    EXIT_FAILURE,
    EXIT_MISMATCH,
    EXIT_USAGE,
    BundleError,
    check_export,
    check_names,
    contract,
)

TOP = "my_ops_bundle"
# pkg_tar's timestamp, so the two ways of making a bundle agree.
MTIME = 946684800
_HERE = Path(__file__).resolve().parent


def _die(msg: str, code: int = EXIT_FAILURE) -> NoReturn:
    print(f"my-ops-bundle: error: {msg}", file=sys.stderr)
    sys.exit(code)


class _Parser(NonEmptyValueParser):
    def error(self, message: str) -> NoReturn:
        _die(f"{message} (see --help)", EXIT_USAGE)


def _installed(name: str) -> Path:
    """A file of the installed wheel, my_ops/lib/NAME."""
    import importlib.util

    spec = importlib.util.find_spec("my_ops")
    if spec is None or not spec.submodule_search_locations:
        _die("the my_ops package is not importable; pass --loader and --ops", EXIT_USAGE)
    return Path(list(spec.submodule_search_locations)[0]) / "lib" / name


def _copy_in(src: Path, dst: Path) -> None:
    """src's bytes into dst, opened once and never through a symbolic link."""
    try:
        # O_NONBLOCK: a FIFO in the folder must not hang the open.
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        _die(f"cannot read {src}: {e.strerror}")
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            _die(f"{src} is not a regular file")
        with open(dst, "wb") as out:
            shutil.copyfileobj(f, out, 1 << 20)


def _write_tar(staged: dict[str, Path], executables: set[str], out: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
            t = tarfile.TarInfo(name)
            t.type, t.mode, t.size, t.mtime = kind, mode, size, MTIME
            return t

        tar.addfile(info(f"{TOP}/", tarfile.DIRTYPE, 0o755))
        for name in sorted(staged):
            path = staged[name]
            mode = 0o755 if name in executables else 0o644
            with open(path, "rb") as f:
                tar.addfile(info(f"{TOP}/{name}", tarfile.REGTYPE, mode, path.stat().st_size), f)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as gz:
                gz.write(buf.getvalue())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    p = _Parser(
        prog="my-ops-bundle",
        description=__doc__.split("\n\n")[0],
        epilog=f"Exit status: 0 on success, {EXIT_USAGE} on bad usage (an empty flag value "
        f"included), {EXIT_MISMATCH} when model.pt2 or the op library does not match "
        f"manifest.json, {EXIT_FAILURE} on any other failure (the loader's numbers for the same "
        "failures).",
    )
    p.add_argument("export", type=Path, metavar="EXPORT_DIR", help="an export's --out folder")
    p.add_argument(
        "--out",
        type=Path,
        default=Path(f"{TOP}.tar.gz"),
        help="the tarball to write (default: ./my_ops_bundle.tar.gz)",
    )
    p.add_argument("--loader", type=Path, help="the C++ loader (default: the wheel's)")
    p.add_argument("--ops", type=Path, help="the op library (default: the wheel's libmy_ops.so)")
    args = p.parse_args(argv)

    if not args.export.is_dir():
        _die(f"EXPORT_DIR {args.export} is not a folder", EXIT_USAGE)
    if args.out.is_dir():
        _die(f"--out {args.out} is a folder; name the .tar.gz to write", EXIT_USAGE)
    if not args.out.parent.resolve().is_dir():
        _die(f"--out {args.out}: its folder does not exist", EXIT_USAGE)
    export = {path.name: path for path in args.export.iterdir()}
    pieces = {
        "loader": args.loader or _installed("loader"),
        "libmy_ops.so": args.ops or _installed("libmy_ops.so"),
        "run.sh": _HERE / "run.sh",
        "README.md": _HERE / "BUNDLE_README.md",
    }
    with tempfile.TemporaryDirectory(prefix="my-ops-bundle.") as tmp:
        try:
            # Names first: nothing else of the folder is read, and none can
            # take the place of a bundle piece.
            check_names(export, contract())
            staged = {}
            for name, src in export.items() | pieces.items():
                staged[name] = Path(tmp) / name
                _copy_in(src, staged[name])
            check_export({n: staged[n] for n in export}, staged["libmy_ops.so"])
        except BundleError as e:
            _die(str(e), e.code)
        try:
            _write_tar(staged, {"loader", "run.sh"}, args.out)
        except OSError as e:
            _die(f"cannot write --out {args.out}: {e.strerror}")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
