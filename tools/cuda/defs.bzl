"""CUDA test support: skip tests that run kernels where there is no GPU.

The CUDA rules themselves are @rules_cuda's (load @rules_cuda//cuda:defs.bzl);
this file adds what rules_cuda has no notion of: whether the machine has a GPU.
"""

load("@rules_cuda//cuda:defs.bzl", "requires_cuda")

def requires_cuda_device():
    """target_compatible_with for tests that run CUDA kernels: they need CUDA and a GPU.

    Without a GPU such a test can only fail (or, worse, pass without running
    its kernels), so it is incompatible instead and `bazel test //...` reports
    it as SKIPPED. Whether there is a GPU is --//tools/cuda:cuda_device, which
    defaults to what @local_gpu found on this machine.
    """
    return requires_cuda() + select({
        Label("//tools/cuda:has_cuda_device"): [],
        "//conditions:default": ["@platforms//:incompatible"],
    })
