"""Where the tests of gpu_check find the script, and how they start it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Under Bazel, the runfiles copy, whose files are the test's declared data: the script
# cannot reach past them into the checkout.
_RUNFILES = os.environ.get("TEST_SRCDIR")
if _RUNFILES:
    SCRIPT = Path(_RUNFILES) / "_main/tools/gpu_check/gpu_check.py"
else:
    SCRIPT = Path(os.path.abspath(__file__)).parent / "gpu_check.py"
ROOT = SCRIPT.parents[2]
SCRATCH = Path(os.environ.get("TEST_TMPDIR") or "/tmp")


def run_script(
    *args: str, script: Path = SCRIPT, timeout: float = 60, **env_vars: str
) -> subprocess.CompletedProcess:
    """A plain `python3 gpu_check.py ARGS`, as on the GPU machine, with this torch."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **env_vars)
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=SCRATCH,
        timeout=timeout,
    )
