"""Macros for PyTorch C++ code: op libraries, and binaries that run against LibTorch."""

load("@bazel_skylib//rules:diff_test.bzl", "diff_test")
load("@bazel_skylib//rules:write_file.bzl", "write_file")
load("@libtorch//:defs.bzl", "torch_runtime_linkopts")
load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")
load("@rules_python//python:defs.bzl", "py_binary")
load("//tools/cc:sanitizers.bzl", "sanitizer_deps")
load("//tools/cuda:defs.bzl", "CUDA_AVAILABLE", "cuda_library")

# CPU kernels use at::vec at AVX2 width, the portable x86-64-v3 level that the
# exported packages also target. at::vec lives in a namespace named by
# CPU_CAPABILITY, so these copies never clash with torch's own.
# at::parallel_for is an inline OpenMP region in torch's OpenMP build, so
# without -fopenmp it would silently run on one thread.
TORCH_CPU_KERNEL_COPTS = [
    "-O3",
    "-fopenmp",
    "-mavx2",
    "-mfma",
    "-mf16c",
    "-DCPU_CAPABILITY=AVX2",
    "-DCPU_CAPABILITY_AVX2",
]

# The same kernels for linux-aarch64, at the armv8-a baseline: at::vec picks
# its NEON (128-bit) implementation from __aarch64__, and the NEON namespace
# keeps these copies apart from torch's DEFAULT ones. No x86 flags.
# -Wno-psabi: GCC notes that passing std::pair<Vectorized> changed in GCC 10.1;
# everything here, torch included, is built with a newer GCC.
TORCH_CPU_KERNEL_COPTS_AARCH64 = [
    "-O3",
    "-fopenmp",
    "-march=armv8-a",
    "-Wno-psabi",
    "-DCPU_CAPABILITY=NEON",
    "-DCPU_CAPABILITY_NEON",
]

# The defines torch's own extension builder passes to nvcc: they keep CUDA's
# half/bfloat16 operators out of the way of c10::Half and c10::BFloat16.
TORCH_NVCC_COPTS = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
]

# -z defs: every symbol must resolve at link time, not at dlopen on a
# user's machine. -fopenmp: the OpenMP runtime the CPU kernels' regions need.
TORCH_OP_LIBRARY_LINKOPTS = [
    "-Wl,-z,defs",
    "-fopenmp",
]

def torch_op_library(name, ops, registration = "registration.cpp", common = "common", visibility = None):
    """Builds lib<name>.so, a PyTorch op library, from one folder per op.

    Each op folder holds *.cpp (CPU kernels, with their TORCH_LIBRARY_IMPL),
    *.cu (CUDA kernels), and headers. `registration` holds the one
    TORCH_LIBRARY block with every schema. Adding an op means adding its
    folder to `ops` and its schema line to `registration`.

    Targets: lib<name>.so (the shared library), <name>_cpu and, when a CUDA
    toolkit is present, <name>_cuda. For linux-aarch64 (--config=aarch64 or
    a transition) the library holds the CPU kernels only: the CUDA part
    would need the aarch64 (sbsa) CUDA toolkit.

    Args:
      name: library name; the shared library is lib<name>.so.
      ops: op folder names, relative to this package.
      registration: the source file with TORCH_LIBRARY.
      common: folder of helpers shared by the ops.
      visibility: visibility of the shared library.
    """
    folders = [common] + ops
    headers = native.glob([f + "/*.h" for f in folders])
    cpu_srcs = [registration] + native.glob([f + "/*.cpp" for f in folders])
    cuda_srcs = native.glob([f + "/*.cu" for f in folders])
    cuda_hdrs = native.glob([f + "/*.cuh" for f in folders])
    _source_list(name, cpu_srcs, cuda_srcs, headers + cuda_hdrs)
    cc_library(
        name = name + "_cpu",
        srcs = cpu_srcs,
        hdrs = headers,
        copts = select({
            Label("@platforms//cpu:aarch64"): TORCH_CPU_KERNEL_COPTS_AARCH64,
            "//conditions:default": TORCH_CPU_KERNEL_COPTS,
        }),
        deps = ["//third_party/libtorch:torch_cpu"],
        alwayslink = True,
    )
    backends = [":" + name + "_cpu"]
    if CUDA_AVAILABLE:
        cuda_library(
            name = name + "_cuda",
            srcs = cuda_srcs,
            hdrs = headers + cuda_hdrs,
            copts = TORCH_NVCC_COPTS,
            deps = ["@libtorch//:torch_cuda"],
            alwayslink = True,
            target_compatible_with = ["@platforms//cpu:x86_64"],
        )
        backends.append(":" + name + "_cuda")
    cc_binary(
        name = "lib" + name + ".so",
        linkshared = True,
        linkopts = TORCH_OP_LIBRARY_LINKOPTS,
        visibility = visibility,
        deps = select({
            Label("@platforms//cpu:aarch64"): [":" + name + "_cpu"],
            "//conditions:default": backends,
        }),
    )

def _source_list(name, cpu_srcs, cuda_srcs, hdrs):
    """Keeps <name>_sources.txt, the source list for builds without Bazel, equal to this macro's.

    tools/gpu_check builds the library on machines that have no Bazel; it reads
    the committed list, and <name>_sources_test fails when the list goes stale.
    """
    package = native.package_name()
    lines = [
        "# Generated from torch_op_library(name = \"{}\"); do not edit.".format(name),
        "# Update: tools/bazel run //{}:{}_sources_update".format(package, name),
    ]
    lines += ["cpp " + package + "/" + f for f in cpu_srcs]
    lines += ["cu " + package + "/" + f for f in cuda_srcs]
    lines += ["hdr " + package + "/" + f for f in hdrs]
    lines += ["cpu_copt " + f for f in TORCH_CPU_KERNEL_COPTS]
    lines += ["nvcc_copt " + f for f in TORCH_NVCC_COPTS]
    lines += ["linkopt " + f for f in TORCH_OP_LIBRARY_LINKOPTS]
    write_file(
        name = name + "_sources_generated",
        out = name + "_sources.generated.txt",
        content = lines + [""],
    )
    diff_test(
        name = name + "_sources_test",
        failure_message = "{pkg}/{name}_sources.txt is stale: run tools/bazel run //{pkg}:{name}_sources_update".format(
            pkg = package,
            name = name,
        ),
        file1 = name + "_sources.txt",
        file2 = name + "_sources_generated",
    )
    py_binary(
        name = name + "_sources_update",
        srcs = [Label("//tools/torch:copy_to_workspace.py")],
        main = Label("//tools/torch:copy_to_workspace.py"),
        args = [
            "$(rootpath {}_sources_generated)".format(name),
            package + "/" + name + "_sources.txt",
        ],
        data = [name + "_sources_generated"],
    )

def torch_cc_binary(name, linkopts = [], deps = [], **kwargs):
    """A cc_binary that finds LibTorch in its runfiles under `bazel run` and `bazel test`."""
    cc_binary(name = name, linkopts = linkopts + torch_runtime_linkopts(name), deps = deps + sanitizer_deps(), **kwargs)

def torch_cc_test(name, linkopts = [], deps = [], **kwargs):
    """A cc_test that finds LibTorch in its runfiles."""
    cc_test(name = name, linkopts = linkopts + torch_runtime_linkopts(name), deps = deps + sanitizer_deps(), **kwargs)
