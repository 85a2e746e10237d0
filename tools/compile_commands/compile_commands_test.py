"""compile_commands.py's pure functions, on a hand-written aquery sample.

The sample has the shape of `bazel aquery --output=jsonproto` in Bazel 7
(actions with arguments and ids into the targets and configuration tables;
artifacts and pathFragments, which the generator does not need, are there too)
and the argument forms seen in this repository's real actions. Every expected
value is written out by hand.
"""

from __future__ import annotations

import json
import os
import stat

import compile_commands as cc
import pytest

WS = "/home/dev/my_ops"
EXECROOT = "/cache/ob/execroot/_main"
OB = "/cache/ob"
AMD64 = "external/_main~sysroot~debian_bookworm_amd64_sysroot"
ARM64 = "external/_main~sysroot~debian_bookworm_arm64_sysroot"


def gcc(compiler: str, sysroot: str, gcc_include: str, bin_dir: str, obj: str) -> list[str]:
    """A CppCompile command line as this repository's toolchains write one, shortened."""
    return [
        compiler,
        "-no-canonical-prefixes",
        "-fno-canonical-system-headers",
        "-nostdinc",
        "-isystem",
        f"{sysroot}/usr/include/c++/12",
        "-isystem",
        gcc_include,
        "-isystem",
        f"{sysroot}/usr/include",
        "-MD",
        "-MF",
        f"{bin_dir}/{obj}.d",
        f"-frandom-seed={bin_dir}/{obj}.o",
        '-D__DATE__="redacted"',
        "-iquote",
        ".",
        "-iquote",
        bin_dir,
        f"--sysroot={sysroot}",
        "-c",
        "deploy/loader/cli.cpp",
        "-o",
        f"{bin_dir}/{obj}.o",
    ]


