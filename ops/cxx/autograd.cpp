// The C++ entry of every my_ops op at the CPU and CUDA autograd keys, which the stable ABI cannot
// register (it has no dispatch keys but backends, and no way to redispatch).
//
// The autograd formulas are Python's (my_ops/ops/<op>.py, torch.library.register_autograd),
// which registers them at the Autograd alias key; on their own they run on every call, even one
// whose inputs need no gradient, and a call from compiled code then costs a trip through Python.
// Kernels at AutogradCPU and AutogradCUDA take precedence over the alias for those devices: this
// one goes straight below autograd when no gradient is needed (no grad mode, or no input that
// requires one), as PyTorch's generated autograd kernels do, and otherwise hands the call to the
// formula, by redispatching to AutogradOther, a key the alias kernel fills too. Without a Python
// formula registered, AutogradOther falls back to PyTorch's autograd fallback.
//
// The entry is registered for every op of the namespace that is defined when this library loads:
// load it after libmy_ops.so, which defines them.

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

#include <string>
#include <string_view>

namespace {

constexpr std::string_view kNamespace = "my_ops::";

bool needs_gradient(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  if (!c10::GradMode::is_enabled()) return false;
  for (const c10::IValue& arg : torch::jit::last(stack, op.schema().arguments().size())) {
    if (arg.isTensor() && arg.toTensor().requires_grad()) return true;
  }
  return false;
}

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

// Registers the entry, at the key of m's block, for every op of the namespace; returns how many.
int register_autograd_entries(torch::Library& m) {
  int registered = 0;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (std::string_view(name.name).substr(0, kNamespace.size()) != kNamespace) continue;
    const std::string op = name.name.substr(kNamespace.size());
    m.impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<&autograd_entry>());
    ++registered;
  }
  return registered;
}

}  // namespace

TORCH_LIBRARY_IMPL(my_ops, AutogradCPU, m) {
  TORCH_CHECK(register_autograd_entries(m) > 0,
              "my_ops companion: no my_ops op is defined; load libmy_ops.so before it");
}

TORCH_LIBRARY_IMPL(my_ops, AutogradCUDA, m) { register_autograd_entries(m); }
