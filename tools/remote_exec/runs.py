"""What the remote-execution scripts run: Bazel in an output base of their choosing, and the
farm (tools/remote_exec/farm). Each failure raises RunError, one line naming what failed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BAZEL = ROOT / "tools" / "bazel"
FARM = ROOT / "tools" / "remote_exec" / "farm"


class RunError(Exception):
    pass


def bazel(output_base: Path | None, args: list[str], log_file: Path) -> str:
    """Runs tools/bazel in the checkout (in output_base when given) and returns what it printed,
    which log_file keeps."""
    startup = [f"--output_base={output_base}"] if output_base else []
    with open(log_file, "w") as out:
        result = subprocess.run(
            [str(BAZEL), *startup, *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
    text = log_file.read_text(errors="replace")
    if result.returncode != 0:
        errors = [line for line in text.splitlines() if line.startswith("ERROR")]
        raise RunError(f"bazel {args[0]} failed: {errors[0] if errors else log_file}")
    return text


# Repositories that are archives unpacked as they are (the Python wheels, the CUDA toolkit):
# the same bytes in any output base, naming no path of their own, and 8.4 GiB of the default
# targets' 8.6 GiB, which a clean output base took 70 s to unpack again.
SHARED_REPOSITORIES = ("rules_python~~pip~pypi_*", "rules_cuda~~toolchain~cuda*")


def shared_repositories() -> list[str]:
    """--override_repository flags that point a clean output base at the repositories of
    SHARED_REPOSITORIES this checkout's own output base has unpacked, read-only: what is built
    and where its actions run stay the clean output base's, only the unpacking is skipped."""
    result = subprocess.run(
        [str(BAZEL), "info", "output_base"], cwd=ROOT, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RunError(f"bazel info output_base failed: {result.stderr.strip()[-200:]}")
    external = Path(result.stdout.strip()) / "external"
    found = sorted(
        {
            repo
            for pattern in SHARED_REPOSITORIES
            for repo in external.glob(pattern)
            if repo.is_dir() and not repo.name.endswith(".marker")
        }
    )
    return [f"--override_repository={repo.name}={repo}" for repo in found]


def query(output_base: Path | None, args: list[str], log_file: Path) -> str:
    """Runs a tools/bazel query command (cquery, aquery) like bazel() and returns its standard
    output, the answer; log_file keeps what it printed on standard error."""
    startup = [f"--output_base={output_base}"] if output_base else []
    with open(log_file, "w") as err:
        result = subprocess.run(
            [str(BAZEL), *startup, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True
        )
    if result.returncode != 0:
        raise RunError(f"bazel {args[0]} failed (see {log_file})")
    return result.stdout


def delete_output_base(output_base: Path, then_delete: Path | None = None) -> None:
    """Stops the Bazel server of output_base and deletes it: an output base holds an extracted
    torch, never to be left behind. Bazel makes some of its files read-only.

    With then_delete (a folder holding output_base), that folder is deleted too, in a process
    of its own session: the caller goes on at once (an output base with torch's wheels took
    half a minute to delete), and the end of a CI job does not cut the deletion short."""
    if output_base.exists():
        subprocess.run(
            [str(BAZEL), f"--output_base={output_base}", "shutdown"], cwd=ROOT, capture_output=True
        )
    doomed = then_delete or output_base
    if not doomed.exists():
        return
    if then_delete is None:
        subprocess.run(["chmod", "-R", "u+w", str(output_base)], capture_output=True)
        shutil.rmtree(output_base, ignore_errors=True)
        return
    subprocess.Popen(
        ["sh", "-c", 'chmod -R u+w "$1"; rm -rf "$1"', "delete", str(doomed)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def farm(*args: str) -> None:
    """Runs `farm ARGS...`."""
    result = subprocess.run([sys.executable, str(FARM), *args], capture_output=True, text=True)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        raise RunError(f"farm {args[0]} failed: {lines[-1] if lines else result.returncode}")
