#pragma once

// What every tier's quantized kernels share: the per-row quantization's formulas and the int8
// epilogue (quantized_linear.h), so that each tier gives the same q and the same outputs.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/quantized_linear/cpu_vec.h"

namespace my_ops::cpu_vec::detail {

// Half to even, as torch.round: nearbyint in the default rounding mode.
inline int32_t round_to_int(float v) { return static_cast<int32_t>(std::nearbyint(v)); }

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A finite row's quantization from its lowest value (at most 0) and its range.
struct RowScale {
  float scale;
  float inverse;
  int32_t zero_point;
};

inline RowScale row_scale(float lo, float range) {
  float scale = range / 255.0f;
  // A row of zeros, or one so small that 1 / scale would overflow: every q is the zero point.
  if (scale < std::numeric_limits<float>::min()) scale = 1.0f;
  const float inverse = 1.0f / scale;
  return {scale, inverse, std::clamp(-round_to_int(lo * inverse), 0, 255)};
}

// out[m, n] from one row and channel's exact centered sum, sum_k (q - zero) * w.
inline float int8_output(const QuantizedRow& p, int64_t centered, float w_scale, float b) {
  if (!p.finite) return kNaN;
  return (p.scale * w_scale) * static_cast<float>(centered) + b;
}

// out[m, n] from the sums sum_k q * w and sum_k w.
inline float int8_output(const QuantizedRow& p, int32_t q_dot_w, int64_t w_sum, float w_scale,
                         float b) {
  return int8_output(p, int64_t{q_dot_w} - int64_t{p.zero_point} * w_sum, w_scale, b);
}

// out[m, n] of linear_int4 from one row and channel's total, sum_g scale[n, g] * sum_{k in g}
// (q - zero) * w.
inline float int4_output(const QuantizedRow& p, float total, float b) {
  return p.finite ? p.scale * total + b : kNaN;
}

// q's rows in the int4 kernels' step order: in each step of kStep in_features (kStep / 2 weight
// bytes), the even k (the bytes' low four bits) first, then the odd k (their high four bits); each
// byte XORed with `flip` (0x80: q - 128 as a signed byte), a last partial step padded with zeros.
template <int64_t kStep>
std::vector<uint8_t> int4_step_order(const uint8_t* q, int64_t rows, int64_t k, uint8_t flip) {
  const int64_t stride = (k + kStep - 1) / kStep * kStep;
  std::vector<uint8_t> ordered(static_cast<size_t>(rows * stride), 0);
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t i = 0; i < k; i += 2) {
      uint8_t* step = ordered.data() + m * stride + i / kStep * kStep;
      const int64_t j = (i % kStep) / 2;
      step[j] = q[m * k + i] ^ flip;
      step[kStep / 2 + j] = q[m * k + i + 1] ^ flip;
    }
  }
  return ordered;
}

}  // namespace my_ops::cpu_vec::detail
