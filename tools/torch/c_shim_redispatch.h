#pragma once

// The call behind each generated AOTInductor C shim of an op library (tools/torch/c_shims.py):
// the op's kernel for one backend, reached through the dispatcher below the autograd keys.
//
// A package runs its graph without autograd, so a shim goes straight to the backend kernel, as
// AOTInductor's own shims for ATen ops do (at::cpu::..., at::cuda::...). It also skips whatever
// is registered at the Autograd keys, Python formulas included, so a package loaded in a Python
// process never runs Python for these calls. The CUDA kernels read the current stream, which the
// package's wrapper sets before it calls a shim.

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/DispatchKeySet.h>

#include <utility>

namespace my_ops::c_shim {

template <c10::DispatchKey kBackend, class Signature>
class Redispatch;

template <c10::DispatchKey kBackend, class Return, class... Args>
class Redispatch<kBackend, Return(Args...)> {
 public:
  // `name` is "ns::op". typed() checks Signature against the registered schema, so a shim
  // generated from another schema fails its first call instead of passing wrong arguments.
  explicit Redispatch(const char* name)
      : op_(c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Return(Args...)>()) {}

  template <class... Actual>
  Return operator()(Actual&&... args) const {
    return op_.redispatch(c10::DispatchKeySet(kBackend), std::forward<Actual>(args)...);
  }

 private:
  c10::TypedOperatorHandle<Return(Args...)> op_;
};

}  // namespace my_ops::c_shim
