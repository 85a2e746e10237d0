"""Compile and link flags of torch_op_library, in the one place both builds read them.

tools/gpu_check builds the op library without Bazel: it reads these lists from
tools/gpu_check/build_inputs.json, which //tools/gpu_check:generated_build_inputs writes
from this file (//tools/gpu_check:build_inputs_test keeps the committed copy current).
"""

# The locked torch release (requirements_lock.txt): what code on LibTorch's C++
# API is built for, and so the name of an op library's companion,
# lib<name>_torch<release>.so (//python:torch_release_test keeps it in step).
TORCH_RELEASE = "2.14.1"

# The torch release an op library's stable-ABI code targets: the oldest it
# runs under (TORCH_TARGET_VERSION: major, minor, patch and tweak bytes).
TORCH_STABLE_TARGET = "2.13"
TORCH_STABLE_DEFINES = [
    "-DTORCH_TARGET_VERSION=0x020d000000000000",
    "-DTORCH_STABLE_ONLY",
]

# torch's stable headers keep their inline code in hidden namespaces; only the
# C shims (AOTI_TORCH_EXPORT) need to be seen outside the library.
TORCH_STABLE_COPTS = TORCH_STABLE_DEFINES + [
    "-fvisibility=hidden",
    "-O3",
]

# Code on LibTorch's C++ API that runs on every call (the companion's autograd
# entries and custom class, ops/cxx): optimised in every compilation mode, as
# the kernels are. Under fastbuild (-O0) the dispatcher's inline helpers it
# calls stayed calls: RMSNorm.forward took 3.5 us instead of 2.2 at 4 x 64.
TORCH_CXX_COPTS = ["-O3"]

# The kernels' vectorised math (*/cpu_vec.cpp) uses at::vec at AVX2 width, the portable x86-64-v3 level that the
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
    "-fvisibility=hidden",
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
    "-Xcompiler=-fvisibility=hidden",
] + TORCH_STABLE_DEFINES

# The C++ sources where the library's CUDA part is linked in (torch_op_library's
# select, gpu_check's CUDA mode): ops/registration.cpp then registers the CUDA
# kernels as well.
TORCH_OP_LIBRARY_CUDA_COPTS = [
    "-DTORCH_OP_LIBRARY_CUDA",
]

# -z defs: every symbol must resolve at link time, not at dlopen on a
# user's machine. The stable ABI's functions are LibTorch's: the library must
# NEED libtorch_cpu.so (no release in its name), since torch's Python module
# does not make LibTorch's symbols global.
TORCH_OP_LIBRARY_LINKOPTS = [
    "-Wl,-z,defs",
]
