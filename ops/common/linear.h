#pragma once

// What the linear layers' ops (ops/quantized_linear, ops/packed_linear) share: their sizes and the
// check of their optional bias.

#include <cstdint>
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

}  // namespace my_ops
