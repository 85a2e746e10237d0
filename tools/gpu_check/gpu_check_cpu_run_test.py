"""gpu_check on the repository's own files: a whole --cpu-only run.

The run is the script as the GPU machine runs it (a plain `python3 gpu_check.py`), on the
files in this test's runfiles, with the locked torch. Its tests step runs
testdata/fixture_test.py rather than python/tests, so that an edit of the suite (which the
//python:*_test targets run) leaves this test's result cached.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from script_under_test import ROOT, SCRATCH, SCRIPT, run_script

sys.path.insert(0, str(SCRIPT.parent))
from build_step import read_build_inputs  # noqa: E402

FIXTURE_TESTS = "tools/gpu_check/testdata/fixture_test.py"


def test_the_run_sees_no_test_suite():
    # The point of FIXTURE_TESTS: were these in the runfiles, editing them would rerun this.
    if not os.environ.get("TEST_SRCDIR"):
        pytest.skip("outside Bazel the checkout holds them")
    assert (ROOT / FIXTURE_TESTS).is_file()
    assert not (ROOT / "python/tests").exists() and not (ROOT / "deploy/tests").exists()
    assert not list((ROOT / "deploy").glob("*/tests/test_*.py"))


def test_cpu_only_run_passes_every_step():
    # Kept by Bazel (test.outputs/outputs.zip), for a look at the logs after a failure.
    out = Path(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or SCRATCH) / "gpu_check"
    # The budget leaves room for a loaded 2-core machine; a GPU run has 450 s by default.
    args = ["--cpu-only", "--tests", FIXTURE_TESTS, "--budget", "780"]
    proc = run_script(str(out), *args, timeout=870)
    print(proc.stdout, proc.stderr, sep="\n")
    verdict = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, verdict
    # Built from the declared data, not from the checkout behind the runfiles.
    assert f"repo {ROOT}," in proc.stdout
    assert re.match(
        rf"gpu_check: PASS build=ok tests=2 passed/0 failed \(only {FIXTURE_TESTS}\) export=ok "
        r"aoti_parity=ok loader_parity=ok bench=([\w.]+ [\d.]+ )+of copy "
        r"\(cpu, targets not checked\)",
        verdict,
    ), verdict
    assert (out / "verdict.txt").read_text().strip() == verdict
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["verdict.txt", "summary.json", "build.log", "tests.log"]
        + ["export.log", "loader.log", "bench.txt"]
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "PASS"
    assert {name: s["status"] for name, s in summary["steps"].items()} == dict.fromkeys(
        ("build", "tests", "export", "loader", "bench"), "ok"
    )
    # The package calls the default model's ops through their CPU C shims, those with an
    # out= companion through the companion's.
    shims = summary["steps"]["export"]["facts"]["c_shims"]
    assert {"aoti_torch_cpu_fused_bias_gelu_out", "aoti_torch_cpu_silu_and_mul_out"} <= set(shims)
    # Each C++ source of the op library was compiled (build_inputs_test ties the list to the
    # Bazel target), and no nvcc ran.
    op_library = read_build_inputs(ROOT)["op_library"]
    compiled = sorted(summary["steps"]["build"]["facts"]["compile_s"])
    assert compiled == sorted(op_library["cpp"] + op_library["generated"])
    assert not re.search(r"^\$ (\S+=\S* )*\S*nvcc ", (out / "build.log").read_text(), re.MULTILINE)
    tests = summary["steps"]["tests"]["facts"]
    assert (tests["passed"], tests["partial"], tests["device"]) == (
        2,
        [f"only {FIXTURE_TESTS}"],
        "cpu",
    )
    assert summary["steps"]["bench"]["facts"]["rows"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
