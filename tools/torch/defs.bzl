"""Macros for PyTorch C++ code: op libraries, and binaries that run against LibTorch."""

load("@libtorch//:defs.bzl", "torch_runtime_linkopts")
load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")
load("@rules_cuda//cuda:defs.bzl", "cuda_library", "requires_cuda")
load("//tools/cc:sanitizers.bzl", "sanitizer_deps")
load(":kernel_flags.bzl", "TORCH_CPU_KERNEL_COPTS", "TORCH_CPU_KERNEL_COPTS_AARCH64", "TORCH_NVCC_COPTS", "TORCH_OP_LIBRARY_CUDA_COPTS", "TORCH_OP_LIBRARY_LINKOPTS", "TORCH_STABLE_COPTS")

# The files an op library compiles or includes: *.cpp, *.cu, *.h and *.cuh in
# every folder of its package (a list of op folders to keep in step with the
# folders would add nothing). tools/gpu_check finds them with the same
# patterns; its test compares the two lists.
# The op package's tests/ folder holds its tests, never library code.
def _glob(pattern, exclude = []):
    return native.glob(
        ["*/" + pattern],
        exclude = ["*/" + p for p in exclude] + ["tests/" + pattern],
        allow_empty = True,
    )

# The kernels' vectorised math on raw pointers (cpu_vec.cpp, each op's config
# of its variants, and cpu_<tier>.cpp, one file per instruction-set tier),
# compiled with ATen's header-only at::vec (the rest of the library sees only
# the stable ABI).
_VEC_SRC = "cpu_*.cpp"

def torch_op_library(name, registration = "registration.cpp", visibility = None):
    """Builds lib<name>.so, a PyTorch op library on LibTorch's stable ABI.

    The library runs under every torch release from TORCH_STABLE_TARGET on
    (kernel_flags.bzl): its code sees only the stable headers, except the
    kernels' vectorised math, which calls nothing of LibTorch.

    Each op folder holds cpu.cpp (the CPU kernels, <namespace>::cpu::<op>),
    cpu_vec.cpp (their math on raw pointers, with at::vec; the variants of
    each instruction-set tier in cpu_<tier>.cpp beside it), cuda.cu (the CUDA
    kernels, <namespace>::cuda::<op>) and headers (*.h, *.cuh); the folder of
    shared helpers (common/) is one more. `registration` holds the one
    STABLE_TORCH_LIBRARY block with every schema. Adding an op means adding
    its folder and its schema line, nothing here: the kernels' registrations
    and AOTInductor C shims (for CPU, and for CUDA where that part is linked
    in) are generated from the schema lines by //tools/torch:c_shims into
    <name>_c_shims.cpp, and a kernel whose arguments do not match its schema
    is an undefined symbol when the library links.

    Targets: lib<name>.so (the shared library), <name>_cpu, <name>_cpu_vec,
    <name>_cuda; <name>_srcs, every file they compile or include.
    <name>_cuda is incompatible (skipped) without a CUDA toolkit, with
    --@rules_cuda//cuda:enable=false, and for linux-aarch64 (--config=aarch64
    or a transition), where the CUDA part would need the aarch64 (sbsa) CUDA
    toolkit; the library then holds the CPU kernels only.

    Args:
      name: library name; the shared library is lib<name>.so.
      registration: the source file with STABLE_TORCH_LIBRARY.
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
    cpu_srcs = [registration] + _glob("*.cpp", exclude = [_VEC_SRC])
    vec_srcs = _glob(_VEC_SRC)
    cuda_srcs = _glob("*.cu")
    headers = _glob("*.h")
    cuda_hdrs = _glob("*.cuh")
    native.filegroup(
        name = name + "_srcs",
        srcs = cpu_srcs + vec_srcs + [name + "_c_shims.cpp"] + cuda_srcs + headers + cuda_hdrs,
        visibility = ["//tools/gpu_check:__pkg__"],
    )
    cc_library(
        name = name + "_cpu_vec",
        srcs = vec_srcs,
        hdrs = headers,
        copts = select({
            Label("@platforms//cpu:aarch64"): TORCH_CPU_KERNEL_COPTS_AARCH64,
            "//conditions:default": TORCH_CPU_KERNEL_COPTS,
        }),
        deps = ["//third_party/libtorch:torch_cpu"],
    )
    cc_library(
        name = name + "_cpu",
        srcs = cpu_srcs + [name + "_c_shims.cpp"],
        hdrs = headers,
        copts = TORCH_STABLE_COPTS + select({
            # The generated file registers the CUDA kernels where they are linked in.
            Label("//tools/torch:cuda_kernels"): TORCH_OP_LIBRARY_CUDA_COPTS,
            "//conditions:default": [],
        }),
        deps = [
            ":" + name + "_cpu_vec",
            "//tools/torch:c_shim_call",
        ],
        alwayslink = True,
    )
    cuda_library(
        name = name + "_cuda",
        srcs = cuda_srcs,
        hdrs = headers + cuda_hdrs,
        copts = TORCH_NVCC_COPTS,
        # LibTorch's stable C functions (libtorch_cpu) and cudart, statically:
        # nothing of LibTorch's CUDA libraries, so that the library also loads
        # under a CPU-only torch.
        deps = [
            "//tools/torch:c_shim_call",
            "@libtorch//:cudart_static",
        ],
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
