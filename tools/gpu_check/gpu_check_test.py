"""gpu_check in --cpu-only mode: the build-from-source-list path and every step, without a GPU.

Runs the script as the GPU machine would (a plain `python3 gpu_check.py`), on
the source files in this test's runfiles, with the locked torch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Under Bazel, the runfiles copy: its ops/, python/ and deploy/ are the
# declared data, so the script cannot reach past them into the checkout.
_RUNFILES = os.environ.get("TEST_SRCDIR")
if _RUNFILES:
    SCRIPT = Path(_RUNFILES) / "_main/tools/gpu_check/gpu_check.py"
else:
    SCRIPT = Path(os.path.abspath(__file__)).parent / "gpu_check.py"
ROOT = SCRIPT.parents[2]
SCRATCH = Path(os.environ.get("TEST_TMPDIR") or "/tmp")
# A small part of the suite (the //python:test_* targets run all of it): the
# custom class, and opcheck of every op against the library just built.
SUBSET = "test_class or test_opcheck"


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=SCRATCH,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "the following arguments are required: OUT_DIR"),
        (("out", "--bogus"), "unrecognized arguments: --bogus"),
        (("out", "--skip", "nothing"), "--skip: unknown step 'nothing'"),
        (("out", "--archs", "90"), "--archs: expected names like sm_90"),
        (("out", "--budget", "-1"), "--budget"),
    ],
)
def test_bad_usage_exits_2_with_one_line(args, message):
    proc = _run(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert proc.stderr.startswith("gpu_check: error: ") and proc.stderr.count("\n") == 1
    assert proc.stdout == ""


def test_out_dir_that_is_a_file_is_bad_usage():
    path = SCRATCH / "a_file"
    path.write_text("")
    proc = _run(str(path), "--cpu-only")
    assert proc.returncode == 2
    assert "is not a folder" in proc.stderr


def test_help_documents_steps_outputs_and_exit_status():
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    for word in ("build", "tests", "export", "loader", "bench", "--cpu-only", "--tests-subset"):
        assert word in proc.stdout
    assert "verdict.txt" in proc.stdout and "summary.json" in proc.stdout
    assert "0 PASS, 1 FAIL, 2 bad usage" in proc.stdout


def test_cpu_only_run_passes_every_step():
    # Kept by Bazel (test.outputs/outputs.zip), for a look at the logs after a failure.
    out = Path(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or SCRATCH) / "gpu_check"
    # The budget leaves room for a loaded 2-core machine; on the GPU machine
    # the default (450 s) applies.
    proc = _run(
        str(out),
        "--cpu-only",
        "--tests-subset",
        SUBSET,
        "--budget",
        "780",
        timeout=870,
    )
    print(proc.stdout, proc.stderr, sep="\n")
    verdict = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, verdict
    # Built from the declared data, not from the checkout behind the runfiles.
    assert f"repo {ROOT}," in proc.stdout
    assert re.match(
        r"gpu_check: PASS build=ok tests=[1-9]\d* passed/0 failed.* export=ok aoti_parity=ok "
        r"loader_parity=ok bench=identity [\d.]+ gelu [\d.]+ rms [\d.]+ of copy",
        verdict,
    ), verdict
    assert (out / "verdict.txt").read_text().strip() == verdict
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8, files
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "PASS"
    assert {name: s["status"] for name, s in summary["steps"].items()} == dict.fromkeys(
        ("build", "tests", "export", "loader", "bench"), "ok"
    )
    # Every cpp line of the committed source list was compiled, and no nvcc ran.
    listed = [
        line.split(" ", 1)[1]
        for line in (ROOT / "ops/my_ops_sources.txt").read_text().splitlines()
        if line.startswith("cpp ")
    ]
    assert sorted(summary["steps"]["build"]["facts"]["compile_s"]) == sorted(listed)
    assert "nvcc" not in (out / "build.log").read_text().replace("nvcc: None", "")
    assert summary["steps"]["tests"]["facts"]["notes"] == [f"subset -k {SUBSET!r}"]
    assert "targets not checked" in summary["steps"]["bench"]["detail"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
