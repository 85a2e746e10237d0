"""gpu_check without building anything: its parsers, the toolkit search, the cudart choice,
the command line, and --dry-run's plan of a small fake checkout.

The plan is checked on that fake checkout (a copy of the script beside the few files
planning reads), not on the repository's tree, so that this test needs none of it: the
run of the real tree is gpu_check_cpu_run_test's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from script_under_test import SCRATCH, SCRIPT, run_script

sys.path.insert(0, str(SCRIPT.parent))
from build_step import CUDA_TOOLKIT, cuda_toolkit_script  # noqa: E402

sys.path.insert(0, str(cuda_toolkit_script().parent))
import cuda_toolkit  # noqa: E402
from build_step import (  # noqa: E402
    BUILD_INPUTS,
    choose_cudart,
    cudart_major,
    find_toolkit,
    read_build_inputs,
    toolkit_cudarts,
    wheel_cudarts,
)
from check_run import Run  # noqa: E402
from tests_step import _overlaps  # noqa: E402

# The fake checkout's build inputs: each flag list has its own marker, so a plan that took
# the wrong list, or none, shows.
_BUILD_INPUTS = {
    "flags": {
        "TORCH_CPU_KERNEL_COPTS": ["-DFIXTURE_CPU_X86"],
        "TORCH_CPU_KERNEL_COPTS_AARCH64": ["-DFIXTURE_CPU_AARCH64"],
        "TORCH_NVCC_COPTS": ["-DFIXTURE_NVCC"],
        "TORCH_OP_LIBRARY_CUDA_COPTS": ["-DFIXTURE_WITH_CUDA"],
        "TORCH_OP_LIBRARY_LINKOPTS": ["-Wl,--fixture-link"],
        "TORCH_STABLE_COPTS": ["-DTORCH_TARGET_VERSION=0x020d000000000000", "-DFIXTURE_STABLE"],
    },
    "companion": {"cpp": ["ops/cxx/companion.cpp"], "cu": [], "generated": []},
    "loader": {
        "cpp": ["deploy/loader/cli.cpp", "deploy/loader/main.cpp", "deploy/runtime/src/model.cpp"],
        "cu": [],
        "generated": ["deploy/runtime/src/package_contract.h"],
    },
    "op_library": {
        "cpp": ["ops/a/cpu.cpp", "ops/a/cpu_vec.cpp", "ops/b/cpu.cpp", "ops/registration.cpp"],
        "cu": ["ops/a/cuda.cu"],
        "generated": ["ops/my_ops_c_shims.cpp"],
    },
}
_CPU_FLAG = "-DFIXTURE_CPU_AARCH64" if platform.machine() == "aarch64" else "-DFIXTURE_CPU_X86"
# What planning reads, and files the list leaves out (tests, a stray source, headers).
_CHECKOUT_FILES = [
    "ops/registration.cpp",
    "ops/a/cpu.cpp",
    "ops/a/cpu_vec.cpp",
    "ops/a/cuda.cu",
    "ops/a/a.h",
    "ops/b/cpu.cpp",
    "ops/common/launch.cuh",
    "ops/cxx/companion.cpp",
    "ops/stray/cpu.cpp",
    "deploy/loader/main.cpp",
    "deploy/loader/cli.cpp",
    "deploy/loader/cli.h",
    "deploy/loader/tests/cli_test.cpp",
    "deploy/runtime/src/model.cpp",
    "deploy/runtime/src/runner.h",
    "deploy/runtime/include/my_ops/model.h",
    "deploy/runtime/tests/model_test.cpp",
    "python/tests/test_ops.py",
    "checks/one_test.py",
]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A fake checkout, laid out as on the GPU machine: the script in tools/gpu_check/, the
    toolkit search in third_party/ (not in runfiles), the kernel files all empty."""
    root = tmp_path / "checkout"
    for f in _CHECKOUT_FILES:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("")
    (root / "tools/gpu_check").mkdir(parents=True)
    (root / BUILD_INPUTS).write_text(json.dumps(_BUILD_INPUTS))
    for f in SCRIPT.parent.glob("*.py"):
        if not f.name.endswith("_test.py"):
            shutil.copy(f, root / "tools/gpu_check" / f.name)
    (root / CUDA_TOOLKIT).parent.mkdir(parents=True)
    shutil.copy(cuda_toolkit_script(), root / CUDA_TOOLKIT)
    return root


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{", "unreadable"),
        ("[]", "unreadable"),
        ('{"flags": {}, "loader": {"generated": []}}', "unreadable"),
        ('{"flags": {"X": [1]}, "loader": {}, "op_library": {}}', "unreadable"),
        (
            json.dumps({**_BUILD_INPUTS, "loader": {"cpp": [], "cu": []}}),
            "not the generated file's shape",
        ),
        (
            json.dumps({**_BUILD_INPUTS, "flags": {"TORCH_NVCC_COPTS": []}}),
            "not the generated file's shape",
        ),
        (
            json.dumps({**_BUILD_INPUTS, "op_library": {"cpp": [], "cu": [], "generated": []}}),
            "this script writes only those",
        ),
    ],
)
def test_build_inputs_it_cannot_follow_are_refused(tmp_path, text, error):
    (tmp_path / BUILD_INPUTS).parent.mkdir(parents=True)
    (tmp_path / BUILD_INPUTS).write_text(text)
    with pytest.raises(RuntimeError, match=f"^{BUILD_INPUTS}: .*{error}"):
        read_build_inputs(tmp_path)