SAMPLE = {
    "artifacts": [{"id": 1, "pathFragmentId": 3}],
    "pathFragments": [
        {"id": 1, "label": "deploy"},
        {"id": 2, "label": "loader", "parentId": 1},
        {"id": 3, "label": "cli.cpp", "parentId": 2},
    ],
    "configuration": [
        {"id": 1, "mnemonic": "k8-fastbuild-ST-305f0a7778f7", "platformName": "k8"},
        {"id": 2, "mnemonic": "k8-fastbuild", "platformName": "k8"},
        {"id": 3, "mnemonic": "k8-opt-exec-ST-d57f47055a04", "platformName": "k8", "isTool": True},
    ],
    "targets": [
        {"id": 1, "label": "//deploy/loader:cli", "ruleClassId": 1},
        {"id": 2, "label": "//ops:my_ops_cuda", "ruleClassId": 2},
        {"id": 3, "label": "@@_main~_repo_rules~libsodium//:libsodium", "ruleClassId": 1},
        {"id": 4, "label": "//deploy/loader:package_contract_gen", "ruleClassId": 1},
    ],
    "ruleClasses": [{"id": 1, "name": "cc_library"}, {"id": 2, "name": "cuda_library"}],
    "actions": [
        # The aarch64 copy of cli.cpp comes first, in a transitioned
        # configuration that Bazel 7 names after the host CPU.
        {
            "targetId": 1,
            "mnemonic": "CppCompile",
            "configurationId": 1,
            "arguments": gcc(
                "/usr/bin/aarch64-linux-gnu-gcc-12",
                ARM64,
                "/usr/lib/gcc-cross/aarch64-linux-gnu/12/include",
                "bazel-out/k8-fastbuild-ST-305f0a7778f7/bin",
                "deploy/loader/_objs/cli/cli.pic",
            ),
        },
        {
            "targetId": 1,
            "mnemonic": "CppCompile",
            "configurationId": 2,
            "arguments": gcc(
                "/usr/bin/gcc-12",
                AMD64,
                "/usr/lib/gcc/x86_64-linux-gnu/12/include",
                "bazel-out/k8-fastbuild/bin",
                "deploy/loader/_objs/cli/cli.pic",
            ),
            "primaryOutputId": 1,
        },
        # The same file for the exec platform: a tool's build, never preferred.
        {
            "targetId": 1,
            "mnemonic": "CppCompile",
            "configurationId": 3,
            "arguments": ["/usr/bin/gcc-12", "-O2", "-c", "deploy/loader/cli.cpp"],
        },
        {
            "targetId": 2,
            "mnemonic": "CudaCompile",
            "configurationId": 2,
            "arguments": [
                "third_party/rules_cuda/cuda/private/nvcc_stable_symbols.sh",
                "/usr/bin/nm",
                "/usr/bin/objcopy",
                "bazel-out/k8-fastbuild/bin/ops/_objs/my_ops_cuda/cuda.pic.o",
                "/usr/local/cuda/bin/nvcc",
                "-x",
                "cu",
                "-I.",
                "-Ibazel-out/k8-fastbuild/bin",
                "-isystem",
                "external/_main~libtorch~libtorch/site-packages/torch/include",
                "-Xcompiler",
                "--sysroot=external/_main~sysroot~debian_bookworm_amd64_sysroot",
                "-Xcompiler",
                "-nostdinc",
                "-isystem",
                "/usr/lib/gcc/x86_64-linux-gnu/12/include",
                "-frandom-seed=ops/rms_norm/cuda.cu",
                "-c",
                "ops/rms_norm/cuda.cu",
                "-o",
                "bazel-out/k8-fastbuild/bin/ops/_objs/my_ops_cuda/cuda.pic.o",
            ],
        },
        # An external repository's source: no entry.
        {
            "targetId": 3,
            "mnemonic": "CppCompile",
            "configurationId": 2,
            "arguments": ["/usr/bin/gcc-12", "-c", "external/_main~_repo_rules~libsodium/src/a.c"],
        },
        # A generated source: no entry either.
        {
            "targetId": 4,
            "mnemonic": "CppCompile",
            "configurationId": 2,
            "arguments": ["/usr/bin/gcc-12", "-c", "bazel-out/k8-fastbuild/bin/deploy/gen.cpp"],
        },
        # Not a compile.
        {
            "targetId": 1,
            "mnemonic": "CppLink",
            "configurationId": 2,
            "arguments": ["/usr/bin/gcc-12", "-o", "libcli.so", "deploy/loader/x.cpp"],
        },
    ],
}


def test_entries_from_sample() -> None:
    entries, labels = cc.entries_from_aquery(SAMPLE, WS, EXECROOT, OB, "k8-fastbuild")
    assert entries == [
        {
            "directory": "/home/dev/my_ops",
            "file": "deploy/loader/cli.cpp",
            "arguments": [
                "/usr/bin/gcc-12",
                "-no-canonical-prefixes",
                "-nostdlibinc",
                "-isystem",
                "/cache/ob/external/_main~sysroot~debian_bookworm_amd64_sysroot/usr/include/c++/12",
                "-idirafter",
                "/usr/lib/gcc/x86_64-linux-gnu/12/include",
                "-isystem",
                "/cache/ob/external/_main~sysroot~debian_bookworm_amd64_sysroot/usr/include",
                '-D__DATE__="redacted"',
                "-iquote",
                ".",
                "-iquote",
                "/cache/ob/execroot/_main/bazel-out/k8-fastbuild/bin",
                "--sysroot=/cache/ob/external/_main~sysroot~debian_bookworm_amd64_sysroot",
                "-c",
                "deploy/loader/cli.cpp",
                "-o",
                "/cache/ob/execroot/_main/bazel-out/k8-fastbuild/bin/deploy/loader/_objs/cli/cli.pic.o",
            ],
        },
        {
            "directory": "/home/dev/my_ops",
            "file": "ops/rms_norm/cuda.cu",
            "arguments": [
                "/usr/local/cuda/bin/nvcc",
                "-x",
                "cu",
                "-I.",
                "-I/cache/ob/execroot/_main/bazel-out/k8-fastbuild/bin",
                "-isystem",
                "/cache/ob/external/_main~libtorch~libtorch/site-packages/torch/include",
                "-Xcompiler",
                "--sysroot=/cache/ob/external/_main~sysroot~debian_bookworm_amd64_sysroot",
                "-Xcompiler",
                "-nostdinc",
                "-isystem",
                "/usr/lib/gcc/x86_64-linux-gnu/12/include",
                "-c",
                "ops/rms_norm/cuda.cu",
                "-o",
                "/cache/ob/execroot/_main/bazel-out/k8-fastbuild/bin/ops/_objs/my_ops_cuda/cuda.pic.o",
            ],
        },
    ]
    assert labels == ["//deploy/loader:cli", "//ops:my_ops_cuda"]


