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
#include <torch/csrc/stable/stableivalue_conversions.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

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

// What the generated boxed entries (the kernels registered at each device's key) are written
// with. torch calls an entry with one StableIValue per argument, a new tensor handle for each
// tensor, which the entry owns, and reads the results back from the front of the same stack
// (StableLibrary::impl's convention). TORCH_BOX would wrap each handle in a torch::stable::Tensor
// (a shared_ptr control block per argument) and hand each result back through a second new
// handle: 490 of the 5,800 instructions of an eager rms_norm call at 4 x 64 (valgrind), where a
// call costs more than its work. These entries pass the handles on as they come.
namespace my_ops::boxed {

[[noreturn]] __attribute__((noinline, cold)) inline void fail_arity(
    const char* op, uint64_t num_args, uint64_t args, uint64_t num_outputs, uint64_t outputs) {
  throw std::runtime_error(std::string(op) + ": the boxed entry takes " + std::to_string(args) +
                           " arguments and " + std::to_string(outputs) +
                           " results, the dispatcher passed " + std::to_string(num_args) + " and " +
                           std::to_string(num_outputs));
}

// The generator writes each entry from the schema it registers, so a mismatch is a bug here; the
// message is built out of line, off every call's path.
inline void check_arity(const char* op, uint64_t num_args, uint64_t args, uint64_t num_outputs,
                        uint64_t outputs) {
  if (__builtin_expect(num_args != args || num_outputs != outputs, 0)) {
    fail_arity(op, num_args, args, num_outputs, outputs);
  }
}

// A tensor argument: the handle the caller made for this call, now the entry's to delete.
inline OwnedTensor tensor(StableIValue boxed) {
  return OwnedTensor(torch::stable::detail::to<AtenTensorHandle>(boxed));
}

// An optional tensor argument (Tensor?): None is an OwnedTensor without a handle.
inline OwnedTensor optional_tensor(StableIValue boxed) {
  return OwnedTensor(
      torch::stable::detail::to<std::optional<AtenTensorHandle>>(boxed).value_or(nullptr));
}

// A non-tensor argument (double, bool, int64_t, std::string).
template <class T>
T value(StableIValue boxed) {
  return torch::stable::detail::to<T>(boxed);
}

// A result, its handle handed to the caller.
inline StableIValue result(OwnedTensor tensor) {
  return torch::stable::detail::from(tensor.release());
}

}  // namespace my_ops::boxed
