#pragma once

// Loading the op libraries and the package, and one run of it.

#include <ATen/Tensor.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <memory>
#include <string>
#include <vector>

#include "deploy/runtime/src/verified_copy.h"

namespace my_ops::deploy::detail {

// dlopen()s each verified copy through its descriptor, into the global scope, unless this
// process has one with its sha256 already (another model's) or maps the file it was copied from.
// The package resolves custom ops and classes through the global registry the libraries' static
// initialisers fill in, and its C shims through the global symbol scope, so this comes first.
// Fails with kOpsLibrary.
void load_op_libraries(const std::vector<VerifiedCopy>& libraries);

// LibTorch's CUDA backend, which registers AOTI's CUDA model runner. The loader links only
// libtorch_cpu, so that CPU hosts need no CUDA libraries; a CUDA package loads this first.
// Fails with kOther, saying what the host lacks.
void load_cuda_backend();

// Loads the package's verified copy with `runners` model instances (so that many runs at once),
// on CUDA device `device_index` for a CUDA package (-1: the current one), extracting it into the
// private folder that holds the copy. Fails with kOpsLibrary when the package needs an op or class
// no library provides, else with kPackageCorrupt.
std::unique_ptr<torch::inductor::AOTIModelPackageLoader> load_package(const VerifiedCopy& package,
                                                                      long runners,
                                                                      int device_index = -1);

// One run, with LibTorch's failures as kInputMismatch (AOTI's own input checks) or kOther.
std::vector<at::Tensor> run_once(torch::inductor::AOTIModelPackageLoader& loader,
                                 const std::vector<at::Tensor>& inputs);

}  // namespace my_ops::deploy::detail
