"""Check an export's files before they go into an edge bundle, then copy them.

usage: bundle_check.py --ops LIB.so --out DIR FILE...

FILE... are an export's files (export_files in package_contract.json: all of
the required ones, and the optional ones it wrote). The loader's checks that
depend only on the files are made here, as the loader will make them on the
edge machine: manifest.json must be in this contract's format, and list the
sha256 of model.pt2 and of LIB.so. Only then are the files copied into DIR,
so a bundle built from DIR is never one that every edge machine refuses.

Exit status: 0 on success, 2 on bad usage, 3 when model.pt2 or LIB.so does
not match manifest.json (or the manifest is unreadable as one), 1 on any
other failure. On failure nothing is written into DIR.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any, NoReturn

from deploy.contract.package_contract import Contract, ContractError
from deploy.contract.package_contract import load as load_contract

EXIT_FAILURE = 1
EXIT_MISMATCH = 3


def _die(msg: str, code: int = EXIT_FAILURE) -> NoReturn:
    print(f"bundle_check: error: {msg}", file=sys.stderr)
    sys.exit(code)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        _die(f"cannot read {path}: {e.strerror}")
    return h.hexdigest()


def _read_manifest(path: Path, contract: Contract) -> dict[str, Any]:
    def broken(why: str) -> NoReturn:
        _die(f"manifest {path} {why}; re-export to get a valid one", EXIT_MISMATCH)

    try:
        data = json.loads(path.read_bytes())
    except OSError as e:
        _die(f"cannot read manifest {path}: {e.strerror}")
    except ValueError:
        broken("is not valid JSON")
    if not isinstance(data, dict):
        broken("is not a JSON object")
    # The format the exporter writes and the C++ loader reads.
    fmt = contract.manifest_format
    if data.get("format") != fmt:
        broken(f"has format {data.get('format')!r}, not {fmt!r}")
    package = data.get("package")
    if not isinstance(package, dict) or not isinstance(package.get("sha256"), str):
        broken("has no package sha256")
    libs = data.get("op_libraries")
    if not isinstance(libs, list) or not all(
        isinstance(lib, dict) and isinstance(lib.get("sha256"), str) for lib in libs
    ):
        broken("has no op_libraries list of sha256 sums")
    return data


def _check_names(files: dict[str, Path], contract: Contract) -> None:
    missing = [f for f in contract.export_files if f not in files]
    if missing:
        _die(f"missing {', '.join(missing)} of the export (export_files in the contract)")
    allowed = {*contract.export_files, *contract.optional_export_files}
    foreign = sorted(name for name in files if name not in allowed)
    if foreign:
        _die(f"{', '.join(foreign)} is not an export file (export_files in the contract)")


def _check_against_manifest(manifest_path: Path, package: Path, ops: Path, contract: Contract):
    """The loader's checks that depend only on the files: fail here, not on every edge host."""
    manifest = _read_manifest(manifest_path, contract)
    want = manifest["package"]["sha256"]
    got = _sha256(package)
    if got != want:
        _die(
            f"{package} does not match manifest {manifest_path}: sha256 {got}, manifest has "
            f"{want}; the loader would refuse it (re-export, or use the export's own files)",
            EXIT_MISMATCH,
        )
    listed = [lib["sha256"] for lib in manifest["op_libraries"]]
    got = _sha256(ops)
    if got not in listed:
        _die(
            f"--ops {ops} (sha256 {got}) is not listed in manifest {manifest_path}; the export "
            "was built with another op library, and the loader would refuse this one (pass "
            "that library, or re-export with this one)",
            EXIT_MISMATCH,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bundle_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("files", type=Path, nargs="+", metavar="FILE")
    args = p.parse_args(argv)

    try:
        contract = load_contract()
    except ContractError as e:
        _die(str(e))
    files: dict[str, Path] = {}
    for path in args.files:
        if path.name in files:
            _die(f"{path} and {files[path.name]} have the same name")
        files[path.name] = path
    _check_names(files, contract)
    for path in [*files.values(), args.ops]:
        if not path.is_file():
            _die(f"missing {path}")
    _check_against_manifest(files["manifest.json"], files["model.pt2"], args.ops, contract)

    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, path in files.items():
            shutil.copyfile(path, args.out / name)
    except OSError as e:
        _die(f"cannot write {args.out}: {e.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