def test_entries_do_not_depend_on_action_order() -> None:
    reordered = dict(SAMPLE, actions=list(reversed(SAMPLE["actions"])))
    assert cc.entries_from_aquery(reordered, WS, EXECROOT, OB) == cc.entries_from_aquery(
        SAMPLE, WS, EXECROOT, OB
    )


def test_only_configuration_left_is_used() -> None:
    # Under --config=aarch64 every copy targets ARM: one entry all the same.
    aarch64_only = dict(SAMPLE, actions=SAMPLE["actions"][:1])
    entries, labels = cc.entries_from_aquery(aarch64_only, WS, EXECROOT, OB)
    assert [e["file"] for e in entries] == ["deploy/loader/cli.cpp"]
    assert entries[0]["arguments"][0] == "/usr/bin/aarch64-linux-gnu-gcc-12"
    assert labels == ["//deploy/loader:cli"]


def test_top_level_configuration_first() -> None:
    # Under --config=aarch64 the top-level configuration targets aarch64 and
    # wins over an x86-64 copy from a transition.
    aarch64 = {"id": 4, "mnemonic": "linux_aarch64-fastbuild", "platformName": "aarch64"}
    x86_64 = {"id": 5, "mnemonic": "k8-fastbuild-ST-0123456789ab", "platformName": "k8"}
    arm_action = dict(SAMPLE["actions"][0], configurationId=4)
    x86_action = dict(SAMPLE["actions"][1], configurationId=5)
    aquery = dict(SAMPLE, configuration=[aarch64, x86_64], actions=[x86_action, arm_action])

    def compiler(top_level: str) -> str:
        entries, _ = cc.entries_from_aquery(aquery, WS, EXECROOT, OB, top_level)
        return entries[0]["arguments"][0]

    assert compiler("linux_aarch64-fastbuild") == "/usr/bin/aarch64-linux-gnu-gcc-12"
    # With another top level (or none known), x86-64 first.
    assert compiler("k8-fastbuild") == "/usr/bin/gcc-12"
    assert compiler("") == "/usr/bin/gcc-12"


def test_exec_configuration_used_only_when_alone() -> None:
    tool_only = dict(SAMPLE, actions=[SAMPLE["actions"][2]])
    entries, _ = cc.entries_from_aquery(tool_only, WS, EXECROOT, OB)
    assert entries == [
        {
            "directory": WS,
            "file": "deploy/loader/cli.cpp",
            "arguments": ["/usr/bin/gcc-12", "-O2", "-c", "deploy/loader/cli.cpp"],
        }
    ]