def test_the_fake_checkouts_build_inputs_read_back(checkout):
    assert read_build_inputs(checkout) == _BUILD_INPUTS


def _toolkit(root: Path, version: str, cudart: str | None = None, log: Path | None = None):
    """A fake CUDA toolkit: bin/nvcc prints version (and logs its arguments to log)."""
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "include/cuda_runtime.h").write_text("")
    record = f'echo "$*" >> {log}\n' if log else ""
    nvcc = root / "bin/nvcc"
    nvcc.write_text(
        f"#!/bin/sh\n{record}echo 'Cuda compilation tools, release {version}, V{version}.7'\n"
    )
    nvcc.chmod(0o755)
    if cudart:
        (root / "lib64").mkdir()
        (root / "lib64" / cudart).write_text("")
    return root


def _find(warnings: list[str] | None = None, **env) -> tuple[Path | None, str | None]:
    default, sites = env.pop("default"), env.pop("sites")
    return cuda_toolkit.find_root(
        [] if warnings is None else warnings, env=env, default_root=default, site_packages=sites
    )


def test_toolkit_search_order(tmp_path):
    home, path_tk = _toolkit(tmp_path / "home", "13.0"), _toolkit(tmp_path / "on_path", "12.9")
    default = _toolkit(tmp_path / "usr_local_cuda", "12.8")
    site = tmp_path / "site-packages"
    wheel = _toolkit(site / "nvidia/cu13", "13.1")
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    on_path = f"{empty}{os.pathsep}{path_tk / 'bin'}"
    common = {"default": default, "sites": [tmp_path / "other", site]}
    assert _find(CUDA_HOME=str(home), PATH=on_path, **common) == (home, "$CUDA_HOME")
    assert _find(PATH=on_path, **common) == (path_tk, "nvcc on PATH")
    assert _find(PATH=str(empty), **common) == (default, str(default))
    common["default"] = tmp_path / "no_such_cuda"
    assert _find(PATH=str(empty), **common) == (wheel, f"nvidia-cuda-nvcc wheel in {site}")
    common["sites"] = [tmp_path / "other"]
    assert _find(PATH=str(empty), **common) == (None, None)


def test_toolkit_search_details(tmp_path):
    real = _toolkit(tmp_path / "cuda-12.9", "12.9")
    links = tmp_path / "links"
    links.mkdir()
    (links / "nvcc").symlink_to(real / "bin/nvcc")
    site = tmp_path / "site-packages"
    old_wheel = _toolkit(site / "nvidia/cuda_nvcc", "12.8")
    common = {"default": tmp_path / "none", "sites": [site]}
    # nvcc on PATH as a symlink: the toolkit it points into.
    assert _find(PATH=str(links), **common) == (real, "nvcc on PATH")
    # $CUDA_HOME without bin/nvcc: a warning, and the search goes on.
    warnings: list[str] = []
    assert _find(warnings, CUDA_HOME=str(tmp_path / "none"), PATH="", **common)[0] == old_wheel
    assert warnings == [f"$CUDA_HOME={tmp_path / 'none'} has no bin/nvcc; looking elsewhere"]
    # The CUDA 13 wheel's layout wins over the older one, the newest cu<N> first.
    cu12, cu13 = _toolkit(site / "nvidia/cu12", "12.9"), _toolkit(site / "nvidia/cu13", "13.0")
    assert _find(PATH="", **common)[0] == cu13
    shutil.rmtree(cu13)
    assert _find(PATH="", **common)[0] == cu12


