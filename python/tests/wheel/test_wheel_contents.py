"""What the two wheels hold, read as zip files: names, RECORD, metadata, tags, ELF files.

pip does not check RECORD's hashes when it installs a wheel, so this test
recomputes each member's sha256 and size itself; a wheel with one member
changed behind RECORD's back fails it (test_record_check_catches_a_changed_member).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from wheel_testing import runfile, wheel_path

WHEELS = {
    "x86_64": ("MY_OPS_WHEEL", "MY_OPS_BUNDLE", "X86-64"),
    "aarch64": ("MY_OPS_WHEEL_AARCH64", "MY_OPS_BUNDLE_AARCH64", "AArch64"),
}
# The op library and the loader, which the edge bundle ships too, and the op library's companion,
# built for the locked torch release (the loader holds what it holds).
BUNDLED = {"my_ops/lib/libmy_ops.so", "my_ops/lib/loader"}
NATIVE = BUNDLED | {f"my_ops/lib/libmy_ops_torch{os.environ['MY_OPS_COMPANION_RELEASE']}.so"}
# Source folders in the workspace for the wheel's folders (python/wheel.bzl lays them out).
SOURCE_FOLDERS = [("my_ops/deploy/", "deploy/"), ("my_ops/", "python/my_ops/")]


@pytest.fixture(params=sorted(WHEELS), scope="module")
def wheel(request) -> dict:
    variable, bundle, machine = WHEELS[request.param]
    path = wheel_path(variable)
    with zipfile.ZipFile(path) as z:
        members = {i.filename: (i, z.read(i)) for i in z.infolist()}
    return {
        "arch": request.param,
        "path": path,
        "members": members,
        "bundle": runfile(os.environ[bundle]),
        "machine": machine,
    }


def _dist_info(wheel: dict) -> str:
    (name,) = {n.split("/")[0] for n in wheel["members"] if n.split("/")[0].endswith(".dist-info")}
    return name


def _text(wheel: dict, name: str) -> str:
    return wheel["members"][f"{_dist_info(wheel)}/{name}"][1].decode()


def _tag(wheel: dict) -> str:
    return os.path.basename(wheel["path"]).removesuffix(".whl").split("-", 2)[2]


def test_name_and_tags_say_the_platform(wheel) -> None:
    tag = _tag(wheel)
    python, abi, platform = tag.split("-")
    assert (python, abi) == ("py3", "none"), tag
    assert platform.startswith("manylinux_2_") and platform.endswith("_" + wheel["arch"]), tag
    lines = _text(wheel, "WHEEL").splitlines()
    assert f"Tag: {tag}" in lines, lines
    # A platform wheel installs into platlib.
    assert "Root-Is-Purelib: false" in lines, lines


def test_metadata_requires_the_torch_releases_the_library_supports(wheel) -> None:
    lines = _text(wheel, "METADATA").splitlines()
    requires = [
        Requirement(line.removeprefix("Requires-Dist: "))
        for line in lines
        if line.startswith("Requires-Dist:")
    ]
    (torch,) = [r for r in requires if r.name == "torch"]
    # From the stable ABI's target release to the newest one tested (the locked one).
    for version in ("2.13.0", "2.13.1", "2.14.0", "2.14.1"):
        assert torch.specifier.contains(version), (version, str(torch))
    for version in ("2.12.1", "2.15.0"):
        assert not torch.specifier.contains(version), (version, str(torch))
    assert "Name: my_ops" in lines or "Name: my-ops" in lines, lines


def test_console_scripts(wheel) -> None:
    text = _text(wheel, "entry_points.txt")
    for line in (
        "my-ops-export = my_ops.deploy.exporter.__main__:console_main",
        "my-ops-run = my_ops.deploy.loader.launch:main",
        "my-ops-bundle = my_ops.deploy.bundle.make_bundle:main",
    ):
        assert line in text, text


def _source_of(name: str) -> str | None:
    for inside, outside in SOURCE_FOLDERS:
        if name.startswith(inside):
            return outside + name.removeprefix(inside)
    return None


def test_only_the_package_and_its_native_files(wheel) -> None:
    dist = _dist_info(wheel)
    names = set(wheel["members"])
    package = {n for n in names if not n.startswith(dist + "/")}
    assert NATIVE <= package, sorted(package)
    for name in package - NATIVE:
        parts = name.split("/")
        assert parts[0] == "my_ops", name
        assert "__pycache__" not in parts and not name.endswith(".pyc"), name
        assert "tests" not in parts and not parts[-1].startswith("test_"), name
        assert not parts[-1].startswith("BUILD") and not name.endswith(".bzl"), name
        # Every other member is a file of the package's sources, byte for byte.
        source = _source_of(name)
        assert source is not None, name
        assert Path(runfile(source)).read_bytes() == wheel["members"][name][1], name
    for name in (
        "my_ops/__init__.py",
        # my_ops.deploy.export, the exporter as a Python function.
        "my_ops/deploy/__init__.py",
        "my_ops/deploy/exporter/api.py",
        "my_ops/deploy/exporter/__main__.py",
        "my_ops/deploy/contract/package_contract.json",
        "my_ops/deploy/bundle/run.sh",
    ):
        assert name in package, name
    assert "my_ops/deploy/exporter/bazel_main.py" not in package


def _record_errors(members: dict, record_text: str, record_name: str) -> list[str]:
    errors, seen = [], set()
    for row in csv.reader(io.StringIO(record_text)):
        name, digest, size = row
        if name in seen:
            errors.append(f"{name} listed twice")
        seen.add(name)
        if name == record_name:
            if digest or size:
                errors.append("RECORD lists a hash for itself")
            continue
        if name not in members:
            errors.append(f"{name} is listed but not in the wheel")
            continue
        data = members[name][1]
        want = (
            "sha256="
            + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        )
        if digest != want or size != str(len(data)):
            errors.append(f"{name}: RECORD has {digest},{size}, the member is {want},{len(data)}")
    errors.extend(f"{name} is not in RECORD" for name in set(members) - seen)
    return errors


def test_record_lists_every_member_with_its_hash(wheel) -> None:
    record = f"{_dist_info(wheel)}/RECORD"
    assert _record_errors(wheel["members"], _text(wheel, "RECORD"), record) == []


def test_record_check_catches_a_changed_member(wheel) -> None:
    record = f"{_dist_info(wheel)}/RECORD"
    changed = dict(wheel["members"])
    info, data = changed["my_ops/__init__.py"]
    changed["my_ops/__init__.py"] = (info, data + b"\n")
    errors = _record_errors(changed, _text(wheel, "RECORD"), record)
    assert len(errors) == 1 and errors[0].startswith("my_ops/__init__.py: RECORD has"), errors


def test_native_files_are_the_platforms_and_executable(wheel, tmp_path: Path) -> None:
    for name in sorted(NATIVE):
        info, data = wheel["members"][name]
        path = tmp_path / os.path.basename(name)
        path.write_bytes(data)
        header = subprocess.run(["readelf", "-h", str(path)], capture_output=True, text=True)
        assert header.returncode == 0, header.stderr
        machine = next(line for line in header.stdout.splitlines() if "Machine:" in line)
        assert wheel["machine"] in machine, (name, machine)
        mode = info.external_attr >> 16
        assert mode & 0o777 == 0o755, (name, oct(mode))


def test_library_and_loader_are_the_bundles(wheel) -> None:
    # The wheel ships the same builds as the edge bundle for its platform.
    with tarfile.open(wheel["bundle"]) as tar:
        for name in sorted(BUNDLED):
            shipped = tar.extractfile(f"my_ops_bundle/{os.path.basename(name)}").read()
            assert shipped == wheel["members"][name][1], name


def _torch_libraries() -> set[str]:
    """The file names in the locked torch's lib folder and its nvidia-* wheels' lib folders."""
    import glob

    folders = [p for p in sys.path if "rules_python~~pip~pypi_" in p]
    found = set()
    for folder in folders:
        for pattern in ("torch/lib/*", "nvidia/*/lib/*"):
            found.update(os.path.basename(f) for f in glob.glob(os.path.join(folder, pattern)))
    assert "libtorch_cpu.so" in found, folders
    return found


def test_platform_tag_is_what_auditwheel_derives(wheel, tmp_path: Path) -> None:
    # No library search path: the tag is what the wheel's own ELF files need,
    # not what this machine's libgomp or libcudart would add if grafted in.
    nothing = tmp_path / "no_libraries"
    nothing.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "auditwheel",
            "show",
            "--json",
            "--ldpaths",
            str(nothing),
            wheel["path"],
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert not report["pure"]
    # From the GLIBC_/GLIBCXX_ versions the ELF files need: the wheel's tag.
    assert report["sym_tag"] == _tag(wheel).split("-")[2], report["sym_tag"]
    # What the files link to beyond the manylinux set is torch's (torch/lib and
    # its CUDA wheels): the wheel requires torch rather than bundling it.
    outside = sorted(set(report["external_libs"]) - _torch_libraries())
    assert outside == [], outside
    assert "libtorch_cpu.so" in report["external_libs"]
