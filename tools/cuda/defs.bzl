"""Public API of the CUDA rules: a small subset of rules_cuda's.

Load from here only; everything under private/ may change.
"""

load("@local_cuda//:defs.bzl", _CUDA_AVAILABLE = "CUDA_AVAILABLE", _CUDA_DEVICE_FOUND = "CUDA_DEVICE_FOUND")
load("//tools/cuda/private:cuda_library.bzl", _cuda_library = "cuda_library")
load("//tools/cuda/private:providers.bzl", _CudaArchsInfo = "CudaArchsInfo", _CudaToolkitInfo = "CudaToolkitInfo")

CUDA_AVAILABLE = _CUDA_AVAILABLE
CUDA_DEVICE_FOUND = _CUDA_DEVICE_FOUND
CudaArchsInfo = _CudaArchsInfo
CudaToolkitInfo = _CudaToolkitInfo

def requires_cuda():
    """target_compatible_with for targets that need a CUDA toolkit at build time."""
    return [] if _CUDA_AVAILABLE else ["@platforms//:incompatible"]

def requires_cuda_device():
    """target_compatible_with for tests that run CUDA kernels: they need a toolkit and a GPU.

    Without a GPU such a test can only fail (or, worse, pass without running
    its kernels), so it is incompatible instead and `bazel test //...` reports
    it as SKIPPED. Whether there is a GPU is --//tools/cuda:cuda_device, which
    defaults to what @local_cuda found on this machine.
    """
    return requires_cuda() + select({
        Label("//tools/cuda:has_cuda_device"): [],
        "//conditions:default": ["@platforms//:incompatible"],
    })

def cuda_library(name, target_compatible_with = [], **kwargs):
    """Compiles .cu files with nvcc; incompatible (so skipped) when no toolkit was found.

    Args:
      name: the target name.
      target_compatible_with: extra constraints, added to the toolkit's.
      **kwargs: srcs, hdrs, deps, copts, defines, local_defines, alwayslink, visibility, ...
    """
    _cuda_library(
        name = name,
        target_compatible_with = target_compatible_with + requires_cuda(),
        **kwargs
    )
