"""Packs the C++ SDK: my_ops_sdk-<version>-<target>.tar.gz (//deploy/sdk:sdk).

  make_sdk.py --out SDK.tar.gz --top FOLDER --subst KEY=VALUE ... \
      --file DEST=SRC ... --template DEST=SRC ... --library DEST=SRC

--file copies SRC to FOLDER/DEST; --template does the same replacing each @KEY@ by its value
(and refuses a template with a key left over); --library installs a shared library as DEST
(lib/libfoo.so.1.2.3) with the links its soname and the linker look for (libfoo.so.1 and
libfoo.so). The archive is reproducible: sorted entries, fixed times and owners.
"""

from __future__ import annotations

import argparse
import gzip
import io
import re
import sys
import tarfile
from pathlib import Path


def _pairs(values: list[str], flag: str) -> list[tuple[str, Path]]:
    pairs = []
    for value in values:
        dest, sep, src = value.partition("=")
        if not sep or not dest or not src:
            sys.exit(f"make_sdk: error: {flag} takes DEST=SRC, got {value!r}")
        pairs.append((dest, Path(src)))
    return pairs


def _substitute(text: str, subst: dict[str, str], src: Path) -> str:
    for key, value in subst.items():
        text = text.replace(f"@{key}@", value)
    if left := sorted(set(re.findall(r"@([A-Z0-9_]+)@", text))):
        sys.exit(f"make_sdk: error: {src} has keys with no --subst: {', '.join(left)}")
    return text


def _library_links(dest: str) -> list[tuple[str, str]]:
    """(link, target) for lib/libfoo.so.1.2.3: libfoo.so.1 and libfoo.so, both to the file."""
    folder, _, name = dest.rpartition("/")
    match = re.fullmatch(r"(lib[\w.+-]+?\.so)\.(\d+)(?:\.\d+)*", name)
    if not match:
        sys.exit(f"make_sdk: error: --library wants lib<name>.so.<major>[.<minor>...], got {name}")
    base, major = match.groups()
    prefix = f"{folder}/" if folder else ""
    return [(f"{prefix}{base}.{major}", name), (f"{prefix}{base}", name)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--top", required=True)
    parser.add_argument("--subst", action="append", default=[])
    parser.add_argument("--file", action="append", default=[])
    parser.add_argument("--template", action="append", default=[])
    parser.add_argument("--library", action="append", default=[])
    args = parser.parse_args(argv)
    subst = dict(pair.partition("=")[::2] for pair in args.subst)

    entries: dict[str, tuple[bytes | None, int, str | None]] = {}  # name -> (data, mode, link)
    for dest, src in _pairs(args.file, "--file"):
        library = dest.startswith("lib/") and ".so" in Path(dest).name
        entries[dest] = (src.read_bytes(), 0o755 if library else 0o644, None)
    for dest, src in _pairs(args.template, "--template"):
        entries[dest] = (_substitute(src.read_text(), subst, src).encode(), 0o644, None)
    for dest, src in _pairs(args.library, "--library"):
        entries[dest] = (src.read_bytes(), 0o755, None)
        for link, target in _library_links(dest):
            entries[link] = (None, 0o777, target)

    folders = {str(Path(name).parent) for name in entries} - {"."}
    for folder in list(folders):
        folders.update(str(p) for p in Path(folder).parents if str(p) != ".")

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
            t = tarfile.TarInfo(f"{args.top}/{name}" if name else args.top)
            t.type, t.mode, t.size, t.mtime = kind, mode, size, 0
            t.uid = t.gid = 0
            t.uname = t.gname = "root"
            return t

        tar.addfile(info("", tarfile.DIRTYPE, 0o755))
        for folder in sorted(folders):
            tar.addfile(info(folder, tarfile.DIRTYPE, 0o755))
        for name in sorted(entries):
            data, mode, link = entries[name]
            if link is not None:
                t = info(name, tarfile.SYMTYPE, mode)
                t.linkname = link
                tar.addfile(t)
            else:
                tar.addfile(info(name, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))
    # mtime=0 and no file name in the gzip header: the same inputs give the same bytes.
    with open(args.out, "wb") as out:
        with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
            gz.write(buf.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
