#pragma once

// What the linear layers' ops (ops/quantized_linear, ops/packed_linear) share: their sizes and the
// check of their optional bias.

#include <torch/csrc/stable/ops.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "ops/common/checks.h"

namespace my_ops {

struct LinearShape {
  int64_t rows;          // M: x's elements / K
  int64_t in_features;   // K
  int64_t out_features;  // N
};

namespace detail {

__attribute__((noinline, cold)) inline void fail_linear_bias(std::string_view op, TensorRef bias,
                                                             TensorRef x, int64_t out_features) {
  fail_same_device_and_dtype(op, "bias", bias, "x", x);
  MY_OPS_CHECK(false, op, ": expected bias to have shape [", out_features,
               "] (weight's out_features), got ", Shape{bias.sizes()});
}

}  // namespace detail

// An optional bias: undefined, or [out_features] with x's dtype and device.
inline void check_linear_bias(std::string_view op, TensorRef bias, TensorRef x,
                              int64_t out_features) {
  if (bias.get() != nullptr &&
      !__builtin_expect(
          detail::same_device_and_dtype(bias, x) && bias.dim() == 1 && bias.size(0) == out_features,
          1)) {
    detail::fail_linear_bias(op, bias, x, out_features);
  }
}

// The rows of x [..., K]: every dim but the last.
inline LinearShape linear_shape(TensorRef x, int64_t out_features) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < x.sizes().size(); ++d) rows *= x.sizes()[d];
  return {rows, x.size(-1), out_features};
}

// The frame of a linear op whose math is float32, its arguments checked: the result [..., N] of
// x's dtype, where `compute(x, bias, out)` writes the float32 result from x as contiguous float32
// and the bias likewise (null when there is none). A float32 result is written in place; another
// dtype through a float32 one, converted once. An empty result computes nothing. On a GPU the
// caller makes x's device current first.
template <class Compute>
OwnedTensor float32_linear(TensorRef x, TensorRef bias, int64_t out_features,
                           const Compute& compute) {
  Sizes sizes(x.sizes());
  sizes.back() = out_features;
  OwnedTensor out = empty_like_with_sizes(x, sizes);
  if (out.ref().numel() == 0) return out;
  const ContiguousAs x_float(x, ScalarType::Float);
  std::optional<ContiguousAs> bias_float;
  if (bias.get() != nullptr) bias_float.emplace(bias, ScalarType::Float);
  std::optional<OwnedTensor> out_float;
  if (x.scalar_type() != ScalarType::Float)
    out_float.emplace(empty_like_with_sizes(x_float, sizes));
  compute(x_float.ref().data_as<float>(), bias_float ? bias_float->ref().data_as<float>() : nullptr,
          (out_float ? out_float->ref() : out.ref()).mutable_data_as<float>());
  if (out_float) {
    torch::stable::Tensor dst = out.ref().to_stable();
    torch::stable::copy_(dst, out_float->ref().to_stable());
  }
  return out;
}

}  // namespace my_ops
