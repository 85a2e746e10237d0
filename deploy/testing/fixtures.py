"""The fixtures and helpers every deploy test shares, whichever component's tests/ it sits in.

Each tests/ folder's conftest.py imports them all, so a test file takes them as fixtures and
imports the helpers from conftest.

Environment (set by the Bazel py_test rules; set them by hand otherwise):
  MY_OPS_LIBRARY  path to libmy_ops.so (also read by the my_ops package)
  MY_OPS_LOADER   path to the C++ loader binary
  MY_OPS_EXPORT   optional: export executable; default runs python -m
                  deploy.exporter with this interpreter
  LIBTORCH_LIB    optional: LibTorch lib folder (or a file in it) for the
                  copied-loader and bundle tests; default: what the loader uses
  MY_OPS_DEFAULT_PACKAGE  the files of //deploy:default_package (space
                  separated, as $(rootpaths) gives them), for the tests that
                  need a package but not a fresh export
  MY_OPS_DECODER_PACKAGE  the files of //deploy:decoder_package, likewise
Relative paths are taken from the runfiles root, as $(rootpath ...) gives them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from deploy.contract.package_contract import load as load_contract


def absolute_from_env(value: str) -> str:
    """Make a path from the environment absolute.

    Bazel passes runfiles-relative paths ($(rootpath ...)), but the pytest
    runner changes into $TEST_TMPDIR, so those are looked up in the runfiles.
    """
    if os.path.isabs(value) or os.path.exists(value):
        return os.path.abspath(value)
    return _rlocation(value) or os.path.abspath(value)


def _rlocation(rootpath: str) -> str | None:
    """Where the runfiles hold a $(rootpath ...) value, by the rules_python runfiles library.

    Not through my_ops' runfiles module: importing my_ops loads libmy_ops.so
    from MY_OPS_LIBRARY, which is what this resolves first.
    """
    try:
        from python.runfiles import runfiles
    except ImportError:  # run by hand, outside Bazel: paths are the user's
        return None
    r = runfiles.Create()
    if r is None:
        return None
    # $(rootpath) names another repository's file ../<repository>/<path>, and
    # a runfiles key names this one's _main/<path>.
    key = rootpath.removeprefix("../") if rootpath.startswith("../") else f"_main/{rootpath}"
    path = r.Rlocation(key, source_repo="")
    return path if path and os.path.exists(path) else None


# Normalised once, before anything (my_ops, child processes) reads them.
for _name in ("MY_OPS_LIBRARY", "MY_OPS_LOADER", "MY_OPS_EXPORT", "LIBTORCH_LIB"):
    if os.environ.get(_name):
        os.environ[_name] = absolute_from_env(os.environ[_name])

# Every program's exit codes by name, from the one table they all follow
# (test_package_contract.py pins the numbers).
EXIT_CODES = {row.name: row.code for row in load_contract().exit_codes}

# What an unpacked bundle holds (//deploy:bundle_linux_aarch64): an unsigned export's files,
# and what edge_bundle adds to them.
BUNDLE_FILES = tuple(
    sorted(("README.md", "libmy_ops.so", "loader", "run.sh", *load_contract().export_files))
)
# The weights a CPU package for this machine's architecture has beside it (weights.bin,
# weights.json): //deploy:bundle holds them too.
WEIGHTS_BESIDE = tuple(n for n in load_contract().weights_files if n.startswith("weights."))
HOST_BUNDLE_FILES = tuple(sorted((*BUNDLE_FILES, *WEIGHTS_BESIDE)))

# Batch limit of //deploy:default_package and its signed copy: export's
# --max-batch default, as its --help states it.
MAX_BATCH = 16


def _required_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"environment variable {name} must point at the file under test")
    path = absolute_from_env(value)
    if not os.path.exists(path):
        pytest.fail(f"{name}={value} does not exist")
    return path


@pytest.fixture(scope="session")
def ops_library() -> str:
    # The file itself, not its runfiles link: the loader opens nothing through a symbolic link.
    return os.path.realpath(_required_env("MY_OPS_LIBRARY"))


@pytest.fixture(scope="session")
def loader_bin() -> str:
    return _required_env("MY_OPS_LOADER")


def child_env(tmpdir: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # Subprocesses must import my_ops, deploy.exporter and the test helpers
    # (bad_models for --model) exactly as we do: pytest put the test's own
    # folder on sys.path, where its helpers sit.
    paths = [p for p in sys.path if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    if tmpdir is not None:
        tmpdir.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmpdir)
    # The export's default compile cache: the test's own, never the user's.
    env["XDG_CACHE_HOME"] = os.path.join(
        os.environ.get("TEST_TMPDIR") or tempfile.gettempdir(), "cache"
    )
    return env


def export_command() -> list[str]:
    exe = os.environ.get("MY_OPS_EXPORT")
    if exe:
        return [absolute_from_env(exe)]
    return [sys.executable, "-m", "deploy.exporter"]


def run_export(
    args: list[str], tmpdir: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        export_command() + args,
        env=child_env(tmpdir) | (env or {}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_loader(
    loader: str, args: list[str], tmpdir: Path, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [loader, *args], env=child_env(tmpdir), capture_output=True, text=True, timeout=timeout
    )


def writable_copy(package: Path, folder: Path) -> Path:
    """A copy of a package folder whose files may be changed (Bazel's outputs are read-only)."""
    shutil.copytree(package, folder)
    for f in folder.iterdir():
        f.chmod(0o644)
    return folder


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


NO_VERIFY_WARNING = "loader: WARNING: --no-verify"


def loader_error_lines(stderr: str) -> list[str]:
    """The error lines, without the warning that --no-verify always prints."""
    return [line for line in error_lines(stderr) if not line.startswith(NO_VERIFY_WARNING)]


def package_folder(variable: str, target: str, marker: str = "model.pt2") -> Path:
    """The folder of an export_package (or, with `marker` weights.bin, an export_weights)
    target whose files `variable` lists ($(rootpaths))."""
    value = os.environ.get(variable)
    if not value:
        pytest.fail(f"{variable} must list the files of {target}")
    model = [absolute_from_env(v) for v in value.split() if v.endswith(marker)]
    if len(model) != 1 or not os.path.isfile(model[0]):
        pytest.fail(f"{variable}={value} names no {marker}")
    # The folder Bazel wrote (the files' real paths, all outputs of one rule), not the
    # runfiles links to it: the loader opens nothing through a symbolic link.
    return Path(os.path.realpath(model[0])).parent


@pytest.fixture(scope="session")
def default_package() -> Path:
    """The folder of //deploy:default_package (exported at build time)."""
    return package_folder("MY_OPS_DEFAULT_PACKAGE", "//deploy:default_package")


@pytest.fixture(scope="session")
def decoder_package() -> Path:
    """The folder of //deploy:decoder_package: deploy.testing.tiny_llama exported with a KV
    cache of 64 positions (exported at build time)."""
    return package_folder("MY_OPS_DECODER_PACKAGE", "//deploy:decoder_package")


@pytest.fixture
def pkg(default_package: Path, ops_library: str, tmp_path: Path) -> Path:
    """A writable copy of //deploy:default_package with the op library beside it."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    for name in (*load_contract().export_files, *WEIGHTS_BESIDE):
        shutil.copyfile(default_package / name, folder / name)
    shutil.copyfile(ops_library, folder / "libmy_ops.so")
    return folder


@pytest.fixture(scope="session")
def retrained_weights() -> Path:
    """The folder of //deploy:retrained_weights: weights.bin (signed) for //deploy:default_package
    from default_model.make_retrained_model, and that model's eager outputs on its sample."""
    return package_folder(
        "MY_OPS_RETRAINED_WEIGHTS", "//deploy:retrained_weights", marker="weights.bin"
    )


@pytest.fixture(scope="session")
def signing_keys() -> Path:
    """The folder of the test key pair (signing_key.pem, public_key.pem) that signed `exported`."""
    value = os.environ.get("MY_OPS_TEST_PUBLIC_KEY")
    if not value:
        pytest.fail("MY_OPS_TEST_PUBLIC_KEY must name deploy/tests/testdata/public_key.pem")
    # The real folder: the loader opens no key through a symbolic link.
    return Path(os.path.realpath(absolute_from_env(value))).parent


@pytest.fixture(scope="session")
def exported() -> Path:
    """//deploy:signed_package: //deploy:default_package signed with `signing_keys` by
    `export --sign` at build time. Read-only: copy it to change it.

    A signed export run by the CLI itself, its printed stages and what it leaves
    behind, are checked in test_export_cache_e2e.py.
    """
    return package_folder("MY_OPS_SIGNED_PACKAGE", "//deploy:signed_package")
