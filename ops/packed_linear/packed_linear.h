#pragma once

#include <cstdint>
#include <string_view>

#include "ops/common/checks.h"
#include "ops/common/linear.h"
#include "ops/packed_linear/panel.h"

namespace my_ops {

// linear_packed: a float linear layer on a weight packed once for the kernels, for inference:
//   out = x @ weight_unpacked.T + bias,
// where weight, float32 [N / 32, K, 32], holds nn.Linear's weight [N, K] in panels of 32 output
// channels, K-major within a panel: weight[p, k, j] = weight_unpacked[32 p + j, k]. In that
// layout a kernel streams each weight once, 32 channels a step, for every row of x it holds in
// registers; the layout is the same on every CPU and GPU, so a package's weights and a weights
// file carry it as stored (my_ops.pack_linear_weight makes it, at export). N is a multiple of 32:
// a layer of another width stays nn.Linear.
//
// x is any floating dtype; the math is float32 (x converted first), with float32 sums, and out has
// x's dtype and shape [..., N]. bias, optional, is [N] of x's dtype.

namespace detail {

__attribute__((noinline, cold)) inline void fail_packed_weight(std::string_view op,
                                                               TensorRef weight, TensorRef x) {
  fail_same_device(op, "weight", weight, "x", x);
  MY_OPS_CHECK(weight.scalar_type() == ScalarType::Float, op,
               ": expected weight to have dtype Float, got ", weight.scalar_type());
  MY_OPS_CHECK(weight.dim() == 3 && weight.size(2) == kPanelChannels, op,
               ": expected weight to be packed, 3-D [out_features / ", kPanelChannels,
               ", in_features, ", kPanelChannels, "] (my_ops.pack_linear_weight), got shape ",
               Shape{weight.sizes()});
  MY_OPS_CHECK(false, op, ": expected weight to have in_features ", x.size(-1),
               " (x's last dim) in dim 1, got ", weight.size(1));
}

}  // namespace detail

inline LinearShape check_linear_packed_args(TensorRef x, TensorRef weight, TensorRef bias) {
  constexpr std::string_view kOp = "linear_packed";
  check_primary_input(kOp, "x", x);
  if (!__builtin_expect(weight.defined() && weight.device_type() == x.device_type() &&
                            weight.device_index() == x.device_index() &&
                            weight.scalar_type() == ScalarType::Float && weight.dim() == 3 &&
                            weight.size(1) == x.size(-1) && weight.size(2) == kPanelChannels,
                        1)) {
    detail::fail_packed_weight(kOp, weight, x);
  }
  const int64_t n = weight.size(0) * kPanelChannels;
  check_linear_bias(kOp, bias, x, n);
  return linear_shape(x, n);
}

}  // namespace my_ops
