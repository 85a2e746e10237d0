#pragma once

// The call behind each generated AOTInductor C shim of an op library (tools/torch/c_shims.py):
// the op's kernel for one backend, below the autograd keys.
//
// A package runs its graph without autograd, so a shim goes straight to the backend kernel, as
// AOTInductor's own shims for ATen ops do (at::cpu::..., at::cuda::...). It also skips whatever
// is registered at the Autograd keys, Python formulas included, so a package loaded in a Python
// process never runs Python for these calls.
//
// A CPU shim calls the op's CPU kernel as a plain C++ function (Call, CallOutFirst), the one the
// library registers at the CPU key: at the sizes edge models run, the dispatcher's table lookup
// and its bookkeeping were a tenth of a call. A CUDA shim goes through the dispatcher
// (Redispatch), where a kernel launch dwarfs that; the CUDA kernels read the current stream,
// which the package's wrapper sets before it calls a shim.

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <optional>
#include <utility>

namespace my_ops::c_shim {

// A shim's tensor argument, as torch::aot_inductor::resolve_tensor_dispatch_flags gives it (a
// clone with the conjugate or negative bit resolved, when one is set) but borrowed from the
// caller's handle otherwise, where torch's returns a new reference: two atomic reference count
// updates per argument, a measurable part of a call on a 64-element tensor. It lives until the
// end of the shim's call expression, like the temporary it replaces.
class ResolvedTensor {
 public:
  explicit ResolvedTensor(AtenTensorHandle handle)
      : tensor_(torch::aot_inductor::tensor_handle_to_tensor_pointer(handle)) {
    if (tensor_->is_conj() || tensor_->is_neg()) {
      resolved_ = torch::aot_inductor::resolve_tensor_dispatch_flags(handle);
      tensor_ = &resolved_;
    }
  }
  ResolvedTensor(const ResolvedTensor&) = delete;
  ResolvedTensor& operator=(const ResolvedTensor&) = delete;

  // NOLINTNEXTLINE(google-explicit-constructor): stands in for the at::Tensor torch's returns.
  operator const at::Tensor&() const { return *tensor_; }

 private:
  const at::Tensor* tensor_;
  at::Tensor resolved_;
};

// The generated shims call these by torchgen's names.
inline ResolvedTensor resolve_tensor_dispatch_flags(AtenTensorHandle handle) {
  return ResolvedTensor(handle);
}
inline std::optional<at::Tensor> resolve_tensor_dispatch_flags(const AtenTensorHandle* handle) {
  return torch::aot_inductor::resolve_tensor_dispatch_flags(handle);
}

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

// The call behind the shim of an out= op, whose AOTInductor shim passes `out` first (as
// at::<op>_out takes it) where the schema, and so the dispatcher, has it last.
template <c10::DispatchKey kBackend, class Signature>
class RedispatchOutFirst : public Redispatch<kBackend, Signature> {
 public:
  using Redispatch<kBackend, Signature>::Redispatch;

  template <class Out, class... Rest>
  decltype(auto) operator()(Out&& out, Rest&&... rest) const {
    return Redispatch<kBackend, Signature>::operator()(std::forward<Rest>(rest)...,
                                                       std::forward<Out>(out));
  }
};

// The call behind the CPU shim of an op whose kernel is kKernel, with the dispatcher's signature.
template <auto kKernel>
struct Call {
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return kKernel(std::forward<Args>(args)...);
  }
};

// Call for an out= op: the shim passes `out` first, the kernel, like the schema, takes it last.
template <auto kKernel>
struct CallOutFirst {
  template <class Out, class... Rest>
  decltype(auto) operator()(Out&& out, Rest&&... rest) const {
    return kKernel(std::forward<Rest>(rest)..., std::forward<Out>(out));
  }
};

}  // namespace my_ops::c_shim