def test_toolkit_script_takes_site_packages_and_default_root(tmp_path):
    site = tmp_path / "site-packages"
    wheel = _toolkit(site / "nvidia/cu13", "13.1")
    cmd = [sys.executable, str(cuda_toolkit_script())]
    cmd += ["--default-root", str(tmp_path / "none"), "--site-packages", str(site)]
    env = {"PATH": str(tmp_path)}  # no nvcc there, no $CUDA_HOME
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    info = json.loads(proc.stdout)
    assert (info["root"], info["version"]) == (str(wheel), "13.1")
    assert info["nvcc"] == str(wheel / "bin/nvcc")


def _lib(path: Path, target: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if target:
        (path.parent / target).write_text("")
        path.symlink_to(target)
    else:
        path.write_text("")
    return path


def test_cudart_versions_and_where_they_are_found(tmp_path):
    assert cudart_major(_lib(tmp_path / "a/libcudart.so.13")) == 13
    assert cudart_major(_lib(tmp_path / "b/libcudart.so.12.8.90")) == 12
    assert cudart_major(_lib(tmp_path / "c/libcudart.so", "libcudart.so.11.8.89")) == 11
    assert cudart_major(_lib(tmp_path / "d/libcudart.so")) is None
    root = tmp_path / "cuda"
    target = _lib(root / "targets/x86_64-linux/lib/libcudart.so.13")
    assert toolkit_cudarts(root) == [target]
    lib64 = _lib(root / "lib64/libcudart.so", "libcudart.so.13.0.96")
    assert toolkit_cudarts(root)[:2] == [root / "lib64/libcudart.so.13.0.96", lib64]
    site = tmp_path / "site"
    old = _lib(site / "nvidia/cuda_runtime/lib/libcudart.so.12")
    cu13 = _lib(site / "nvidia/cu13/lib/libcudart.so.13")
    cu12 = _lib(site / "nvidia/cu12/lib/libcudart.so.12")
    assert wheel_cudarts([tmp_path / "nothing", site]) == [cu13, cu12, old]


def test_cudart_choice_and_warning(tmp_path):
    w12, w13 = _lib(tmp_path / "w12/libcudart.so.12"), _lib(tmp_path / "w13/libcudart.so.13")
    t13, t12 = _lib(tmp_path / "t13/libcudart.so.13"), _lib(tmp_path / "t12/libcudart.so.12")
    # torch's cudart as new as nvcc: it, and no warning.
    for nvcc, wheel, toolkit in [("13.0", w13, t13), ("12.8", w12, t13), ("12.4", w13, t12)]:
        c = choose_cudart(nvcc, [wheel], [toolkit])
        assert (c.path, c.warning) == (wheel, None)
    # No wheel (a torch without them): the toolkit's, and nothing to compare with.
    assert (choose_cudart("13.0", [], [t13]).path, choose_cudart("13.0", [], [t13]).warning) == (
        t13,
        None,
    )
    # nvcc 13, torch's cudart 12: the toolkit's 13 if there is one, and one warning line.
    c = choose_cudart("13.0", [w12], [t12, t13])
    assert c.path == t13
    assert c.warning.startswith("WARNING: nvcc 13.0 is newer than torch's cudart (libcudart.so.12)")
    assert "__cudaLaunchKernel" in c.warning and str(t13) in c.warning and "\n" not in c.warning
    c = choose_cudart("13.1", [w12], [t12])
    assert c.path == w12
    assert c.warning.startswith("WARNING: nvcc 13.1 is newer than torch's cudart")
    assert "will not load" in c.warning
    assert choose_cudart("13.0", [], []).path is None


def test_the_toolkit_found_is_every_childs_cuda_home(tmp_path, monkeypatch):
    # As the build step finds it, outside a dry run: summary facts and the children's env.
    home = _toolkit(tmp_path / "home", "12.9", cudart="libcudart.so.12")
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    (tmp_path / "work").mkdir()
    args = argparse.Namespace(cpu_only=False, budget=60.0, out_dir=tmp_path, nvcc_arch="native")
    run = Run(args, tmp_path / "work")
    import torch

    tk, cudart = find_toolkit(run, Path(torch.__file__).resolve().parent)
    assert (tk["root"], tk["version"], tk["how"]) == (str(home), "12.9", "$CUDA_HOME")
    assert cudart.path is not None
    run.lib = tmp_path / "work/libmy_ops.so"
    env = run.child_env()
    assert env["CUDA_HOME"] == str(home)
    assert env["PATH"].split(os.pathsep)[0] == str(home / "bin")
    run.write_summary(final=False)
    facts = json.loads((tmp_path / "summary.json").read_text())["environment"]
    assert facts["cuda_toolkit"]["root"] == str(home)
    assert facts["cuda_toolkit"]["nvcc"] == str(home / "bin/nvcc")
    assert facts["cuda_toolkit"]["version"] == "12.9"
    assert facts["cudart"]["path"] == str(cudart.path)


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
    proc = run_script(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert proc.stderr.startswith("gpu_check: error: ") and proc.stderr.count("\n") == 1
    assert proc.stdout == ""


def test_out_dir_that_is_a_file_is_bad_usage():
    path = SCRATCH / "a_file"
    path.write_text("")
    proc = run_script(str(path), "--cpu-only")
    assert proc.returncode == 2
    assert "is not a folder" in proc.stderr


def test_help_documents_steps_outputs_options_and_exit_status():
    proc = run_script("--help")
    assert proc.returncode == 0, proc.stderr
    for word in ("build", "tests", "export", "loader", "bench", "--cpu-only", "--tests-subset"):
        assert word in proc.stdout
    assert re.search(
        r"\n  --tests PATH +what the tests step runs \(default: python/tests\)\n", proc.stdout
    )
    assert "verdict.txt" in proc.stdout and "summary.json" in proc.stdout
    assert "0 PASS, 1 FAIL, 2 bad usage" in proc.stdout


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("python/tests", "python/tests/test_properties.py", True),
        ("python/tests/", "python/tests", True),
        (".", "python/tests", True),
        ("python", "python/tests", True),
        ("python/tests/test_class.py", "python/tests/test_properties.py", False),
        ("python/tests_more", "python/tests", False),
        ("tools/gpu_check/testdata/fixture_test.py", "python/tests", False),
    ],
)
def test_whether_the_tests_path_reaches_into_the_suite(a, b, overlap):
    # It decides whether the hypothesis stub and test_properties.py's --ignore apply.
    assert _overlaps(a, b) is overlap and _overlaps(b, a) is overlap


