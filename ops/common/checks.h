#pragma once

// Argument checks shared by every op. Each helper takes the op name and the argument name so that
// a failure message points the caller at the exact argument, e.g.
//   "fused_bias_gelu: expected bias to have size 1024 (the last dim of x), got 3".
// The checks only read tensor metadata, so they are safe to run before any kernel is dispatched.
// They take at::TensorBase, which the CPU kernels' at::Tensor converts to, so that the CUDA kernels
// compile without at::Tensor (see ops/registration.cpp).

#include <ATen/core/TensorBase.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

namespace my_ops {

inline bool is_supported_floating_dtype(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf ||
         dtype == at::kBFloat16;
}

// The first tensor argument of an op: a floating tensor with at least one dimension.
inline void check_primary_input(c10::string_view op, c10::string_view name,
                                const at::TensorBase& t) {
  TORCH_CHECK(t.defined(), op, ": expected ", name, " to be a defined tensor");
  TORCH_CHECK(is_supported_floating_dtype(t.scalar_type()), op, ": expected ", name,
              " to have a floating dtype (float32, float64, float16 or bfloat16), got ",
              t.scalar_type());
  TORCH_CHECK(t.dim() >= 1, op, ": expected ", name,
              " to have at least 1 dimension, got a 0-d tensor");
}

// A secondary tensor argument must live on the same device and share the dtype of the primary one,
// because the kernels read every operand with a single scalar type and a single device pointer.
inline void check_same_device_and_dtype(c10::string_view op, c10::string_view name,
                                        const at::TensorBase& t, c10::string_view primary_name,
                                        const at::TensorBase& primary) {
  TORCH_CHECK(t.defined(), op, ": expected ", name, " to be a defined tensor");
  TORCH_CHECK(t.device() == primary.device(), op, ": expected ", name,
              " to be on the same device as ", primary_name, " (", primary.device(), "), got ",
              t.device());
  TORCH_CHECK(t.scalar_type() == primary.scalar_type(), op, ": expected ", name,
              " to have the same dtype as ", primary_name, " (", primary.scalar_type(), "), got ",
              t.scalar_type());
}

// A per-feature parameter (bias, weight) broadcast over the last dim of the primary input.
inline void check_last_dim_vector(c10::string_view op, c10::string_view name,
                                  const at::TensorBase& t, c10::string_view primary_name,
                                  const at::TensorBase& primary) {
  check_same_device_and_dtype(op, name, t, primary_name, primary);
  TORCH_CHECK(t.dim() == 1, op, ": expected ", name, " to be 1-D, got ", t.dim(), "-D with shape ",
              t.sizes());
  TORCH_CHECK(t.size(0) == primary.size(-1), op, ": expected ", name, " to have size ",
              primary.size(-1), " (the last dim of ", primary_name, "), got ", t.size(0));
}

inline void check_same_shape(c10::string_view op, c10::string_view name, const at::TensorBase& t,
                             c10::string_view primary_name, const at::TensorBase& primary) {
  check_same_device_and_dtype(op, name, t, primary_name, primary);
  TORCH_CHECK(t.sizes() == primary.sizes(), op, ": expected ", name, " to have the same shape as ",
              primary_name, " (", primary.sizes(), "), got ", t.sizes());
}

inline void check_non_negative(c10::string_view op, c10::string_view name, double value) {
  // Phrased as `value >= 0` so that NaN is rejected too.
  TORCH_CHECK(value >= 0.0, op, ": expected ", name, " to be >= 0, got ", value);
}

}  // namespace my_ops
