"""Core rules for building CUDA code: the part of rules_cuda's public API this module implements.

Load from here only; everything under private/ may change.
"""

load("//cuda/private:defs.bzl", _requires_cuda = "requires_cuda")
load("//cuda/private:providers.bzl", _CudaArchsInfo = "CudaArchsInfo", _CudaInfo = "CudaInfo", _cuda_archs = "cuda_archs")
load("//cuda/private:rules/cuda_library.bzl", _cuda_library = "cuda_library", _cuda_objects = "cuda_objects")

cuda_archs = _cuda_archs
CudaArchsInfo = _CudaArchsInfo
CudaInfo = _CudaInfo

# rules
cuda_objects = _cuda_objects
cuda_library = _cuda_library

requires_cuda = _requires_cuda
