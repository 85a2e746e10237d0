"""Compile and link flags of torch_op_library, in the one place both builds read them.

tools/gpu_check builds the op library without Bazel: it reads these lists from
tools/gpu_check/build_inputs.json, which //tools/gpu_check:generated_build_inputs writes
from this file (//tools/gpu_check:build_inputs_test keeps the committed copy current).
"""

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

# The C++ sources where the library's CUDA part is linked in (torch_op_library's
# select, gpu_check's CUDA mode): ops/registration.cpp then registers the CUDA
# kernels as well.
TORCH_OP_LIBRARY_CUDA_COPTS = [
    "-DTORCH_OP_LIBRARY_CUDA",
]

# -z defs: every symbol must resolve at link time, not at dlopen on a
# user's machine. -fopenmp: the OpenMP runtime the CPU kernels' regions need.
TORCH_OP_LIBRARY_LINKOPTS = [
    "-Wl,-z,defs",
    "-fopenmp",
]
