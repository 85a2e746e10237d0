"""Pack the edge bundle: loader, libmy_ops.so, an export's outputs, run.sh and README.

The export's manifest.json goes in too (and manifest.sig when the export was
signed): run.sh has the loader check the package and library against it.
make_bundle checks them first, as the loader will (sha256 of model.pt2 and of
--ops against manifest.json), so it never packs a bundle that fails on every
edge machine.

usage: make_bundle [--export-dir DIR] [--loader BIN] [--ops LIB.so] [--output FILE.tar.gz]

Defaults: --export-dir is the export tool's default output folder
($BUILD_WORKSPACE_DIRECTORY/out, else ./out); --loader and --ops come from
$MY_OPS_LOADER and $MY_OPS_LIBRARY; --output is my_ops_bundle.tar.gz beside the
export folder. Everything sits under one top-level folder, my_ops_bundle/.

Exit status: 0 on success, 2 on bad usage, 3 when model.pt2 or --ops does not
match manifest.json (or the manifest is unreadable as one), 1 on any other
failure. On failure no archive is written and an existing one is kept.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, NoReturn

# absolute(), not resolve(): keep to the runfiles tree under Bazel.
HERE = Path(os.path.abspath(__file__)).parent
# package_contract.py sits beside this file; loading this file by path, as the
# tests do, does not put its folder on sys.path.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from package_contract import ContractError  # noqa: E402
from package_contract import load as load_contract  # noqa: E402

TOP = "my_ops_bundle"
EXPORT_FILES = ("model.pt2", "sample_input.pt", "expected_output.pt", "manifest.json")
# Present only when the export was signed.
OPTIONAL_EXPORT_FILES = ("manifest.sig",)
EXIT_FAILURE = 1
EXIT_MISMATCH = 3


def _die(msg: str, code: int = EXIT_FAILURE) -> NoReturn:
    print(f"make_bundle: error: {msg}", file=sys.stderr)
    sys.exit(code)


def _default_export_dir() -> Path:
    base = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    return Path(base) / "out"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        _die(f"cannot read {path}: {e.strerror}")
    return h.hexdigest()


def _read_manifest(path: Path) -> dict[str, Any]:
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
    try:
        # The format export.py writes and the C++ loader reads.
        fmt = load_contract().manifest_format
    except ContractError as e:
        _die(str(e))
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


def _check_against_manifest(manifest_path: Path, package: Path, ops: Path) -> None:
    """The loader's checks that depend only on the files: fail here, not on every edge host."""
    manifest = _read_manifest(manifest_path)
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


def _add(tar: tarfile.TarFile, src: Path, name: str, executable: bool) -> None:
    # Normalised metadata: the archive depends only on the files' contents.
    data = src.read_bytes()
    info = tarfile.TarInfo(f"{TOP}/{name}")
    info.size = len(data)
    info.mode = 0o755 if executable else 0o644
    info.mtime = 0
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))


def _write_archive(output: Path, files: list[tuple[Path, str, bool]]) -> None:
    # A temporary file beside the target, renamed on success, so a failure or
    # an interrupt never leaves a partial archive (or replaces a good one).
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    except OSError as e:
        _die(f"cannot write {output}: {e.strerror}")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw:
            # mkstemp makes the file 0600; an archive is for others to read.
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(raw.fileno(), 0o666 & ~umask)
            # mtime 0 and no file name in the gzip header, for the same reason
            # _add normalises the tar headers.
            with (
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
                tarfile.open(fileobj=gz, mode="w") as tar,
            ):
                for src, name, executable in files:
                    _add(tar, src.resolve(), name, executable)
        os.replace(tmp, output)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            _die(f"cannot write {output}: {e.strerror}")
        raise


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make_bundle", description=__doc__.split("\n\n")[0])
    p.add_argument("--export-dir", type=Path, default=None)
    p.add_argument("--loader", type=Path, default=os.environ.get("MY_OPS_LOADER"))
    p.add_argument("--ops", type=Path, default=os.environ.get("MY_OPS_LIBRARY"))
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args(argv)

    # Relative paths are the user's, also under `bazel run` (cwd = runfiles).
    user_cwd = Path(os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd())
    export_dir = (user_cwd / (args.export_dir or _default_export_dir())).resolve()
    output = (user_cwd / (args.output or export_dir.parent / f"{TOP}.tar.gz")).resolve()
    if not args.loader or not args.ops:
        _die("pass --loader and --ops (or set MY_OPS_LOADER and MY_OPS_LIBRARY)")
    loader, ops = user_cwd / args.loader, user_cwd / args.ops
    files = [(loader, "loader", True), (ops, "libmy_ops.so", False)]
    files += [(export_dir / f, f, False) for f in EXPORT_FILES]
    files += [
        (export_dir / f, f, False) for f in OPTIONAL_EXPORT_FILES if (export_dir / f).exists()
    ]
    files += [(HERE / "run.sh", "run.sh", True), (HERE / "BUNDLE_README.md", "README.md", False)]
    for src, _, _ in files:
        if not src.is_file():
            _die(f"missing {src} (run the export first?)")
    _check_against_manifest(export_dir / "manifest.json", export_dir / "model.pt2", ops)

    _write_archive(output, files)
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
