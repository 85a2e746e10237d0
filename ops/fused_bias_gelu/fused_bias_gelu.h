#pragma once

#include "ops/common/checks.h"

namespace my_ops {

enum class GeluApproximation { kNone, kTanh };

// Validates every argument and parses `approximate`, so backends receive a checked enum.
inline GeluApproximation check_fused_bias_gelu_args(TensorRef x, TensorRef bias,
                                                    std::string_view approximate) {
  constexpr std::string_view kOp = "fused_bias_gelu";
  check_primary_input(kOp, "x", x);
  check_last_dim_vector(kOp, "bias", bias, "x", x);
  if (approximate == "none") {
    return GeluApproximation::kNone;
  }
  MY_OPS_CHECK(approximate == "tanh", kOp,
               ": expected approximate to be \"none\" or \"tanh\", got \"", approximate, "\"");
  return GeluApproximation::kTanh;
}

}  // namespace my_ops
