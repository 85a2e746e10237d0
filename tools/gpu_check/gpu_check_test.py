"""gpu_check: what it compiles against the Bazel target, its parsers, and a --cpu-only run.

The run is the script as the GPU machine runs it (a plain `python3 gpu_check.py`), on the
source files in this test's runfiles, with the locked torch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Under Bazel, the runfiles copy: its ops/, python/ and deploy/ are the declared data, so
# the script cannot reach past them into the checkout.
_RUNFILES = os.environ.get("TEST_SRCDIR")
if _RUNFILES:
    SCRIPT = Path(_RUNFILES) / "_main/tools/gpu_check/gpu_check.py"
else:
    SCRIPT = Path(os.path.abspath(__file__)).parent / "gpu_check.py"
ROOT = SCRIPT.parents[2]
SCRATCH = Path(os.environ.get("TEST_TMPDIR") or "/tmp")
# A small part of the suite (the //python:test_* targets run all of it).
SUBSET = "test_class or test_opcheck"

sys.path.insert(0, str(SCRIPT.parent))
from bench_step import bench_verdict  # noqa: E402
from build_step import bzl_lists, find_sources  # noqa: E402


def _bazel_srcs() -> list[str]:
    # $(rootpaths //ops:my_ops_srcs): every file torch_op_library compiles or includes.
    value = os.environ.get("BAZEL_OP_LIBRARY_SRCS")
    if not value:
        pytest.fail("BAZEL_OP_LIBRARY_SRCS is unset: run this test with tools/bazel test")
    return sorted(value.split())


def test_sources_are_the_bazel_targets():
    found = find_sources(ROOT)
    assert sorted(found["cpp"] + found["cu"] + found["hdr"]) == _bazel_srcs()
    assert all(f.endswith(".cpp") for f in found["cpp"]) and found["cpp"]
    assert all(f.endswith(".cu") for f in found["cu"])


def test_sources_include_every_folder_with_kernel_files(tmp_path):
    for f in ("ops/registration.cpp", "ops/a/cpu.cpp", "ops/a/cuda.cu", "ops/b/b.cuh", "ops/x.cpp"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    assert find_sources(tmp_path) == {
        "cpp": ["ops/registration.cpp", "ops/a/cpu.cpp"],
        "cu": ["ops/a/cuda.cu"],
        "hdr": ["ops/b/b.cuh"],
    }


def test_flags_come_from_the_bzl_file_the_macro_loads():
    flags = bzl_lists(ROOT / "tools/torch/kernel_flags.bzl")
    assert sorted(flags) == [
        "TORCH_CPU_KERNEL_COPTS",
        "TORCH_CPU_KERNEL_COPTS_AARCH64",
        "TORCH_NVCC_COPTS",
        "TORCH_OP_LIBRARY_LINKOPTS",
    ]
    assert "-DCPU_CAPABILITY=AVX2" in flags["TORCH_CPU_KERNEL_COPTS"]


@pytest.mark.parametrize(
    "text",
    ['X = ["a"] + ["b"]\n', 'X = select({"a": ["b"]})\n', 'load(":x.bzl", "Y")\n', "X = [1]\n"],
)
def test_flags_file_with_anything_but_string_lists_is_refused(tmp_path, text):
    path = tmp_path / "flags.bzl"
    path.write_text('"""Doc."""\n\nOK = ["-O3"]\n' + text)
    with pytest.raises(RuntimeError, match="flags.bzl:4: not a NAME = \\[strings\\] constant"):
        bzl_lists(path)


def _bench(**over) -> dict:
    data = {
        "device": "NVIDIA H200",
        "shape": [65536, 1024],
        "dtype": "float32",
        "clone_gbps": 4000.0,
        "rows": [
            {"op": "op_a", "impl": "my_ops", "ms": 0.2, "gbps": 3640, "clone_bw_fraction": 0.91},
            {"op": "op_a", "impl": "eager", "ms": 0.4, "gbps": 1800, "clone_bw_fraction": 0.45},
            {"op": "op_b", "impl": "my_ops", "ms": 0.3, "gbps": 3120, "clone_bw_fraction": 0.78},
        ],
        "targets": [
            {"op": "op_a", "what": "bandwidth / copy >= 0.8", "value": 0.91, "met": True},
            {"op": "op_b", "what": "bandwidth / copy >= 0.7", "value": 0.78, "met": True},
        ],
        "all_met": True,
    }
    return data | over


def test_bench_verdict_lists_every_op_bench_reports():
    assert bench_verdict(_bench(), True) == (True, "op_a 0.91 op_b 0.78 of copy (targets met)")
    assert bench_verdict(_bench(), False) == (
        True,
        "op_a 0.91 op_b 0.78 of copy (cpu, targets not checked)",
    )


def test_bench_verdict_fails_on_a_missed_or_missing_target():
    data = _bench(all_met=False)
    data["targets"][1] |= {"value": 0.6, "met": False}
    assert bench_verdict(data, True) == (
        False,
        "op_a 0.91 op_b 0.78 of copy (targets missed: op_b bandwidth / copy >= 0.7: 0.60)",
    )
    assert not bench_verdict(_bench(targets=[]), True)[0]
    assert not bench_verdict(_bench(all_met=False), True)[0]
    assert not bench_verdict(_bench(rows=[]), False)[0]


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
        (("out", "--budget", "-1"), "--budget"),
        (("out", "--budget", "nan"), "--budget"),
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
    # The budget leaves room for a loaded 2-core machine; a GPU run has 450 s by default.
    proc = _run(str(out), "--cpu-only", "--tests-subset", SUBSET, "--budget", "780", timeout=870)
    print(proc.stdout, proc.stderr, sep="\n")
    verdict = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, verdict
    # Built from the declared data, not from the checkout behind the runfiles.
    assert f"repo {ROOT}," in proc.stdout
    assert re.match(
        r"gpu_check: PASS build=ok tests=[1-9]\d* passed/0 failed.* \(subset\) export=ok "
        r"aoti_parity=ok loader_parity=ok bench=(\w+ [\d.]+ )+of copy \(cpu, targets not checked\)",
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
    # Each C++ source of the Bazel target was compiled, and no nvcc ran.
    compiled = sorted(summary["steps"]["build"]["facts"]["compile_s"])
    assert compiled == [f for f in _bazel_srcs() if f.endswith(".cpp")]
    assert not re.search(r"^\$ \S*nvcc", (out / "build.log").read_text(), re.MULTILINE)
    assert summary["steps"]["tests"]["facts"]["partial"] == ["subset"]
    assert summary["steps"]["bench"]["facts"]["rows"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
