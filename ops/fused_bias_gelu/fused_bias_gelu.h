#pragma once

#include <ATen/core/TensorBase.h>
#include <c10/util/string_view.h>

#include "ops/common/checks.h"

namespace my_ops {

enum class GeluApproximation { kNone, kTanh };

// Validates every argument and parses `approximate`, so backends receive a checked enum.
inline GeluApproximation check_fused_bias_gelu_args(const at::TensorBase& x,
                                                    const at::TensorBase& bias,
                                                    c10::string_view approximate) {
  constexpr c10::string_view kOp = "fused_bias_gelu";
  check_primary_input(kOp, "x", x);
  check_last_dim_vector(kOp, "bias", bias, "x", x);
  if (approximate == "none") {
    return GeluApproximation::kNone;
  }
  TORCH_CHECK(approximate == "tanh", kOp,
              ": expected approximate to be \"none\" or \"tanh\", got \"", approximate, "\"");
  return GeluApproximation::kTanh;
}

// The CUDA kernels (cuda.cu), registered in ops/registration.cpp.
at::TensorBase fused_bias_gelu_cuda(const at::TensorBase& x, const at::TensorBase& bias,
                                    c10::string_view approximate);

}  // namespace my_ops
