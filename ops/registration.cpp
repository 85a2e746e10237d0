// The single TORCH_LIBRARY block of the my_ops library: every op schema and the custom class are
// declared here, and the CUDA kernels and the autograd entry registered. Each op folder registers
// its CPU kernels itself (cpu.cpp, TORCH_LIBRARY_IMPL), as my_ops::cpu::<op> with the op's
// dispatcher signature: the op's CPU C shim calls that function directly.

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <cstring>
#include <string>
#include <tuple>

#include "ops/rms_norm_class/rms_norm_class.h"

#ifdef TORCH_OP_LIBRARY_CUDA
#include "ops/fused_bias_gelu/fused_bias_gelu.h"
#include "ops/identity_conv/identity_conv.h"
#include "ops/rms_norm/rms_norm.h"
#include "ops/rotary_embedding/rotary_embedding.h"
#include "ops/silu_and_mul/silu_and_mul.h"
#endif

namespace {

// One schema per line so that each stays greppable as a whole. The AOTInductor C shims of every
// op (aoti_torch_cpu_<op>, aoti_torch_cuda_<op>) are generated from this array at build time
// (tools/torch/c_shims.py), which reads it as plain string literals: keep it so.
//
// <op>_out is the out= companion of <op>: the same arguments and a caller's `out`, which it
// fills and returns. An exporter lowers each call of <op> in a package to its companion
// (deploy/exporter/c_shims.py), so that Inductor allocates the output and reuses the buffer from
// call to call, as it does for its own kernels, instead of the op allocating a fresh one each
// time. The companion is a separate op rather than an ".out" overload because AOTInductor names
// a C shim after the op alone: an overload would share <op>'s shim name. Companions have CPU
// kernels; the exporter leaves a call on a device without one as it is.
// clang-format off
constexpr const char* kOpSchemas[] = {
    "identity_conv_op(Tensor x) -> Tensor",
    "fused_bias_gelu(Tensor x, Tensor bias, str approximate=\"none\") -> Tensor",
    "fused_bias_gelu_out(Tensor x, Tensor bias, str approximate=\"none\", *, Tensor(a!) out) -> Tensor(a!)",
    "rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor",
    "rms_norm_out(Tensor x, Tensor weight, float eps=1e-6, *, Tensor(a!) out) -> Tensor(a!)",
    "fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps=1e-6) -> (Tensor, Tensor)",
    "silu_and_mul(Tensor x) -> Tensor",
    "silu_and_mul_out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
    "rotary_embedding(Tensor x, Tensor cos, Tensor sin, bool interleaved=False) -> Tensor",
    "rotary_embedding_out(Tensor x, Tensor cos, Tensor sin, bool interleaved=False, *, Tensor(a!) out) -> Tensor(a!)",
};
// clang-format on

bool needs_gradient(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  if (!c10::GradMode::is_enabled()) return false;
  for (const c10::IValue& arg : torch::jit::last(stack, op.schema().arguments().size())) {
    if (arg.isTensor() && arg.toTensor().requires_grad()) return true;
  }
  return false;
}

// Every op's entry at the CPU and CUDA autograd keys. The autograd formulas are Python's
// (my_ops/ops/<op>.py, torch.library.register_autograd), which registers them at the Autograd
// alias key; on their own they run on every call, even one whose inputs need no gradient, and a
// call from an AOTInductor package or from compiled code then costs a trip through Python.
// Kernels at AutogradCPU and AutogradCUDA take precedence over the alias for those devices: this
// one goes straight below autograd when no gradient is needed (no grad mode, or no input that
// requires one), as PyTorch's generated autograd kernels do, and otherwise hands the call to the
// formula, by redispatching to AutogradOther, a key the alias kernel fills too. Without a Python
// formula registered, AutogradOther falls back to PyTorch's autograd fallback, as before.
void autograd_entry(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                    torch::jit::Stack* stack) {
  const c10::DispatchKeySet below_autograd = keys & c10::after_autograd_keyset;
  if (!needs_gradient(op, *stack)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatchBoxed(below_autograd, stack);
    return;
  }
  op.redispatchBoxed(below_autograd | c10::DispatchKeySet(c10::DispatchKey::AutogradOther), stack);
}

}  // namespace

