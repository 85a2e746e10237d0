"""gpu_check on the repository's own files: what it compiles against the Bazel target, the
flags file it reads, and a whole --cpu-only run.

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
from build_step import C_SHIMS, FLAGS_FILE, bzl_lists, find_sources  # noqa: E402

FIXTURE_TESTS = "tools/gpu_check/testdata/fixture_test.py"


def _bazel_srcs() -> list[str]:
    # $(rootpaths //ops:my_ops_srcs): every file torch_op_library compiles or includes.
    value = os.environ.get("BAZEL_OP_LIBRARY_SRCS")
    if not value:
        pytest.fail("BAZEL_OP_LIBRARY_SRCS is unset: run this test with tools/bazel test")
    return sorted(value.split())


def test_sources_are_the_bazel_targets():
    found = find_sources(ROOT)
    # The C shims are generated, by the macro's genrule there and by the build step here.
    assert sorted(found["cpp"] + found["cu"] + found["hdr"] + [C_SHIMS]) == _bazel_srcs()
    assert all(f.endswith(".cpp") for f in found["cpp"]) and found["cpp"]
    assert all(f.endswith(".cu") for f in found["cu"])


def test_flags_come_from_the_bzl_file_the_macro_loads():
    flags = bzl_lists(ROOT / FLAGS_FILE)
    assert sorted(flags) == [
        "TORCH_CPU_KERNEL_COPTS",
        "TORCH_CPU_KERNEL_COPTS_AARCH64",
        "TORCH_NVCC_COPTS",
        "TORCH_OP_LIBRARY_CUDA_COPTS",
        "TORCH_OP_LIBRARY_LINKOPTS",
    ]
    assert "-DCPU_CAPABILITY=AVX2" in flags["TORCH_CPU_KERNEL_COPTS"]


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
    # Each C++ source of the Bazel target was compiled, and no nvcc ran.
    compiled = sorted(summary["steps"]["build"]["facts"]["compile_s"])
    assert compiled == [f for f in _bazel_srcs() if f.endswith(".cpp")]
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