def _dry_run(
    tmp_path: Path, checkout: Path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess, Path]:
    """--dry-run of the fake checkout's copy of the script, its work folder under a fresh
    tmp_path/tmp."""
    (tmp_path / "tmp").mkdir()
    env.setdefault("CUDA_PATH", "")
    # Unset, the script takes the toolkit search from the checkout's third_party/.
    env["GPU_CHECK_CUDA_TOOLKIT_PY"] = ""
    out = tmp_path / "out"
    script = checkout / "tools/gpu_check/gpu_check.py"
    tmp = str(tmp_path / "tmp")
    proc = run_script(str(out), "--dry-run", *args, script=script, TEST_TMPDIR=tmp, **env)
    print(proc.stdout, proc.stderr, sep="\n")
    # Nothing written: no OUT_DIR, and the work folder is gone.
    assert not out.exists() and not any((tmp_path / "tmp").iterdir())
    return proc, out


def _commands(stdout: str) -> dict[str, list[str]]:
    """The dry run's commands by step: "step:" lines, each followed by "  $ command" lines."""
    steps: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        if re.fullmatch(r"\w+:", line):
            steps[line[:-1]] = []
        elif line.startswith("  $ "):
            steps[list(steps)[-1]].append(line[4:])
    return steps


def _compiled(commands: list[str], root: Path) -> list[str]:
    """The sources under root that the commands compile (-c), relative to it."""
    return sorted(m.group(1) for c in commands for m in [re.search(rf" -c {root}/(\S+) ", c)] if m)


