"""Public API of the CUDA rules: a small subset of rules_cuda's.

Load from here only; everything under private/ may change.
"""

load("@local_cuda//:defs.bzl", _CUDA_AVAILABLE = "CUDA_AVAILABLE")
load("//tools/cuda/private:cuda_library.bzl", _cuda_library = "cuda_library")
load("//tools/cuda/private:providers.bzl", _CudaArchsInfo = "CudaArchsInfo", _CudaToolkitInfo = "CudaToolkitInfo")

CUDA_AVAILABLE = _CUDA_AVAILABLE
CudaArchsInfo = _CudaArchsInfo
CudaToolkitInfo = _CudaToolkitInfo

def requires_cuda():
    """target_compatible_with for targets that need a CUDA toolkit at build time."""
    return [] if _CUDA_AVAILABLE else ["@platforms//:incompatible"]

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
