"""The C++ SDK's tests' shared steps: the locked CMake, an SDK archive unpacked, a command run."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from conftest import absolute_from_env, child_env


def cmake() -> str:
    """The locked cmake wheel's binary.

    Not `import cmake`: its __init__ looks itself up through the wheel's RECORD, which Bazel's
    copy of the wheel does not keep.
    """
    spec = importlib.util.find_spec("cmake")
    assert spec and spec.origin, "the cmake wheel is not among the test's deps"
    return str(Path(spec.origin).parent / "data/bin/cmake")


def unpack(variable: str, folder: Path) -> Path:
    """The SDK archive that $`variable` names, unpacked into `folder`; its top folder."""
    with tarfile.open(absolute_from_env(os.environ[variable])) as tar:
        tar.extractall(folder, filter="tar")
    (top,) = folder.iterdir()
    return top


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Runs `cmd`, which must succeed; its output is in the failure's message."""
    proc = subprocess.run(
        cmd, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    return proc


def build_example(sdk: Path, build: Path, *configure: str) -> Path:
    """The SDK's example configured with `configure` (besides source and build folders) and built
    with make, outside Bazel; the program."""
    assert shutil.which("make"), "the example's build needs make (Unix Makefiles)"
    source = sdk / "share/my_ops/example"
    run([cmake(), "-S", str(source), "-B", str(build), *configure], cwd=build.parent)
    run([cmake(), "--build", str(build)], cwd=build.parent)
    return build / "example"
