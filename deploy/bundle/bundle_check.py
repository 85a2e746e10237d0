"""Check an export's files before they go into an edge bundle, then copy them.

usage: bundle_check.py --ops LIB.so --out DIR FILE...

FILE... are an export's files (export_files in package_contract.json: all of
the required ones, and the optional ones it wrote). The loader's checks that
depend only on the files are made here, as the loader will make them on the
edge machine: manifest.json must be in this contract's format, and list the
sha256 of model.pt2 and of LIB.so. Only then are the files copied into DIR,
so a bundle built from DIR is never one that every edge machine refuses.

Exit status: 0 on success, 2 on bad usage, 10 when model.pt2 or LIB.so does
not match manifest.json (or the manifest is unreadable as one), 1 on any
other failure: the loader's numbers for the same failures. On failure nothing is written into DIR.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import NoReturn

from deploy.bundle.check import EXIT_USAGE, BundleError, check_export
from deploy.contract.command_line import NonEmptyValueParser


def _die(msg: str, code: int) -> NoReturn:
    print(f"bundle_check: error: {msg}", file=sys.stderr)
    sys.exit(code)


class _Parser(NonEmptyValueParser):
    def error(self, message: str) -> NoReturn:
        _die(f"{message} (see --help)", EXIT_USAGE)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="bundle_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("files", type=Path, nargs="+", metavar="FILE")
    args = p.parse_args(argv)

    files: dict[str, Path] = {}
    for path in args.files:
        if path.name in files:
            _die(f"{path} and {files[path.name]} have the same name", 1)
        files[path.name] = path
    try:
        check_export(files, args.ops)
    except BundleError as e:
        _die(str(e), e.code)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, path in files.items():
            shutil.copyfile(path, args.out / name)
    except OSError as e:
        _die(f"cannot write {args.out}: {e.strerror}", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
