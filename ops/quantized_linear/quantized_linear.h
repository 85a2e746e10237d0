#pragma once

#include <cstdint>

#include "ops/common/checks.h"
#include "ops/common/linear.h"

namespace my_ops {

// The quantized linear layers: out = x @ dequantize(weight).T + bias, for inference.
//
// Activations are quantized per token (each row of x, every dim but the last being rows) to 8 bits
// with a zero point, XNNPACK's "qd8" and ONNX Runtime's dynamic uint8 scheme, on each call:
//   lo = min(0, min x), hi = max(0, max x), scale = (hi - lo) / 255 (1 when hi == lo),
//   zero = -round(lo * (1 / scale)), q = clamp(round(x * (1 / scale)) + zero, 0, 255),
// in float32, rounding half to even, with 1 / scale computed once per row. The products are then
// exact integer sums, sum_k (q - zero) * w; a row with a non-finite value gives NaN.
//
// linear_int8: weight int8 [N, K], symmetric, one float32 scale per output channel:
//   out[m, n] = (scale_x[m] * weight_scale[n]) * sum_k (q[m, k] - zero[m]) * weight[n, k] +
//   bias[n].
// linear_int4: weight holds int4 values w in [-8, 7] two to a byte, uint8 [N, K / 2]: byte j of
// row n holds k = 2j in its low four bits and k = 2j + 1 in its high four, each stored as w + 8
// (ONNX Runtime's MatMulNBits order); float32 or float16 scales [N, K / group_size], one per
// group of group_size consecutive k (the "8da4w" scheme of torchao and ExecuTorch; float16 halves
// the scales' bytes, 4.5 bits a weight in all instead of 5):
//   out[m, n] = scale_x[m] * sum_g weight_scale[n, g] * sum_{k in g} (q[m, k] - zero[m]) * w[n, k]
//               + bias[n].
// x is any floating dtype; the math is float32 (x converted first), and out has x's dtype and
// shape [..., N]. bias, optional, is [N] of x's dtype. The kernels read the weights as the
// exporter writes them: there is no other packed form, so nothing is repacked at load. Per call
// the CPU kernels quantize x, lay its rows out for the products (at 8 rows and more), and unpack
// int4 weights to int8 a block of channels at a time, in cache, as they multiply.

// Group sizes are multiples of this, so that a group is whole bytes of packed int4 weights and
// whole lanes of the kernels' vectors.
inline constexpr int64_t kInt4GroupMultiple = 32;

// The `groups` of check_quantized_linear_args for linear_int8: one scale per output channel.
inline constexpr int64_t kPerChannel = -1;

namespace detail {

__attribute__((noinline, cold)) inline void fail_quantized_weight(std::string_view op,
                                                                  TensorRef weight, TensorRef x,
                                                                  ScalarType dtype,
                                                                  int64_t values_per_byte) {
  fail_same_device(op, "weight", weight, "x", x);
  MY_OPS_CHECK(weight.scalar_type() == dtype, op, ": expected weight to have dtype ",
               values_per_byte == 2 ? "uint8 (two int4 values a byte)" : "int8", ", got ",
               weight.scalar_type());
  MY_OPS_CHECK(weight.dim() == 2, op, ": expected weight to be 2-D [out_features, ",
               values_per_byte == 2 ? "in_features / 2" : "in_features", "], got ", weight.dim(),
               "-D with shape ", Shape{weight.sizes()});
  MY_OPS_CHECK(weight.size(1) * values_per_byte == x.size(-1), op, ": expected weight to have ",
               x.size(-1) / values_per_byte, " columns (",
               values_per_byte == 2 ? "x's last dim / 2" : "x's last dim", "), got ",
               weight.size(1));
}

inline bool scale_dtype_ok(ScalarType dtype, int64_t groups) {
  return dtype == ScalarType::Float || (groups != kPerChannel && dtype == ScalarType::Half);
}

__attribute__((noinline, cold)) inline void fail_weight_scale(std::string_view op, TensorRef scale,
                                                              TensorRef x, int64_t out_features,
                                                              int64_t groups) {
  fail_same_device(op, "weight_scale", scale, "x", x);
  MY_OPS_CHECK(scale_dtype_ok(scale.scalar_type(), groups), op,
               ": expected weight_scale to have dtype ",
               groups == kPerChannel ? "Float" : "Float or Half", ", got ", scale.scalar_type());
  if (groups == kPerChannel) {
    MY_OPS_CHECK(false, op, ": expected weight_scale to have shape [", out_features,
                 "] (one scale per output channel), got ", Shape{scale.sizes()});
  }
  MY_OPS_CHECK(false, op, ": expected weight_scale to have shape [", out_features, ", ", groups,
               "] (output channels, groups of in_features), got ", Shape{scale.sizes()});
}

}  // namespace detail

// The checks both ops make, in schema order: x, weight, weight_scale (`groups` per output channel,
// float32 or float16, or kPerChannel for a float32 vector of one scale per channel), bias. Metadata
// only; the scales' values are checked by check_weight_scale_values where a kernel reads them.
inline LinearShape check_quantized_linear_args(std::string_view op, TensorRef x, TensorRef weight,
                                               TensorRef weight_scale, int64_t groups,
                                               TensorRef bias, ScalarType weight_dtype,
                                               int64_t values_per_byte) {
  check_primary_input(op, "x", x);
  const int64_t k = x.size(-1);
  if (!__builtin_expect(weight.defined() && weight.device_type() == x.device_type() &&
                            weight.device_index() == x.device_index() &&
                            weight.scalar_type() == weight_dtype && weight.dim() == 2 &&
                            weight.size(1) * values_per_byte == k,
                        1)) {
    detail::fail_quantized_weight(op, weight, x, weight_dtype, values_per_byte);
  }
  const int64_t n = weight.size(0);
  const bool scale_ok =
      weight_scale.defined() && weight_scale.device_type() == x.device_type() &&
      weight_scale.device_index() == x.device_index() &&
      detail::scale_dtype_ok(weight_scale.scalar_type(), groups) &&
      (groups == kPerChannel ? weight_scale.dim() == 1 && weight_scale.size(0) == n
                             : weight_scale.dim() == 2 && weight_scale.size(0) == n &&
                                   weight_scale.size(1) == groups);
  if (!__builtin_expect(scale_ok, 1)) detail::fail_weight_scale(op, weight_scale, x, n, groups);
  check_linear_bias(op, bias, x, n);
  return linear_shape(x, n);
}

// linear_int4's group size: a positive multiple of kInt4GroupMultiple that divides K. Returns the
// number of groups per output channel.
inline int64_t check_int4_group_size(std::string_view op, int64_t group_size, TensorRef x) {
  const int64_t k = x.size(-1);
  MY_OPS_CHECK(group_size > 0 && group_size % kInt4GroupMultiple == 0, op,
               ": expected group_size to be a positive multiple of ", kInt4GroupMultiple, ", got ",
               group_size);
  MY_OPS_CHECK(k % group_size == 0, op, ": expected group_size to divide x's last dim (", k,
               "), got ", group_size);
  return k / group_size;
}

// linear_int8's int32 sums hold K * 255 * 128 for K up to this.
inline constexpr int64_t kMaxInt8InFeatures = 65536;

inline void check_int8_in_features(std::string_view op, const LinearShape& shape) {
  MY_OPS_CHECK(shape.in_features <= kMaxInt8InFeatures, op,
               ": expected x to have a last dim of at most ", kMaxInt8InFeatures, ", got ",
               shape.in_features);
}

// Each op's checks, as both devices make them; each returns the sizes the kernels need.
inline LinearShape check_linear_int8_args(TensorRef x, TensorRef weight, TensorRef weight_scale,
                                          TensorRef bias) {
  constexpr std::string_view kOp = "linear_int8";
  const LinearShape shape = check_quantized_linear_args(
      kOp, x, weight, weight_scale, kPerChannel, bias, ScalarType::Char, /*values_per_byte=*/1);
  check_int8_in_features(kOp, shape);
  return shape;
}

inline LinearShape check_linear_int4_args(TensorRef x, TensorRef weight, TensorRef weight_scale,
                                          int64_t group_size, TensorRef bias) {
  constexpr std::string_view kOp = "linear_int4";
  check_primary_input(kOp, "x", x);
  const int64_t groups = check_int4_group_size(kOp, group_size, x);
  return check_quantized_linear_args(kOp, x, weight, weight_scale, groups, bias, ScalarType::Byte,
                                     /*values_per_byte=*/2);
}

// The scales a kernel is about to use: finite and positive (a zero or non-finite scale is a broken
// quantization, whose output would be zeros or NaN rather than an error). Read on the CPU only:
// on a GPU the check would cost a synchronisation per call.
inline void check_weight_scale_values(std::string_view op, const float* scales, int64_t count) {
  bool all_ok = true;
  for (int64_t i = 0; i < count; ++i) all_ok &= scales[i] > 0.0f && scales[i] <= 3.4028235e38f;
  if (__builtin_expect(all_ok, 1)) return;
  for (int64_t i = 0; i < count; ++i) {
    MY_OPS_CHECK(scales[i] > 0.0f && scales[i] <= 3.4028235e38f, op,
                 ": expected weight_scale to be finite and positive, got ", scales[i],
                 " at flat index ", i);
  }
}

}  // namespace my_ops
