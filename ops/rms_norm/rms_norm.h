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

// fused_add_rms_norm_ writes x and residual: besides fused_add_rms_norm's checks, neither may
// repeat elements (an expanded tensor) and no two of x, residual and weight may share memory.
inline void check_fused_add_rms_norm_in_place_args(TensorRef x, TensorRef residual,
                                                   TensorRef weight, double eps) {
  constexpr std::string_view kOp = "fused_add_rms_norm_";
  check_primary_input(kOp, "x", x);
  check_same_shape(kOp, "residual", residual, "x", x);
  check_last_dim_vector(kOp, "weight", weight, "x", x);
  check_non_negative(kOp, "eps", eps);
  check_writable_in_place(kOp, "x", x);
  check_writable_in_place(kOp, "residual", residual);
  check_no_shared_memory(kOp, "residual", residual, "x", x);
  check_no_shared_memory(kOp, "weight", weight, "x", x);
  check_no_shared_memory(kOp, "weight", weight, "residual", residual);
}

}  // namespace my_ops
