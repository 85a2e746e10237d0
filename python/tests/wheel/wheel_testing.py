"""What the wheel tests share: the wheel files and other runfiles, by environment variable,
and a fresh venv that the wheel is installed into."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def runfile(path: str) -> str:
    """A $(rootpath ...) value as an absolute path (pytest runs from $TEST_TMPDIR)."""
    root = os.environ.get("RUNFILES_DIR") or os.environ["TEST_SRCDIR"]
    for candidate in (os.path.join(root, "_main", path), os.path.join(root, path)):
        if os.path.exists(candidate):
            return os.path.normpath(candidate)
    raise FileNotFoundError(f"{path} is not in the runfiles under {root}")


def wheel_path(variable: str = "MY_OPS_WHEEL") -> str:
    """The wheel a test target names in `variable` ($(rootpath :wheel))."""
    return runfile(os.environ[variable])


def locked_site_packages() -> list[str]:
    """The locked wheels' folders on this test's sys.path (torch, numpy, cryptography...).

    Only rules_python's pip repositories: the workspace's own folders, which hold
    the my_ops sources, must not be importable in the venv.
    """
    found = [p for p in sys.path if "rules_python~~pip~pypi_" in p and p.endswith("site-packages")]
    assert any("pypi_torch" in p for p in found), sys.path
    return found


def make_venv(root: Path, wheels: list[Path | str]) -> dict:
    """A venv in `root` holding `wheels` (pip install --no-index --no-deps) and, through a .pth
    file naming their folders in the runfiles, not copies, the test's locked packages.

    Returns its python, bin folder, a work folder and the environment to run in: one that
    names no runfiles, no MY_OPS_* variable and no PYTHONPATH.
    """
    env_dir = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=300)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # A .pth line is a folder appended to sys.path: the locked packages, not copied.
    (Path(site) / "locked_packages.pth").write_text("\n".join(locked_site_packages()) + "\n")
    work = root / "work"
    work.mkdir()
    env = {
        "PATH": f"{env_dir / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "TMPDIR": str(root),
        "LANG": "C.UTF-8",
    }
    # ensurepip's setuptools sits in site-packages, ahead of the .pth folders: it would shadow
    # the locked one (torch 2.13 requires setuptools >= 77; ensurepip's is 65).
    subprocess.run(
        [str(python), "-m", "pip", "uninstall", "-y", "-q", "setuptools"],
        check=True,
        env=env,
        cwd=work,
        timeout=300,
    )
    for wheel in wheels:
        subprocess.run(
            [str(python), "-m", "pip", "install", "--no-index", "--no-deps", "-q", str(wheel)],
            check=True,
            env=env,
            cwd=work,
            timeout=600,
        )
    return {"root": root, "python": python, "bin": env_dir / "bin", "env": env, "work": work}


def run_in(venv: dict, *cmd, timeout: int = 900) -> subprocess.CompletedProcess:
    """`cmd` in the venv's work folder and environment, its output captured."""
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=venv["work"],
        env=venv["env"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
