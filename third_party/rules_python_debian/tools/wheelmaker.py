"""Builds a wheel (PEP 427) from the arguments rules_python's py_wheel rule passes.

A stand-in for upstream rules_python's tools/wheelmaker.py, which Debian's
rules_python 0.22.1 package does not ship (see ../README.md). It takes the
command line that python/private/py_wheel.bzl of that release builds; nothing
in it is taken from upstream's implementation.

The archive is byte-for-byte reproducible: every entry is dated 1980-01-01
(the earliest date a zip can hold), entries come in a sorted order with the
.dist-info files last and RECORD at the very end, and each one is DEFLATE
compressed at a fixed level. Entry modes are 0o755 for programs and 0o644
for everything else (see is_executable), so pip keeps programs runnable.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
import os
import stat
import sys
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

GENERATOR = "bazel-wheelmaker (third_party/rules_python_debian) 1.0"
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
COMPRESS_LEVEL = 6
EXECUTABLE_MODE = 0o755
REGULAR_MODE = 0o644


class WheelError(Exception):
    """A problem with one input; the message names the file."""


@dataclass(frozen=True)
class Member:
    """One file of the wheel: its name inside the archive and where its bytes come from."""

    arcname: str
    data: bytes
    executable: bool
    origin: str


def escape_segment(segment: str) -> str:
    """Escapes a file name segment as py_wheel.bzl does for the output's name.

    Each run of characters other than letters, digits and '.' becomes one '_',
    so the name written to --name_file matches Bazel's --out when unstamped.
    """
    out: list[str] = []
    for char in segment:
        if char.isalnum() or char == ".":
            out.append(char)
        elif not out or out[-1] != "_":
            out.append("_")
    return "".join(out)


def read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise WheelError(f"{path}: cannot read the {what}: {e}") from e


def read_status_file(path: str) -> dict[str, str]:
    """Parses a workspace status file: one `KEY value` per line, value may hold spaces."""
    values: dict[str, str] = {}
    for line in read_text(path, "workspace status file").splitlines():
        key, _, value = line.partition(" ")
        if key:
            values[key] = value
    return values


def stamp(value: str, status: dict[str, str]) -> str:
    """Replaces each {KEY} of a workspace status key with its value; others stay as written."""
    for key, replacement in status.items():
        value = value.replace("{" + key + "}", replacement)
    return value


def split_pair(spec: str, flag: str) -> tuple[str, str]:
    """Splits `name;path`, the form py_wheel.bzl uses for files and extra .dist-info files."""
    name, sep, path = spec.partition(";")
    if not sep or not name or not path:
        raise WheelError(f"{flag} {spec!r}: expected 'path_in_wheel;real_path'")
    return name, path


def read_input_file_list(path: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for line in read_text(path, "input file list").splitlines():
        if line.strip():
            pairs.append(split_pair(line, f"--input_file_list {path}:"))
    return pairs


def strip_prefix(arcname: str, prefixes: Sequence[str]) -> str:
    """Drops the first of `prefixes` that the name starts with, as upstream does."""
    for prefix in prefixes:
        if arcname.startswith(prefix):
            return arcname[len(prefix) :]
    return arcname


def is_executable(path: Path, data: bytes) -> bool:
    """Whether the entry gets mode 0o755: a source file's own execute bit decides.

    Bazel leaves every file it generates at mode 0o555, so for those (their
    real path is under bazel-out) the bit says nothing, and only a script
    (#!) or an ELF file counts as a program.
    """
    if not path.stat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH):
        return False
    if "bazel-out" in Path(os.path.realpath(path)).parts:
        return data.startswith((b"#!", b"\x7fELF"))
    return True


def read_member(arcname: str, path: Path) -> Member:
    try:
        data = path.read_bytes()
        return Member(arcname, data, is_executable(path, data), str(path))
    except OSError as e:
        raise WheelError(f"{path}: cannot read this input: {e}") from e


def expand_inputs(pairs: Iterable[tuple[str, str]], prefixes: Sequence[str]) -> Iterator[Member]:
    """Yields the files of each input; a directory (a tree artifact) yields its files."""
    for name, real in pairs:
        path = Path(real)
        arcname = strip_prefix(name.replace(os.sep, "/"), prefixes)
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if not p.is_dir()):
                yield read_member(f"{arcname}/{child.relative_to(path).as_posix()}", child)
        elif path.exists():
            yield read_member(arcname, path)
        else:
            raise WheelError(f"{real}: input file does not exist (listed as {name!r})")


def check_arcname(member: Member) -> None:
    parts = member.arcname.split("/")
    if member.arcname.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise WheelError(f"{member.origin}: invalid path inside the wheel: {member.arcname!r}")


def record_line(member: Member) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(member.data).digest()).rstrip(b"=")
    # RECORD is CSV: quote names holding a comma or a quote.
    name = member.arcname
    if any(c in name for c in ',"\n'):
        name = '"' + name.replace('"', '""') + '"'
    return f"{name},sha256={digest.decode('ascii')},{len(member.data)}"


def wheel_file(python_tag: str, abi: str, platform: str) -> str:
    # A dotted tag is a compressed tag set (PEP 425): one Tag line per combination.
    tags = itertools.product(python_tag.split("."), abi.split("."), platform.split("."))
    lines = [
        "Wheel-Version: 1.0",
        f"Generator: {GENERATOR}",
        # As upstream: only a wheel for every platform is pure; one with native
        # files installs into platlib.
        f"Root-Is-Purelib: {'true' if platform == 'any' else 'false'}",
        *(f"Tag: {py}-{ab}-{plat}" for py, ab, plat in tags),
    ]
    return "\n".join(lines) + "\n"


def metadata_file(header: str, version: str, description: str | None) -> str:
    """Completes py_wheel.bzl's METADATA headers with the version and the description body.

    The body follows one blank line (the core metadata format); with no
    description it is "UNKNOWN", what upstream and old setuptools write.
    """
    header = header.rstrip("\n") + "\n" if header.strip() else ""
    body = description if description else "UNKNOWN"
    return f"{header}Version: {version}\n\n{body.rstrip(chr(10))}\n"


def zip_info(arcname: str, executable: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(arcname, date_time=ZIP_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    # Unix, so that pip honours the mode in the upper 16 bits.
    info.create_system = 3
    mode = EXECUTABLE_MODE if executable else REGULAR_MODE
    info.external_attr = (stat.S_IFREG | mode) << 16
    return info


def write_wheel(out: str, members: Sequence[Member], record_name: str) -> None:
    record = "".join(record_line(m) + "\n" for m in members) + f"{record_name},,\n"
    tmp = f"{out}.tmp"
    try:
        with zipfile.ZipFile(tmp, "w", compresslevel=COMPRESS_LEVEL) as zf:
            for m in members:
                zf.writestr(zip_info(m.arcname, m.executable), m.data)
            zf.writestr(zip_info(record_name, False), record.encode("utf-8"))
        os.replace(tmp, out)
    except OSError as e:
        raise WheelError(f"{out}: cannot write the wheel: {e}") from e


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Builds a wheel for rules_python's py_wheel rule.")
    p.add_argument("--name", required=True, help="distribution name")
    p.add_argument("--version", required=True, help="version; {KEY} stamps are replaced")
    p.add_argument("--python_tag", default="py3")
    p.add_argument("--abi", default="none")
    p.add_argument("--platform", default="any")
    p.add_argument("--out", required=True, help="the wheel to write")
    p.add_argument("--name_file", help="receives the wheel's file name (stamped)")
    p.add_argument("--strip_path_prefix", action="append", default=[])
    p.add_argument("--volatile_status_file")
    p.add_argument("--stable_status_file")
    p.add_argument("--input_file", action="append", default=[], help="path_in_wheel;real_path")
    p.add_argument("--input_file_list", action="append", default=[])
    p.add_argument("--metadata_file", help="METADATA headers from py_wheel.bzl")
    p.add_argument("--description_file")
    p.add_argument("--entry_points_file")
    p.add_argument("--extra_distinfo_file", action="append", default=[], help="name;real_path")
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> None:
    status: dict[str, str] = {}
    for status_file in (args.stable_status_file, args.volatile_status_file):
        if status_file:
            status.update(read_status_file(status_file))
    version = stamp(args.version, status)
    name = escape_segment(args.name)
    distinfo = f"{name}-{escape_segment(version)}.dist-info"

    pairs = [split_pair(spec, "--input_file") for spec in args.input_file]
    for file_list in args.input_file_list:
        pairs.extend(read_input_file_list(file_list))
    members = sorted(expand_inputs(pairs, args.strip_path_prefix), key=lambda m: m.arcname)

    header = read_text(args.metadata_file, "metadata file") if args.metadata_file else ""
    if not header:
        header = f"Metadata-Version: 2.1\nName: {args.name}\n"
    description = (
        read_text(args.description_file, "description file") if args.description_file else None
    )
    distinfo_members = [
        Member(
            f"{distinfo}/METADATA",
            metadata_file(header, version, description).encode(),
            False,
            "METADATA",
        ),
        Member(
            f"{distinfo}/WHEEL",
            wheel_file(args.python_tag, args.abi, args.platform).encode(),
            False,
            "WHEEL",
        ),
    ]
    if args.entry_points_file:
        text = read_text(args.entry_points_file, "entry points file")
        entry_points = text if text.endswith("\n") or not text else text + "\n"
        distinfo_members.append(
            Member(
                f"{distinfo}/entry_points.txt", entry_points.encode(), False, args.entry_points_file
            )
        )
    extras = [split_pair(spec, "--extra_distinfo_file") for spec in args.extra_distinfo_file]
    for extra_name, real in sorted(extras):
        distinfo_members.append(read_member(f"{distinfo}/{extra_name}", Path(real)))

    seen: dict[str, str] = {}
    for m in [*members, *distinfo_members]:
        check_arcname(m)
        if m.arcname == f"{distinfo}/RECORD":
            raise WheelError(f"{m.origin}: {m.arcname} is written by the wheelmaker itself")
        if m.arcname in seen:
            raise WheelError(
                f"{m.origin}: {m.arcname} is already in the wheel, from {seen[m.arcname]}"
            )
        seen[m.arcname] = m.origin

    write_wheel(args.out, [*members, *distinfo_members], f"{distinfo}/RECORD")
    if args.name_file:
        tags = "-".join(escape_segment(t) for t in (args.python_tag, args.abi, args.platform))
        wheel_name = f"{name}-{escape_segment(version)}-{tags}.whl"
        try:
            Path(args.name_file).write_text(wheel_name, encoding="utf-8")
        except OSError as e:
            raise WheelError(f"{args.name_file}: cannot write the wheel name: {e}") from e


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        build(args)
    except WheelError as e:
        print(f"wheelmaker: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
