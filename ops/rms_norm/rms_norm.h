#pragma once

#include "ops/common/checks.h"

namespace my_ops {

// The RMS norm family: rms_norm and fused_add_rms_norm share one kernel per backend, with the
// residual add compiled in or out.

inline void check_rms_norm_args(TensorRef x, TensorRef weight, double eps) {
  constexpr std::string_view kOp = "rms_norm";
  check_primary_input(kOp, "x", x);
  check_last_dim_vector(kOp, "weight", weight, "x", x);
  check_non_negative(kOp, "eps", eps);
}

inline void check_fused_add_rms_norm_args(TensorRef x, TensorRef residual, TensorRef weight,
                                          double eps) {
  constexpr std::string_view kOp = "fused_add_rms_norm";
  check_primary_input(kOp, "x", x);
  check_same_shape(kOp, "residual", residual, "x", x);
  check_last_dim_vector(kOp, "weight", weight, "x", x);
  check_non_negative(kOp, "eps", eps);
}

}  // namespace my_ops
