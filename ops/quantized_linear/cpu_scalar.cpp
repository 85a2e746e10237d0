// The quantized linear layers' portable kernels: every CPU's fallback, and the reference the
// other tiers are tested against.

#include <torch/headeronly/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/quantized_linear/cpu_common.h"
#include "ops/quantized_linear/cpu_vec.h"

namespace my_ops::cpu_vec {
namespace {

using detail::int8_output;
using detail::kNaN;
using detail::round_to_int;
using detail::row_scale;
using detail::RowScale;

void quantize_rows(const float* x, int64_t k, int64_t begin, int64_t end, uint8_t* q,
                   QuantizedRow* params) {
  for (int64_t r = begin; r < end; ++r) {
    const float* row = x + r * k;
    uint8_t* q_row = q + r * k;
    float lo = 0.0f;
    float hi = 0.0f;
    // v * 0 is NaN exactly when v is an infinity or a NaN, which min and max would pass over.
    float poison = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      lo = row[i] < lo ? row[i] : lo;
      hi = row[i] > hi ? row[i] : hi;
      poison += row[i] * 0.0f;
    }
    const float range = hi - lo;
    if (poison != 0.0f || !(range <= std::numeric_limits<float>::max())) {
      params[r] = {1.0f, 0, false};
      std::fill(q_row, q_row + k, uint8_t{0});
      continue;
    }
    const RowScale rs = row_scale(lo, range);
    for (int64_t i = 0; i < k; ++i) {
      q_row[i] = static_cast<uint8_t>(
          std::clamp(round_to_int(row[i] * rs.inverse) + rs.zero_point, 0, 255));
    }
    params[r] = {rs.scale, rs.zero_point, true};
  }
}

std::vector<uint8_t> no_layout(const uint8_t*, const QuantizedRow*, int64_t, int64_t) { return {}; }

std::vector<uint8_t> no_int4_layout(const uint8_t*, const QuantizedRow*, int64_t, int64_t,
                                    int64_t) {
  return {};
}

void linear_int8(const uint8_t* q, const uint8_t*, const QuantizedRow* params, int64_t rows,
                 int64_t k, const int8_t* weight, const float* weight_scale, const float* bias,
                 float* out, int64_t n_total, int64_t n_begin, int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    const int8_t* w = weight + n * k;
    // sum_k (q - zero) * w = sum_k q * w - zero * sum_k w, so q stays unsigned.
    int64_t w_sum = 0;
    for (int64_t i = 0; i < k; ++i) w_sum += w[i];
    const float b = bias != nullptr ? bias[n] : 0.0f;
    for (int64_t m = 0; m < rows; ++m) {
      const uint8_t* q_row = q + m * k;
      int32_t acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += int32_t{q_row[i]} * int32_t{w[i]};
      out[m * n_total + n] = int8_output(params[m], acc, w_sum, weight_scale[n], b);
    }
  }
}

void linear_int4(const uint8_t* q, const uint8_t*, const QuantizedRow* params, int64_t rows,
                 int64_t k, const uint8_t* weight, const float* weight_scale, int64_t group_size,
                 const float* bias, float* out, int64_t n_total, int64_t n_begin, int64_t n_end) {
  const int64_t groups = k / group_size;
  const int64_t row_bytes = k / 2;
  const int64_t group_bytes = group_size / 2;
  std::vector<int32_t> w_sums(static_cast<size_t>(groups));
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* w = weight + n * row_bytes;
    const float* scales = weight_scale + n * groups;
    for (int64_t g = 0; g < groups; ++g) {
      int32_t sum = 0;
      for (int64_t j = g * group_bytes; j < (g + 1) * group_bytes; ++j) {
        sum += (w[j] & 15) + (w[j] >> 4) - 16;
      }
      w_sums[static_cast<size_t>(g)] = sum;
    }
    const float b = bias != nullptr ? bias[n] : 0.0f;
    for (int64_t m = 0; m < rows; ++m) {
      const QuantizedRow& p = params[m];
      float& o = out[m * n_total + n];
      if (!p.finite) {
        o = kNaN;
        continue;
      }
      const uint8_t* q_row = q + m * k;
      float total = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t acc = 0;
        for (int64_t j = g * group_bytes; j < (g + 1) * group_bytes; ++j) {
          acc += int32_t{q_row[2 * j]} * ((w[j] & 15) - 8) +
                 int32_t{q_row[2 * j + 1]} * ((w[j] >> 4) - 8);
        }
        const int32_t centered = acc - p.zero_point * w_sums[static_cast<size_t>(g)];
        total += static_cast<float>(centered) * scales[g];
      }
      o = p.scale * total + b;
    }
  }
}

void halves_to_floats(const uint16_t* bits, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = static_cast<float>(c10::Half(bits[i], c10::Half::from_bits()));
  }
}

constexpr QuantizedLinearKernels kScalar = {
    cpu::CpuIsa::kScalar, &quantize_rows, &no_layout,        &no_int4_layout,
    &linear_int8,         &linear_int4,   &halves_to_floats,
};

}  // namespace

const QuantizedLinearKernels* scalar_quantized_linear_kernels() { return &kScalar; }

}  // namespace my_ops::cpu_vec
