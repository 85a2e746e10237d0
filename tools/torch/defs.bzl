"""Macros for PyTorch C++ code: op libraries, and binaries that run against LibTorch."""

load("@libtorch//:defs.bzl", "torch_runtime_linkopts")
load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")
load("@rules_cuda//cuda:defs.bzl", "cuda_library", "requires_cuda")
load("//tools/cc:sanitizers.bzl", "sanitizer_deps")
load(":kernel_flags.bzl", "TORCH_CPU_KERNEL_COPTS", "TORCH_CPU_KERNEL_COPTS_AARCH64", "TORCH_NVCC_COPTS", "TORCH_OP_LIBRARY_CUDA_COPTS", "TORCH_OP_LIBRARY_LINKOPTS")

# The files an op library compiles or includes: *.cpp, *.cu, *.h and *.cuh in
# every folder of its package (a list of op folders to keep in step with the
# folders would add nothing). tools/gpu_check finds them with the same
# patterns; its test compares the two lists.
def _glob(pattern):
    return native.glob(["*/" + pattern], allow_empty = True)

def torch_op_library(name, registration = "registration.cpp", visibility = None):
    """Builds lib<name>.so, a PyTorch op library, from every folder of the package.

    Each op folder holds *.cpp (CPU kernels, with their TORCH_LIBRARY_IMPL),
    *.cu (CUDA kernels, on at::TensorBase), and headers (*.h, *.cuh); the
    folder of shared helpers (common/) is one more. `registration` holds the
    one TORCH_LIBRARY block with every schema, and registers the CUDA kernels
    when TORCH_OP_LIBRARY_CUDA is defined (where the CUDA part is linked in).
    Adding an op means adding its folder (its CPU kernel named
    <namespace>::cpu::<op>, which the C shims call), its schema line and its
    CUDA registration line, nothing here. The op's AOTInductor C shims (for CPU,
    and for CUDA where that part is linked in) are generated from its schema
    line by //tools/torch:c_shims into <name>_c_shims.cpp.

    Targets: lib<name>.so (the shared library), <name>_cpu, <name>_cuda;
    <name>_srcs, every file they compile or include. <name>_cuda is
    incompatible (skipped) without a CUDA toolkit, with
    --@rules_cuda//cuda:enable=false, and for linux-aarch64 (--config=aarch64
    or a transition), where the CUDA part would need the aarch64 (sbsa) CUDA
    toolkit; the library then holds the CPU kernels only.

    Args:
      name: library name; the shared library is lib<name>.so.
      registration: the source file with TORCH_LIBRARY.
      visibility: visibility of the shared library.
    """

    # Every op's AOTInductor C shims, generated from the schemas in `registration`.
    native.genrule(
        name = name + "_c_shims",
        srcs = [registration],
        outs = [name + "_c_shims.cpp"],
        cmd = "$(execpath //tools/torch:c_shims) $< $@",
        tools = ["//tools/torch:c_shims"],
        visibility = visibility,
    )
    cpu_srcs = [registration] + _glob("*.cpp")
    cuda_srcs = _glob("*.cu")
    headers = _glob("*.h")
    cuda_hdrs = _glob("*.cuh")
    native.filegroup(
        name = name + "_srcs",
        srcs = cpu_srcs + [name + "_c_shims.cpp"] + cuda_srcs + headers + cuda_hdrs,
        visibility = ["//tools/gpu_check:__pkg__"],
    )
    cc_library(
        name = name + "_cpu",
        srcs = cpu_srcs + [name + "_c_shims.cpp"],
        hdrs = headers,
        copts = select({
            Label("@platforms//cpu:aarch64"): TORCH_CPU_KERNEL_COPTS_AARCH64,
            "//conditions:default": TORCH_CPU_KERNEL_COPTS,
        }) + select({
            # `registration` registers the CUDA kernels where they are linked in.
            Label("//tools/torch:cuda_kernels"): TORCH_OP_LIBRARY_CUDA_COPTS,
            "//conditions:default": [],
        }),
        deps = [
            "//third_party/libtorch:torch_cpu",
            "//tools/torch:c_shim_call",
        ],
        alwayslink = True,
    )
    cuda_library(
        name = name + "_cuda",
        srcs = cuda_srcs,
        hdrs = headers + cuda_hdrs,
        copts = TORCH_NVCC_COPTS,
        deps = ["@libtorch//:torch_cuda"],
        alwayslink = True,
        target_compatible_with = ["@platforms//cpu:x86_64"] + requires_cuda(),
    )
    cc_binary(
        name = "lib" + name + ".so",
        linkshared = True,
        linkopts = TORCH_OP_LIBRARY_LINKOPTS,
        visibility = visibility,
        # The same conditions as <name>_cuda's target_compatible_with.
        deps = [":" + name + "_cpu"] + select({
            Label("//tools/torch:cuda_kernels"): [":" + name + "_cuda"],
            "//conditions:default": [],
        }),
    )

def torch_cc_binary(name, linkopts = [], deps = [], **kwargs):
    """A cc_binary that finds LibTorch in its runfiles under `bazel run` and `bazel test`."""
    cc_binary(name = name, linkopts = linkopts + torch_runtime_linkopts(name), deps = deps + sanitizer_deps(), **kwargs)

def torch_cc_test(name, linkopts = [], deps = [], **kwargs):
    """A cc_test that finds LibTorch in its runfiles."""
    cc_test(name = name, linkopts = linkopts + torch_runtime_linkopts(name), deps = deps + sanitizer_deps(), **kwargs)
