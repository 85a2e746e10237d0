// The single TORCH_LIBRARY block of the my_ops library: every op schema and the custom class are
// declared here, while each op folder registers its CPU and CUDA kernels with TORCH_LIBRARY_IMPL.

#include <torch/custom_class.h>
#include <torch/library.h>

#include "ops/rms_norm_class/rms_norm_class.h"

TORCH_LIBRARY(my_ops, m) {
  m.set_python_module("my_ops");  // First, so that errors on a missing fake say "import my_ops".
  // One schema per line so that each stays greppable as a whole.
  // clang-format off
  m.def("identity_conv_op(Tensor x) -> Tensor");
  m.def("fused_bias_gelu(Tensor x, Tensor bias, str approximate=\"none\") -> Tensor");
  m.def("rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor");
  m.def("fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps=1e-6) -> (Tensor, Tensor)");
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.def("rotary_embedding(Tensor x, Tensor cos, Tensor sin, bool interleaved=False) -> Tensor");
  // clang-format on

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