def test_empty_aquery() -> None:
    # aquery prints nothing at all when no action matches.
    assert cc.entries_from_aquery({}, WS, EXECROOT, OB) == ([], [])


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (
            [
                "external/rules_cuda~/cuda/private/nvcc_stable_symbols.sh",
                "nm",
                "objcopy",
                "o.o",
                "nvcc",
                "-c",
                "a.cu",
            ],
            ["nvcc", "-c", "a.cu"],
        ),
        (
            [
                "bazel-out/k8-opt-exec/bin/x/nvcc_stable_symbols.sh",
                "nm",
                "objcopy",
                "o.o",
                "/cuda/nvcc",
            ],
            ["/cuda/nvcc"],
        ),
        # Another script, or the wrapper's name as an argument: left alone.
        (
            ["tools/cuda/private/other.sh", "nm", "objcopy", "o.o", "nvcc"],
            ["tools/cuda/private/other.sh", "nm", "objcopy", "o.o", "nvcc"],
        ),
        (
            ["/usr/bin/gcc-12", "nvcc_stable_symbols.sh"],
            ["/usr/bin/gcc-12", "nvcc_stable_symbols.sh"],
        ),
        ([], []),
    ],
)
def test_strip_cuda_wrapper(arguments: list[str], expected: list[str]) -> None:
    assert cc.strip_cuda_wrapper(arguments) == expected


def test_strip_cuda_wrapper_without_nvcc() -> None:
    with pytest.raises(cc.Error, match="nvcc_stable_symbols.sh is called with 3 arguments"):
        cc.strip_cuda_wrapper(["nvcc_stable_symbols.sh", "nm", "objcopy", "o.o"])


@pytest.mark.parametrize(
    "argument, expected",
    [
        ("external/repo/include", "/cache/ob/external/repo/include"),
        ("bazel-out/k8-fastbuild/bin", "/cache/ob/execroot/_main/bazel-out/k8-fastbuild/bin"),
        ("bazel-out", "/cache/ob/execroot/_main/bazel-out"),
        ("-Iexternal/repo", "-I/cache/ob/external/repo"),
        ("-isystemexternal/repo/inc", "-isystem/cache/ob/external/repo/inc"),
        ("-iquotebazel-out/k8/bin", "-iquote/cache/ob/execroot/_main/bazel-out/k8/bin"),
        ("--sysroot=external/sys", "--sysroot=/cache/ob/external/sys"),
        ("-Xcompiler=--sysroot=external/sys", "-Xcompiler=--sysroot=/cache/ob/external/sys"),
        (
            "-Wl,-rpath,external/lib,--version-script=bazel-out/v.lds",
            "-Wl,-rpath,/cache/ob/external/lib,--version-script=/cache/ob/execroot/_main/bazel-out/v.lds",
        ),
        ("-Lbazel-out/lib", "-L/cache/ob/execroot/_main/bazel-out/lib"),
        # Workspace paths, absolute paths, other flags and macros: unchanged.
        (".", "."),
        ("-I.", "-I."),
        ("deploy/loader/cli.cpp", "deploy/loader/cli.cpp"),
        ("/usr/lib/gcc/x86_64-linux-gnu/12/include", "/usr/lib/gcc/x86_64-linux-gnu/12/include"),
        ("-fdebug-prefix-map=/proc/self/cwd=.", "-fdebug-prefix-map=/proc/self/cwd=."),
        ("-DPATH=external/x", "-DPATH=external/x"),
        ("externalize/x", "externalize/x"),
        ("my-external/x", "my-external/x"),
    ],
)
def test_rewrite_argument(argument: str, expected: str) -> None:
    assert cc.rewrite_argument(argument, EXECROOT, OB) == expected