def test_dry_run_prints_every_command_with_the_toolkit_and_runs_none(tmp_path, checkout):
    log = tmp_path / "nvcc_calls"
    home = _toolkit(tmp_path / "cuda", "13.2", cudart="libcudart.so.13", log=log)
    proc, _ = _dry_run(tmp_path, checkout, CUDA_HOME=str(home))
    assert proc.returncode == 0, proc.stderr
    assert f", repo {checkout}, work " in proc.stdout
    steps = _commands(proc.stdout)
    assert list(steps) == ["build", "tests", "export", "loader", "bench"]
    # Every command, compiles included, runs with the toolkit as $CUDA_HOME.
    for cmd in sum(steps.values(), []):
        assert cmd.startswith(f"CUDA_HOME={home} "), cmd
    nvcc = [c for c in steps["build"] if f" {home}/bin/nvcc " in f" {c}"]
    assert _compiled(nvcc, checkout) == ["ops/a/cuda.cu"]
    assert all(" -DFIXTURE_NVCC " in c and _CPU_FLAG not in c for c in nvcc)
    gxx = [c for c in steps["build"] if c not in nvcc and " -c " in c]
    assert _compiled(gxx, checkout) == [
        "ops/a/cpu.cpp",
        "ops/a/cpu_vec.cpp",
        "ops/b/cpu.cpp",
        "ops/registration.cpp",
    ]
    assert all("-DFIXTURE_NVCC" not in c for c in gxx)
    # The vector math without the stable-ABI flags; the rest with them, and, with the CUDA
    # part, the generated file registering its kernels too.
    vec = [c for c in gxx if "/cpu_vec.cpp " in c]
    assert len(vec) == 1 and f" {_CPU_FLAG} " in vec[0] and "FIXTURE_STABLE" not in vec[0]
    stable = [c for c in gxx if c not in vec]
    assert all(" -DFIXTURE_STABLE " in c and _CPU_FLAG not in c for c in stable)
    assert all(" -DFIXTURE_WITH_CUDA " in c for c in stable)
    link = [c for c in steps["build"] if re.search(r" -o \S+/libmy_ops\.so ", c)]
    assert len(link) == 1 and link[0].endswith(" -l:libcudart.so.13")
    # Four sources, the CUDA one and the generated file, written before anything compiles.
    assert " -Wl,--fixture-link " in link[0] and link[0].count(".o ") == 6
    # The companion, for this machine's torch release.
    release = ".".join(torch.__version__.split("+")[0].split(".")[:3])
    companion = [c for c in steps["build"] if f"/libmy_ops_torch{release}.so " in c]
    assert len(companion) == 1 and f" {checkout}/ops/cxx/companion.cpp " in companion[0]
    shims = steps["build"][0]
    generator = r" tools/torch/c_shims\.py ops/registration\.cpp \S+/gen/ops/my_ops_c_shims\.cpp$"
    assert re.search(generator, shims), shims
    assert sum(bool(re.search(r" -c \S+/gen/ops/my_ops_c_shims\.cpp ", c)) for c in gxx) == 1
    loader = [c for c in steps["build"] if re.search(r" -o \S+/loader ", c)]
    assert len(loader) == 1, steps["build"]
    sources = re.findall(rf" {checkout}/(\S+\.cpp)\b", loader[0])
    assert sources == [
        "deploy/loader/cli.cpp",
        "deploy/loader/main.cpp",
        "deploy/runtime/src/model.cpp",
    ]
    assert f" -I{checkout}/deploy/runtime/include " in loader[0]
    contract = [c for c in steps["build"] if "package_contract.py" in c]
    assert len(contract) == 1 and contract[0].endswith("/gen/deploy/runtime/src/package_contract.h")
    tests = steps["tests"]
    assert len(tests) == 1 and "MY_OPS_TEST_DEVICES=cuda " in tests[0]
    assert " -m pytest python/tests -q " in tests[0]
    assert " -m deploy.exporter --device cuda " in steps["export"][0]
    # The GPU compile itself is under test: no package from an earlier export's cache.
    assert steps["export"][0].rstrip().endswith(" --no-cache")
    assert sum("/loader --ops " in c for c in steps["loader"]) == 2
    bench = steps["bench"]
    assert len(bench) == 3 and all(" ops/bench.py --device cuda " in c for c in bench)
    assert " --rows 65536 --cols 1024 " in bench[0]
    assert " --cols 4100 --dtype bfloat16 " in bench[1] and " --offset 1 " in bench[2]
    assert f"toolkit: CUDA 13.2 at {home} (found: $CUDA_HOME)" in proc.stdout
    assert "WARNING" not in proc.stdout
    assert proc.stdout.splitlines()[-1] == (
        f"gpu_check: DRY RUN {sum(map(len, steps.values()))} commands planned, none run "
        f"(CUDA_HOME={home})"
    )
    # nvcc was only asked its version: nothing compiled.
    assert log.read_text().splitlines() == ["--version"]


