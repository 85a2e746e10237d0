#pragma once

// What every generated AOTInductor C shim of an op library (tools/torch/c_shims.py) runs its
// kernel with.
//
// A package runs its graph without autograd, so a shim calls the op's kernel for one backend as a
// plain C++ function, as AOTInductor's own shims for ATen ops call at::cpu::..., at::cuda::...:
// at the sizes edge models run, the dispatcher's table lookup and its bookkeeping were a tenth of
// a call. It also skips whatever is registered at the Autograd keys, Python formulas included, so
// a package loaded in a Python process never runs Python for these calls. The CUDA kernels read
// the current stream, which the package's wrapper sets before it calls a shim.

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cstdio>
#include <exception>

#include "tools/torch/stable_tensor.h"

namespace my_ops::c_shim {

// Runs `call`, and turns an exception into AOTI_TORCH_FAILURE, as a C function must: the message
// goes to stderr under the shim's name, since the stable ABI has no way to hand it to the
// package's error (AOTInductor's own shims store it in LibTorch's internals).
template <class Call>
AOTITorchError run(const char* shim, const Call& call) noexcept {
  try {
    call();
    return AOTI_TORCH_SUCCESS;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", shim, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: an unknown exception\n", shim);
  }
  return AOTI_TORCH_FAILURE;
}

}  // namespace my_ops::c_shim
