"""The checks an export's files pass before they go into an edge bundle.

The loader's checks that depend only on the files are made here, as the loader
will make them on the edge machine: the export's file names are the contract's,
manifest.json is in the contract's format, and it lists the sha256 of model.pt2
and of the op library that ships beside it. bundle_check.py (the build's check)
and make_bundle.py (my-ops-bundle, from the wheel) both use them, so a bundle
that every edge machine's loader would refuse is never made.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, NoReturn

from ..contract.package_contract import Contract, ContractError
from ..contract.package_contract import load as load_contract

# Every program's numbers (package_contract.json's exit_codes): a file that does not match
# the export's manifest is an integrity failure, as the loader reports one.
_CODES = load_contract()
EXIT_FAILURE = _CODES.exit_code("other")
EXIT_USAGE = _CODES.exit_code("usage")
EXIT_MISMATCH = _CODES.exit_code("integrity")


class BundleError(Exception):
    """A failure with a one-line message and the exit status it means."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


def contract() -> Contract:
    try:
        return load_contract()
    except ContractError as e:
        raise BundleError(str(e)) from e


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        raise BundleError(f"cannot read {path}: {e.strerror}") from e
    return h.hexdigest()


def read_manifest(path: Path, contract: Contract) -> dict[str, Any]:
    def broken(why: str) -> NoReturn:
        raise BundleError(f"manifest {path} {why}; re-export to get a valid one", EXIT_MISMATCH)

    try:
        data = json.loads(path.read_bytes())
    except OSError as e:
        raise BundleError(f"cannot read manifest {path}: {e.strerror}") from e
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
    # As the loader reads them; a value from the file is then safe to name in a message.
    if not _is_sha256_hex(package["sha256"]):
        broken("is broken: the package's sha256 must be 64 lowercase hex digits")
    if not all(_is_sha256_hex(lib["sha256"]) for lib in libs):
        broken("is broken: each op library's sha256 must be 64 lowercase hex digits")
    return data


def _is_sha256_hex(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def check_names(files: dict[str, Path], contract: Contract) -> None:
    missing = [f for f in contract.export_files if f not in files]
    if missing:
        raise BundleError(
            f"missing {', '.join(missing)} of the export (export_files in the contract)"
        )
    allowed = {*contract.export_files, *contract.optional_export_files}
    foreign = sorted(name for name in files if name not in allowed)
    if foreign:
        raise BundleError(
            f"{', '.join(foreign)} is not an export file (export_files in the contract)"
        )


def check_against_manifest(
    manifest_path: Path, package: Path, ops: Path, contract: Contract
) -> dict[str, Any]:
    """The loader's checks that depend only on the files; returns the manifest."""
    manifest = read_manifest(manifest_path, contract)
    want = manifest["package"]["sha256"]
    got = sha256(package)
    if got != want:
        raise BundleError(
            f"{package} does not match manifest {manifest_path}: sha256 {got}, manifest has "
            f"{want}; the loader would refuse it (re-export, or use the export's own files)",
            EXIT_MISMATCH,
        )
    listed = [lib["sha256"] for lib in manifest["op_libraries"]]
    got = sha256(ops)
    if got not in listed:
        raise BundleError(
            f"--ops {ops} (sha256 {got}) is not listed in manifest {manifest_path}; the export "
            "was built with another op library, and the loader would refuse this one (pass "
            "that library, or re-export with this one)",
            EXIT_MISMATCH,
        )
    return manifest


def check_export(files: dict[str, Path], ops: Path) -> dict[str, Any]:
    """Every check, on an export's files by name; returns the manifest."""
    terms = contract()
    check_names(files, terms)
    for path in [*files.values(), ops]:
        if not path.is_file():
            raise BundleError(f"missing {path}")
    manifest = check_against_manifest(files["manifest.json"], files["model.pt2"], ops, terms)
    check_weights_beside(files, manifest)
    return manifest


def check_weights_beside(files: dict[str, Path], manifest: dict[str, Any]) -> None:
    """weights.bin and weights.json come together, for the package beside them, as the loader
    checks them: a CPU package's export writes them, and the package holds no weights itself."""
    present = [name for name in ("weights.bin", "weights.json") if name in files]
    if not present:
        return
    if len(present) == 1:
        other = "weights.json" if present == ["weights.bin"] else "weights.bin"
        raise BundleError(f"{present[0]} of the export without {other}: ship both, or neither")
    try:
        weights = json.loads(files["weights.json"].read_text())
        names, blob = weights["package"]["sha256"], weights["blob"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BundleError(f"{files['weights.json']} is not a weights manifest: {e}") from e
    if names != manifest["package"]["sha256"]:
        raise BundleError(
            f"{files['weights.json']} is for another package than {files['model.pt2']}; the "
            "loader would refuse it (use the export's own files)",
            EXIT_MISMATCH,
        )
    got = sha256(files["weights.bin"])
    if got != blob:
        raise BundleError(
            f"{files['weights.bin']} does not match {files['weights.json']}: sha256 {got}, the "
            f"manifest has {blob}; the loader would refuse it (use the export's own files)",
            EXIT_MISMATCH,
        )