def test_clang_compatible() -> None:
    arguments = [
        "/usr/bin/gcc-12",
        "-fno-canonical-system-headers",
        "-nostdinc",
        "-isystem",
        "/sysroot/usr/include/c++/12",
        "-isystem",
        "/usr/lib/gcc/x86_64-linux-gnu/12/include",
        "-isystem",
        "/opt/tc/lib/gcc/x86_64-linux-gnu/12.2.0/include-fixed",
        "-isystem",
        "/usr/lib/gcc-cross/aarch64-linux-gnu/12/include",
        "-isystem",
        "/sysroot/usr/include",
        "-isystem",
        "/usr/lib/gcc/x86_64-linux-gnu/12/include/extra",
        "-c",
        "a.cc",
    ]
    assert cc.clang_compatible(arguments) == [
        "/usr/bin/gcc-12",
        "-nostdlibinc",
        "-isystem",
        "/sysroot/usr/include/c++/12",
        "-idirafter",
        "/usr/lib/gcc/x86_64-linux-gnu/12/include",
        "-idirafter",
        "/opt/tc/lib/gcc/x86_64-linux-gnu/12.2.0/include-fixed",
        "-idirafter",
        "/usr/lib/gcc-cross/aarch64-linux-gnu/12/include",
        "-isystem",
        "/sysroot/usr/include",
        "-isystem",
        "/usr/lib/gcc/x86_64-linux-gnu/12/include/extra",
        "-c",
        "a.cc",
    ]
    # A trailing -isystem without its folder is left for the compiler to reject.
    assert cc.clang_compatible(["gcc", "-isystem"]) == ["gcc", "-isystem"]


def test_drop_build_only_flags() -> None:
    arguments = [
        "gcc",
        "-MD",
        "-MF",
        "x.d",
        "-MMD",
        "-MT",
        "t",
        "-MQ",
        "q",
        "-frandom-seed=x.o",
        "-Wall",
        "-c",
        "a.cc",
    ]
    assert cc.drop_build_only_flags(arguments) == ["gcc", "-Wall", "-c", "a.cc"]


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (["gcc", "-Wall", "-c", "ops/a.cpp", "-o", "a.o"], "ops/a.cpp"),
        (["gcc", "-o", "a.o", "ops/b.cc"], "ops/b.cc"),
        (["gcc", "-c", "-o", "a.o", "ops/b.cu"], "ops/b.cu"),
        (["gcc", "ops/a.cc", "ops/b.cc"], None),
        (["gcc", "-o", "a.o"], None),
    ],
)
def test_source_file(arguments: list[str], expected: str | None) -> None:
    assert cc.source_file(arguments) == expected


@pytest.mark.parametrize(
    "arguments, configuration, expected",
    [
        (["/usr/bin/gcc-12", f"--sysroot={AMD64}"], "k8-fastbuild", True),
        (["/usr/bin/aarch64-linux-gnu-gcc-12"], "k8-fastbuild-ST-1", False),
        (["/usr/bin/gcc-12", f"--sysroot={ARM64}"], "k8-fastbuild-ST-1", False),
        (["clang", "--target=aarch64-linux-gnu"], "k8-fastbuild", False),
        (["gcc", "-march=armv8-a"], "k8-fastbuild", False),
        (["gcc"], "linux_aarch64-fastbuild", False),
        (["gcc", "-march=x86-64-v3"], "k8-opt", True),
    ],
)
def test_targets_x86_64(arguments: list[str], configuration: str, expected: bool) -> None:
    assert cc.targets_x86_64(arguments, configuration) is expected


def test_aquery_expression() -> None:
    assert (
        cc.aquery_expression(["//a/...", "//b:c"])
        == 'mnemonic("CppCompile|CudaCompile", deps(//a/... + //b:c))'
    )


def test_write_atomically(tmp_path) -> None:
    path = tmp_path / "compile_commands.json"
    path.write_text("old")
    entries = [{"directory": "/w", "file": "a.cc", "arguments": ["gcc", "-c", "a.cc"]}]
    cc.write_atomically(path, entries)
    assert json.loads(path.read_text()) == entries
    assert os.listdir(tmp_path) == ["compile_commands.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_main_outside_bazel_run(monkeypatch, capsys) -> None:
    monkeypatch.delenv("BUILD_WORKSPACE_DIRECTORY", raising=False)
    assert cc.main([]) == 2
    assert "run this as `tools/bazel run //tools:compile_commands`" in capsys.readouterr().err


def test_bazel_flags_pass_through() -> None:
    assert cc.parse_args(["--config=asan", "-c", "opt"]) == ["--config=asan", "-c", "opt"]