TORCH_LIBRARY(my_ops, m) {
  m.set_python_module("my_ops");  // First, so that errors on a missing fake say "import my_ops".
  for (const char* schema : kOpSchemas) {
    m.def(schema);
    const std::string name(schema, std::strchr(schema, '('));
    for (c10::DispatchKey key : {c10::DispatchKey::AutogradCPU, c10::DispatchKey::AutogradCUDA}) {
      m.impl(name.c_str(),
             torch::dispatch(key, torch::CppFunction::makeFromBoxedFunction<&autograd_entry>()));
    }
  }

  // The class's methods have no C shims: a package calls them through AOTInductor's
  // ProxyExecutor (call_torchbind), which aot_inductor.custom_ops_to_c_shims does not cover.
  using my_ops::RMSNorm;
  m.class_<RMSNorm>("RMSNorm")
      // Named arguments, so a wrong argument is reported by its name.
      .def(torch::init<at::Tensor, double>(), "", {torch::arg("weight"), torch::arg("eps")})
      .def("forward", &RMSNorm::forward, "", {torch::arg("x")})
      .def("forward_residual", &RMSNorm::forward_residual, "",
           {torch::arg("x"), torch::arg("residual")})
      .def("weight", [](const c10::intrusive_ptr<RMSNorm>& self) { return self->weight(); })
      .def("eps", &RMSNorm::eps)
      .def("__obj_flatten__", &RMSNorm::flatten)
      .def_pickle([](const c10::intrusive_ptr<RMSNorm>& self) { return self->get_state(); },
                  [](RMSNorm::State state) { return RMSNorm::from_state(std::move(state)); });
}

#ifdef TORCH_OP_LIBRARY_CUDA
namespace {

// The CUDA kernels take and return at::TensorBase, so nvcc never parses at::Tensor, whose header
// is most of a .cu file's compile time (PyTorch's own CUDA kernels do the same). TensorEntry adapts
// such a kernel to the at::Tensor signature its schema is registered with: at::Tensor for each
// at::TensorBase, every other argument as it is.
template <class T>
struct WithTensor {
  using type = T;
};
template <>
struct WithTensor<const at::TensorBase&> {
  using type = const at::Tensor&;
};
template <>
struct WithTensor<at::TensorBase> {
  using type = at::Tensor;
};
template <class... Ts>
struct WithTensor<std::tuple<Ts...>> {
  using type = std::tuple<typename WithTensor<Ts>::type...>;
};

template <auto kKernel>
struct TensorEntry;
template <class R, class... Args, R (*kKernel)(Args...)>
struct TensorEntry<kKernel> {
  static typename WithTensor<R>::type call(typename WithTensor<Args>::type... args) {
    return typename WithTensor<R>::type(kKernel(args...));
  }
};

}  // namespace

// Built with the library's CUDA part only (torch_op_library defines TORCH_OP_LIBRARY_CUDA then).
TORCH_LIBRARY_IMPL(my_ops, CUDA, m) {
  m.impl("identity_conv_op", &TensorEntry<&my_ops::identity_conv_cuda>::call);
  m.impl("fused_bias_gelu", &TensorEntry<&my_ops::fused_bias_gelu_cuda>::call);
  m.impl("rms_norm", &TensorEntry<&my_ops::rms_norm_cuda>::call);
  m.impl("fused_add_rms_norm", &TensorEntry<&my_ops::fused_add_rms_norm_cuda>::call);
  m.impl("silu_and_mul", &TensorEntry<&my_ops::silu_and_mul_cuda>::call);
  m.impl("rotary_embedding", &TensorEntry<&my_ops::rotary_embedding_cuda>::call);
}
#endif
