#include "ops/cxx/rms_norm_class.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <tuple>
#include <utility>

namespace my_ops {
namespace {

// Going through the dispatcher (rather than calling a backend function) picks the CPU or CUDA
// kernel from the input's device and keeps the call visible to tracing and export.
at::Tensor call_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("my_ops::rms_norm", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}

std::tuple<at::Tensor, at::Tensor> call_fused_add_rms_norm(const at::Tensor& x,
                                                           const at::Tensor& residual,
                                                           const at::Tensor& weight, double eps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("my_ops::fused_add_rms_norm", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                    const at::Tensor&, double)>();
  return op.call(x, residual, weight, eps);
}

}  // namespace

RMSNorm::RMSNorm(at::Tensor weight, double eps) : weight_(std::move(weight)), eps_(eps) {
  constexpr c10::string_view kOp = "RMSNorm";
  TORCH_CHECK(weight_.defined(), kOp, ": expected weight to be a defined tensor");
  const at::ScalarType dtype = weight_.scalar_type();
  TORCH_CHECK(
      dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16,
      kOp,
      ": expected weight to have a floating dtype (float32, float64, float16 or bfloat16), "
      "got ",
      dtype);
  TORCH_CHECK(weight_.dim() == 1, kOp, ": expected weight to be 1-D, got ", weight_.dim(),
              "-D with shape ", weight_.sizes());
  // Phrased as `eps >= 0` so that NaN is rejected too.
  TORCH_CHECK(eps_ >= 0.0, kOp, ": expected eps to be >= 0, got ", eps_);
}

at::Tensor RMSNorm::forward(const at::Tensor& x) const {
  // The residual-free kernel: no zero residual to allocate, fill, read and add.
  return call_rms_norm(x, weight_, eps_);
}

std::tuple<at::Tensor, at::Tensor> RMSNorm::forward_residual(const at::Tensor& x,
                                                             const at::Tensor& residual) const {
  return call_fused_add_rms_norm(x, residual, weight_, eps_);
}

c10::intrusive_ptr<RMSNorm> RMSNorm::from_state(State state) {
  return c10::make_intrusive<RMSNorm>(std::move(std::get<0>(state)), std::get<1>(state));
}

RMSNorm::Flattened RMSNorm::flatten() const { return {{"weight", weight_}, {"eps", eps_}}; }

}  // namespace my_ops

// The class's methods have no C shims: a package calls them through AOTInductor's ProxyExecutor
// (call_torchbind), which aot_inductor.custom_ops_to_c_shims does not cover.
TORCH_LIBRARY_FRAGMENT(my_ops, m) {
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