def test_dry_run_warns_once_and_links_the_toolkits_cudart_when_nvcc_is_newer(tmp_path, checkout):
    # The locked torch's wheel has libcudart.so.13; this nvcc's objects would need 14's.
    home = _toolkit(tmp_path / "cuda", "14.0", cudart="libcudart.so.14")
    proc, _ = _dry_run(tmp_path, checkout, CUDA_HOME=str(home))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    warnings = [i for i, line in enumerate(lines) if "WARNING" in line]
    assert len(warnings) == 1 and warnings[0] < lines.index("build:")
    assert "nvcc 14.0 is newer than torch's cudart (libcudart.so.13)" in lines[warnings[0]]
    build = _commands(proc.stdout)["build"]
    link = [c for c in build if re.search(r" -o \S+/libmy_ops\.so ", c)][0]
    assert link.endswith(f" -L{home}/lib64 -Wl,-rpath,{home}/lib64 -l:libcudart.so.14")


def _no_toolkit(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "bin"
    empty.mkdir()
    cxx = shutil.which("g++")
    assert cxx, "the test needs g++"
    env = {"PATH": str(empty), "CXX": cxx, "CUDA_HOME": ""}
    env["GPU_CHECK_DEFAULT_CUDA_ROOT"] = str(tmp_path / "no_cuda")
    return env


def test_dry_run_without_a_toolkit_fails_with_one_line(tmp_path, checkout):
    env = _no_toolkit(tmp_path)
    proc, _ = _dry_run(tmp_path, checkout, **env)
    assert proc.returncode == 1
    assert proc.stderr.startswith("gpu_check: dry run: cannot plan build: no CUDA toolkit")
    assert proc.stderr.count("\n") == 1 and "--cpu-only" in proc.stderr
    assert "DRY RUN" not in proc.stdout
    # With --cpu-only it needs none.
    (tmp_path / "tmp").rmdir()
    proc, _ = _dry_run(tmp_path, checkout, "--cpu-only", **env)
    assert proc.returncode == 0, proc.stderr
    steps = _commands(proc.stdout)
    assert not any("nvcc" in c for c in sum(steps.values(), []))
    assert _compiled(steps["build"], checkout) == [
        "ops/a/cpu.cpp",
        "ops/a/cpu_vec.cpp",
        "ops/b/cpu.cpp",
        "ops/registration.cpp",
    ]
    assert not any("-DFIXTURE_WITH_CUDA" in c for c in steps["build"])
    link = [c for c in steps["build"] if re.search(r" -o \S+/libmy_ops\.so ", c)][0]
    # The four sources and the generated file.
    assert "cudart" not in link and link.count(".o ") == 5
    assert "MY_OPS_TEST_DEVICES=cpu " in steps["tests"][0]
    assert len(steps["bench"]) == 1 and " --device cpu " in steps["bench"][0]


def test_dry_run_runs_the_tests_named_by_tests(tmp_path, checkout):
    env = _no_toolkit(tmp_path)
    proc, _ = _dry_run(tmp_path, checkout, "--cpu-only", "--tests", "checks/one_test.py", **env)
    assert proc.returncode == 0, proc.stderr
    (tests,) = _commands(proc.stdout)["tests"]
    assert " -m pytest checks/one_test.py -q " in tests and "python/tests" not in tests


def test_dry_run_with_tests_that_do_not_exist_fails_with_one_line(tmp_path, checkout):
    env = _no_toolkit(tmp_path)
    proc, _ = _dry_run(tmp_path, checkout, "--cpu-only", "--tests", "checks/none", **env)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"gpu_check: dry run: cannot plan tests: --tests checks/none: no such file or folder "
        f"in {checkout}\n"
    )
    assert "DRY RUN" not in proc.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
