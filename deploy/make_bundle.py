"""Pack the edge bundle: loader, libmy_ops.so, an export's outputs, run.sh and README.

The export's manifest.json goes in too (and manifest.sig when the export was
signed): run.sh has the loader check the package and library against it.

usage: make_bundle [--export-dir DIR] [--loader BIN] [--ops LIB.so] [--output FILE.tar.gz]

Defaults: --export-dir is the export tool's default output folder
($BUILD_WORKSPACE_DIRECTORY/out, else ./out); --loader and --ops come from
$MY_OPS_LOADER and $MY_OPS_LIBRARY; --output is my_ops_bundle.tar.gz beside the
export folder. Everything sits under one top-level folder, my_ops_bundle/.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
from pathlib import Path

# absolute(), not resolve(): keep to the runfiles tree under Bazel.
HERE = Path(os.path.abspath(__file__)).parent
TOP = "my_ops_bundle"
EXPORT_FILES = ("model.pt2", "sample_input.pt", "expected_output.pt", "manifest.json")
# Present only when the export was signed.
OPTIONAL_EXPORT_FILES = ("manifest.sig",)


def _die(msg: str) -> None:
    print(f"make_bundle: error: {msg}", file=sys.stderr)
    sys.exit(1)


def _default_export_dir() -> Path:
    base = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    return Path(base) / "out"


def _add(tar: tarfile.TarFile, src: Path, name: str, executable: bool) -> None:
    # Normalised metadata: the archive depends only on the files' contents.
    data = src.read_bytes()
    info = tarfile.TarInfo(f"{TOP}/{name}")
    info.size = len(data)
    info.mode = 0o755 if executable else 0o644
    info.mtime = 0
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make_bundle", description=__doc__.split("\n\n")[0])
    p.add_argument("--export-dir", type=Path, default=None)
    p.add_argument("--loader", default=os.environ.get("MY_OPS_LOADER"))
    p.add_argument("--ops", default=os.environ.get("MY_OPS_LIBRARY"))
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args(argv)

    # Relative paths are the user's, also under `bazel run` (cwd = runfiles).
    user_cwd = Path(os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd())
    export_dir = (user_cwd / (args.export_dir or _default_export_dir())).resolve()
    output = (user_cwd / (args.output or export_dir.parent / f"{TOP}.tar.gz")).resolve()
    if not args.loader or not args.ops:
        _die("pass --loader and --ops (or set MY_OPS_LOADER and MY_OPS_LIBRARY)")
    files = [(Path(args.loader), "loader", True), (Path(args.ops), "libmy_ops.so", False)]
    files += [(export_dir / f, f, False) for f in EXPORT_FILES]
    files += [
        (export_dir / f, f, False) for f in OPTIONAL_EXPORT_FILES if (export_dir / f).exists()
    ]
    files += [(HERE / "run.sh", "run.sh", True), (HERE / "BUNDLE_README.md", "README.md", False)]
    for src, _, _ in files:
        if not src.is_file():
            _die(f"missing {src} (run the export first?)")

    # Write beside the target and rename, so a failure leaves no broken archive.
    tmp = output.with_name(output.name + ".tmp")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for src, name, executable in files:
                _add(tar, src.resolve(), name, executable)
        os.replace(tmp, output)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        _die(f"cannot write {output}: {e.strerror}")
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
