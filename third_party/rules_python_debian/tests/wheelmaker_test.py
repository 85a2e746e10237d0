"""The wheel py_wheel builds for :tiny_wheel, checked from the zip itself, then installed.

Nothing here reuses the wheelmaker's code: hashes, tags and modes are
recomputed from the archive and the sources, so a wrong wheelmaker fails here.
The last tests run //third_party/rules_python_debian/tools:wheelmaker directly
for what the one py_wheel target cannot vary (stamping, tag sets, errors).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import stat
import subprocess
import sys
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest

RUNFILES = Path(os.environ["RUNFILES_DIR"])
WHEEL = RUNFILES / os.environ["TINY_WHEEL"]
DIST = RUNFILES / os.environ["TINY_DIST"]
TOOL = RUNFILES / os.environ["TINY_TOOL"]
DESCRIPTION = RUNFILES / os.environ["TINY_DESCRIPTION"]
WHEELMAKER = RUNFILES / os.environ["WHEELMAKER"]

NAME = "tiny-0.1.0-py3-none-manylinux_2_17_x86_64.whl"
DISTINFO = "tiny-0.1.0.dist-info"
# This project's wheelmaker writes exact modes; upstream's (with the official
# Bazel) may not, so the exact checks apply to wheels from this one only.
OUR_GENERATOR = "bazel-wheelmaker (third_party/rules_python_debian)"


def read(zf: zipfile.ZipFile, name: str) -> str:
    return zf.read(name).decode("utf-8")


@pytest.fixture(scope="module")
def wheel() -> zipfile.ZipFile:
    return zipfile.ZipFile(WHEEL)


def ours(wheel: zipfile.ZipFile) -> bool:
    return OUR_GENERATOR in read(wheel, f"{DISTINFO}/WHEEL")


def test_file_names():
    assert WHEEL.name == NAME
    # py_wheel_dist names its copy after --name_file.
    assert [p.name for p in DIST.iterdir()] == [NAME]


def test_members_are_the_sources_with_the_first_prefix_stripped(wheel: zipfile.ZipFile):
    names = wheel.namelist()
    assert sorted(n for n in names if not n.startswith(DISTINFO)) == [
        "tiny/__init__.py",
        "tiny/generated-tool",
        "tiny/generated.txt",
        "tiny/tiny-tool",
    ]
    assert sorted(n for n in names if n.startswith(DISTINFO)) == [
        f"{DISTINFO}/{n}" for n in ("METADATA", "NOTICE", "RECORD", "WHEEL", "entry_points.txt")
    ]
    # A stable order: the package's files sorted, then .dist-info, RECORD last.
    package = [n for n in names if not n.startswith(DISTINFO)]
    assert names[: len(package)] == sorted(package)
    assert names[-1] == f"{DISTINFO}/RECORD"
    assert len(names) == len(set(names))
    assert wheel.read("tiny/tiny-tool") == TOOL.read_bytes()


def test_wheel_file(wheel: zipfile.ZipFile):
    fields = HeaderParser().parsestr(read(wheel, f"{DISTINFO}/WHEEL"))
    assert fields["Wheel-Version"] == "1.0"
    assert fields["Generator"]
    # A platform tag other than "any": the wheel installs into platlib.
    assert fields["Root-Is-Purelib"] == "false"
    assert fields.get_all("Tag") == ["py3-none-manylinux_2_17_x86_64"]


def test_metadata(wheel: zipfile.ZipFile):
    metadata = read(wheel, f"{DISTINFO}/METADATA")
    fields = HeaderParser().parsestr(metadata)
    assert fields["Metadata-Version"] == "2.1"
    assert fields["Name"] == "tiny"
    assert fields["Version"] == "0.1.0"
    assert fields["Requires-Python"] == ">=3.9"
    assert fields.get_all("Requires-Dist") == [
        "packaging>=20",
        "numpy",
        "rich>=13; extra == 'cli'",
    ]
    assert fields.get_all("Provides-Extra") == ["cli"]
    # The description is the body, after the headers and one blank line.
    assert fields.get_payload().strip() == DESCRIPTION.read_text().strip()


def test_entry_points(wheel: zipfile.ZipFile):
    text = read(wheel, f"{DISTINFO}/entry_points.txt")
    assert text.splitlines() == ["[console_scripts]", "tiny = tiny:main"]


def test_record_lists_every_member_with_its_hash_and_size(wheel: zipfile.ZipFile):
    record_name = f"{DISTINFO}/RECORD"
    rows = list(csv.reader(io.StringIO(read(wheel, record_name))))
    assert rows[-1] == [record_name, "", ""]
    listed = [row[0] for row in rows]
    assert sorted(listed) == sorted(wheel.namelist())
    assert len(listed) == len(set(listed))
    for name, hash_field, size in rows[:-1]:
        data = wheel.read(name)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        assert hash_field == "sha256=" + digest.decode("ascii"), name
        assert int(size) == len(data), name


def test_entries_are_deflated_and_dated_1980(wheel: zipfile.ZipFile):
    for info in wheel.infolist():
        assert info.compress_type == zipfile.ZIP_DEFLATED, info.filename
        assert info.date_time == (1980, 1, 1, 0, 0, 0), info.filename


PROGRAMS = ("tiny/tiny-tool", "tiny/generated-tool")


def test_modes(wheel: zipfile.ZipFile):
    for name in PROGRAMS:
        mode = wheel.getinfo(name).external_attr >> 16
        assert mode & 0o111, (name, oct(mode))
    if not ours(wheel):
        return
    for info in wheel.infolist():
        want = stat.S_IFREG | (0o755 if info.filename in PROGRAMS else 0o644)
        assert info.external_attr >> 16 == want, (info.filename, oct(info.external_attr >> 16))


def test_pip_installs_it_with_the_console_script_and_a_runnable_tool(tmp_path: Path):
    target = tmp_path / "site"
    # -I: pip from the interpreter itself, not from PYTHONPATH. --platform
    # lets an aarch64 machine install the x86_64-tagged wheel too.
    pip = [sys.executable, "-I", "-m", "pip"]
    if subprocess.run([*pip, "--version"], capture_output=True).returncode != 0:
        pytest.fail(f"{sys.executable} has no pip, which this test needs")
    subprocess.run(
        [
            *pip,
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--platform",
            "manylinux_2_17_x86_64",
            "--target",
            str(target),
            str(WHEEL),
        ],
        check=True,
        env=dict(os.environ, PIP_NO_CACHE_DIR="1"),
    )
    assert (target / "tiny/__init__.py").is_file()
    assert (target / f"{DISTINFO}/INSTALLER").is_file()
    script = target / "bin/tiny"
    assert script.is_file()
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == "tiny says hello\n"
    tool = target / "tiny/tiny-tool"
    assert os.access(tool, os.X_OK), oct(tool.stat().st_mode)
    out = subprocess.run([tool], capture_output=True, text=True, check=True)
    assert out.stdout == "tiny-tool runs\n"
    out = subprocess.run([target / "tiny/generated-tool"], capture_output=True, text=True)
    assert out.stdout == "generated-tool runs\n", out.stderr


def run_wheelmaker(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WHEELMAKER, "--name", "demo", "--out", str(tmp_path / "out.whl"), *args],
        capture_output=True,
        text=True,
    )


def test_stamping_tag_sets_and_name_file(tmp_path: Path):
    src = tmp_path / "mod.py"
    src.write_text("x = 1\n")
    (tmp_path / "inputs").write_text(f"pkg/mod.py;{src}\n")
    (tmp_path / "stable").write_text("BUILD_EMBED_LABEL 2.0\n")
    (tmp_path / "volatile").write_text("BUILD_TIMESTAMP 1700000000\n")
    result = run_wheelmaker(
        tmp_path,
        "--version=0.0.0+{BUILD_EMBED_LABEL}.{BUILD_TIMESTAMP}",
        "--python_tag=py2.py3",
        "--platform=any",
        f"--input_file_list={tmp_path / 'inputs'}",
        f"--stable_status_file={tmp_path / 'stable'}",
        f"--volatile_status_file={tmp_path / 'volatile'}",
        f"--name_file={tmp_path / 'name'}",
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "name").read_text() == "demo-0.0.0_2.0.1700000000-py2.py3-none-any.whl"
    with zipfile.ZipFile(tmp_path / "out.whl") as zf:
        distinfo = "demo-0.0.0_2.0.1700000000.dist-info"
        fields = HeaderParser().parsestr(read(zf, f"{distinfo}/WHEEL"))
        assert fields.get_all("Tag") == ["py2-none-any", "py3-none-any"]
        metadata = HeaderParser().parsestr(read(zf, f"{distinfo}/METADATA"))
        assert metadata["Version"] == "0.0.0+2.0.1700000000"
        assert zf.namelist()[0] == "pkg/mod.py"


def test_output_is_reproducible(tmp_path: Path):
    src = tmp_path / "mod.py"
    src.write_text("x = 1\n")
    wheels = []
    for i in range(2):
        os.utime(src, (1_000_000 * (i + 1), 1_000_000 * (i + 1)))
        result = run_wheelmaker(tmp_path, "--version=1", f"--input_file=mod.py;{src}")
        assert result.returncode == 0, result.stderr
        wheels.append((tmp_path / "out.whl").read_bytes())
    assert wheels[0] == wheels[1]


def test_a_missing_input_is_one_line_naming_it(tmp_path: Path):
    missing = tmp_path / "gone.py"
    result = run_wheelmaker(tmp_path, "--version=1", f"--input_file=gone.py;{missing}")
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and str(missing) in result.stderr, result.stderr
    assert not (tmp_path / "out.whl").exists()


def test_two_inputs_for_one_path_are_refused(tmp_path: Path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "m.py").write_text(d)
    result = run_wheelmaker(
        tmp_path,
        "--version=1",
        f"--input_file=a/m.py;{tmp_path / 'a/m.py'}",
        f"--input_file=b/m.py;{tmp_path / 'b/m.py'}",
        "--strip_path_prefix=a/",
        "--strip_path_prefix=b/",
    )
    assert result.returncode != 0
    assert "m.py is already in the wheel" in result.stderr, result.stderr
