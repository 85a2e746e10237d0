"""tools/bazel: --nosystem_rc always, and the Debian settings only for Debian's Bazel.

Each case copies tools/bazel and the Debian rc into a scratch workspace, so the
.bazelrc.host it writes is the scratch one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

RUNFILES = Path(os.environ["RUNFILES_DIR"])
DEBIAN_IMPORT = "import %workspace%/tools/bazelrc/debian.bazelrc\n"
DEBIAN_BAZEL = Path("/usr/bin/bazel")
DEBIAN_FILE_LIST = Path("/var/lib/dpkg/info/bazel-bootstrap.list")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "tools/bazelrc").mkdir(parents=True)
    shutil.copy(RUNFILES / os.environ["TOOLS_BAZEL"], ws / "tools/bazel")
    shutil.copy(RUNFILES / os.environ["DEBIAN_BAZELRC"], ws / "tools/bazelrc/debian.bazelrc")
    (ws / ".bazelrc.host").write_text("stale content from an earlier Bazel\n")
    return ws


def _fake_bazel(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for the official Bazel: answers --version, records any other call's argv."""
    argv_file = tmp_path / "argv"
    fake = tmp_path / "bin/bazel"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "bazel 7.7.1"; exit 0; fi\n'
        f'printf "%s\\n" "$@" > "{argv_file}"\n'
    )
    fake.chmod(0o755)
    return fake, argv_file


def test_another_bazel_gets_no_debian_settings_and_no_system_rc(workspace: Path, tmp_path: Path):
    fake, argv_file = _fake_bazel(tmp_path)
    env = dict(os.environ, BAZEL_REAL=str(fake), PATH=f"{fake.parent}:{os.environ['PATH']}")
    subprocess.run([workspace / "tools/bazel", "info", "release"], env=env, check=True, timeout=60)
    assert argv_file.read_text().splitlines() == ["--nosystem_rc", "info", "release"]
    # Empty: the official Bazel resolves every module from the public registry, no stubs.
    assert (workspace / ".bazelrc.host").read_text() == ""


def test_debian_bazel_imports_the_debian_rc(workspace: Path):
    if (
        not DEBIAN_FILE_LIST.is_file()
        or str(DEBIAN_BAZEL) not in DEBIAN_FILE_LIST.read_text().split()
    ):
        pytest.skip("this machine's Bazel is not Debian's bazel-bootstrap")
    env = dict(os.environ)
    env.pop("BAZEL_REAL", None)
    # Run from outside any workspace: Bazel must still find its install base.
    out = subprocess.run(
        [workspace / "tools/bazel", "--version"],
        env=env,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and out.stdout.startswith("bazel 7.7."), out.stderr
    # The scratch workspace has no third_party/rules_python_debian to overlay,
    # so rules_python is Debian's copy, named here rather than in the Debian rc.
    assert (workspace / ".bazelrc.host").read_text() == (
        DEBIAN_IMPORT + "common --override_module=rules_python=/usr/share/bazel/rules/python\n"
    )


def test_debian_rc_overrides_only_what_debian_installs():
    rc = (RUNFILES / os.environ["DEBIAN_BAZELRC"]).read_text()
    overrides = [
        line.split("=", 2)[2]
        for line in rc.splitlines()
        if line.startswith("common --override_module=")
    ]
    assert overrides, "no overrides found"
    assert all(path.startswith("/usr/share/bazel/") for path in overrides), overrides
    # The stub registry comes before the public one, and only here.
    registries = [
        line.split("=", 1)[1] for line in rc.splitlines() if line.startswith("common --registry=")
    ]
    assert registries == [
        "file://%workspace%/third_party/bazel_registry",
        "https://bcr.bazel.build",
    ]


def test_the_project_rc_names_no_registry_and_no_override():
    # Everything Debian-specific is in the Debian rc; .bazelrc is read by every Bazel.
    rc = (RUNFILES / os.environ["PROJECT_BAZELRC"]).read_text().splitlines()
    assert not [line for line in rc if "--registry" in line or "--override_module" in line]
    assert "try-import %workspace%/.bazelrc.host" in rc
