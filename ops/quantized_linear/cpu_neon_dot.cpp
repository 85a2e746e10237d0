// The quantized linear layers with the Arm dot product (FEAT_DotProd: sdot, Cortex-A55/A76 and
// later, Neoverse, Apple M). sdot multiplies signed bytes, so q's rows are shifted once per call
// to a = q - 128 (a signed byte); the products are then exact int32 sums, and
//   sum (q - zero) * w = sum a * w + (128 - zero) * sum w,
// with each channel's weight sums made by sdot against ones in the same pass.

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/common/cpu_unroll.h"
#include "ops/quantized_linear/cpu_common.h"
#include "ops/quantized_linear/cpu_vec.h"

namespace my_ops::cpu_vec {
#if defined(__aarch64__)
namespace neon_dot {
namespace {

#define MY_OPS_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))

using detail::int4_output;
using detail::int8_output;
using detail::kNaN;

constexpr int64_t kInt8Step = 16;

int64_t padded_k(int64_t k) { return (k + kInt8Step - 1) / kInt8Step * kInt8Step; }

// linear_int8's rows: q - 128 as signed bytes, each row padded with zeros to a multiple of 16.
std::vector<uint8_t> int8_rows(const uint8_t* q, const QuantizedRow*, int64_t rows, int64_t k) {
  const int64_t stride = padded_k(k);
  std::vector<uint8_t> shifted(static_cast<size_t>(rows * stride), 0);
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t i = 0; i < k; ++i) shifted[m * stride + i] = q[m * k + i] ^ 0x80;
  }
  return shifted;
}

// 16 weights of a channel: a whole step, or the last k % 16 with zeros after them (read through a
// copy, never past the weights' end).
MY_OPS_DOTPROD inline int8x16_t load_weights(const int8_t* w, int64_t remaining) {
  if (remaining >= kInt8Step) return vld1q_s8(w);
  int8_t tail[kInt8Step] = {};
  std::memcpy(tail, w, static_cast<size_t>(remaining));
  return vld1q_s8(tail);
}

// dots[r][c] = sum_i a[r, i] * w[c, i] and sums[c] = sum_i w[c, i]: R rows by C channels.
template <int R, int C>
MY_OPS_DOTPROD void int8_block(const int8_t* a, int64_t stride, const int8_t* w, int64_t k,
                               int32_t (&dots)[4][4], int32_t (&sums)[4]) {
  const int8x16_t ones = vdupq_n_s8(1);
  int32x4_t acc[R][C];
  int32x4_t w_acc[C];
  MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
    w_acc[c] = vdupq_n_s32(0);
    MY_OPS_UNROLL for (int r = 0; r < R; ++r) acc[r][c] = vdupq_n_s32(0);
  }
  for (int64_t i = 0; i < k; i += kInt8Step) {
    int8x16_t x[R];
    MY_OPS_UNROLL for (int r = 0; r < R; ++r) x[r] = vld1q_s8(a + r * stride + i);
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      const int8x16_t wv = load_weights(w + c * k + i, k - i);
      w_acc[c] = vdotq_s32(w_acc[c], ones, wv);
      MY_OPS_UNROLL for (int r = 0; r < R; ++r) acc[r][c] = vdotq_s32(acc[r][c], x[r], wv);
    }
  }
  MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
    sums[c] = vaddvq_s32(w_acc[c]);
    MY_OPS_UNROLL for (int r = 0; r < R; ++r) dots[r][c] = vaddvq_s32(acc[r][c]);
  }
}

using Int8Block = void (*)(const int8_t*, int64_t, const int8_t*, int64_t, int32_t (&)[4][4],
                           int32_t (&)[4]);

template <int R>
constexpr Int8Block kInt8BlocksForRows[4] = {&int8_block<R, 1>, &int8_block<R, 2>,
                                             &int8_block<R, 3>, &int8_block<R, 4>};
constexpr const Int8Block* kInt8Blocks[4] = {kInt8BlocksForRows<1>, kInt8BlocksForRows<2>,
                                             kInt8BlocksForRows<3>, kInt8BlocksForRows<4>};

void linear_int8(const uint8_t*, const uint8_t* rows_layout, const QuantizedRow* params,
                 int64_t rows, int64_t k, const int8_t* weight, const float* weight_scale,
                 const float* bias, float* out, int64_t n_total, int64_t n_begin, int64_t n_end) {
  if (rows == 0) return;
  const int8_t* a = reinterpret_cast<const int8_t*>(rows_layout);
  const int64_t stride = padded_k(k);
  int32_t dots[4][4];
  int32_t sums[4];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += 4) {
    const int channels = static_cast<int>(std::min<int64_t>(4, n_end - n0));
    for (int64_t m0 = 0; m0 < rows; m0 += 4) {
      const int block_rows = static_cast<int>(std::min<int64_t>(4, rows - m0));
      kInt8Blocks[block_rows - 1][channels - 1](a + m0 * stride, stride, weight + n0 * k, k, dots,
                                                sums);
      MY_OPS_UNROLL for (int r = 0; r < block_rows; ++r) {
        const QuantizedRow& p = params[m0 + r];
        MY_OPS_UNROLL for (int c = 0; c < channels; ++c) {
          const int64_t n = n0 + c;
          const int64_t centered = int64_t{dots[r][c]} + int64_t{128 - p.zero_point} * sums[c];
          out[(m0 + r) * n_total + n] =
              int8_output(p, centered, weight_scale[n], bias != nullptr ? bias[n] : 0.0f);
        }
      }
    }
  }
}

// linear_int4's rows: q - 128 in the steps' order. A step is 32 in_features, 16 weight bytes,
// whose low four bits (the even k) pair with the step's first 16 bytes and whose high four bits
// (the odd k) with its last 16. k is a multiple of 32 (group sizes are).
constexpr int64_t kInt4Step = 32;

std::vector<uint8_t> int4_rows(const uint8_t* q, const QuantizedRow*, int64_t rows, int64_t k,
                               int64_t) {
  return detail::int4_step_order<kInt4Step>(q, rows, k, 0x80);
}

// totals[r][c] = sum_g scale[c, g] * sum_{k in g} (q[r, k] - zero[r]) * w[c, k]: each group's
// lanes are centered exactly in int32 (a * w plus (128 - zero) times the weights' sum) before
// the group's scale.
template <int R, int C>
MY_OPS_DOTPROD void int4_block(const int8_t* a, int64_t k, const QuantizedRow* params,
                               const uint8_t* w, const float* scales, int64_t group_size,
                               float (&totals)[4][4]) {
  const uint8x16_t low_bits = vdupq_n_u8(0x0F);
  const int8x16_t eight = vdupq_n_s8(8);
  const int8x16_t ones = vdupq_n_s8(1);
  const int64_t groups = k / group_size;
  const int64_t steps = group_size / kInt4Step;
  int32_t shift[R];
  MY_OPS_UNROLL for (int r = 0; r < R; ++r) shift[r] = 128 - params[r].zero_point;
  float32x4_t total[R][C];
  MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) total[r][c] = vdupq_n_f32(0.0f);
  }
  for (int64_t g = 0; g < groups; ++g) {
    int32x4_t dots[R][C];
    int32x4_t w_sums[C];
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      w_sums[c] = vdupq_n_s32(0);
      MY_OPS_UNROLL for (int r = 0; r < R; ++r) dots[r][c] = vdupq_n_s32(0);
    }
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t i = g * group_size + s * kInt4Step;
      int8x16_t even[R];
      int8x16_t odd[R];
      MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
        even[r] = vld1q_s8(a + r * k + i);
        odd[r] = vld1q_s8(a + r * k + i + 16);
      }
      MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
        const uint8x16_t packed = vld1q_u8(w + c * (k / 2) + i / 2);
        const int8x16_t low = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(packed, low_bits)), eight);
        const int8x16_t high = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(packed, 4)), eight);
        w_sums[c] = vdotq_s32(vdotq_s32(w_sums[c], ones, low), ones, high);
        MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
          dots[r][c] = vdotq_s32(vdotq_s32(dots[r][c], even[r], low), odd[r], high);
        }
      }
    }
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      const float scale = scales[c * groups + g];
      MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
        // |centered| <= group_size * 255 * 8: exact in int32 and in float for the groups the
        // op takes (below 2^24 up to group_size 8192).
        const int32x4_t centered = vmlaq_n_s32(dots[r][c], w_sums[c], shift[r]);
        total[r][c] = vfmaq_n_f32(total[r][c], vcvtq_f32_s32(centered), scale);
      }
    }
  }
  MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) totals[r][c] = vaddvq_f32(total[r][c]);
  }
}

using Int4Block = void (*)(const int8_t*, int64_t, const QuantizedRow*, const uint8_t*,
                           const float*, int64_t, float (&)[4][4]);

// [rows - 1][channels - 1]: one row by 4 channels, two rows by 2.
constexpr int kInt4Channels[2] = {4, 2};
constexpr Int4Block kInt4Blocks[2][4] = {
    {&int4_block<1, 1>, &int4_block<1, 2>, &int4_block<1, 3>, &int4_block<1, 4>},
    {&int4_block<2, 1>, &int4_block<2, 2>, nullptr, nullptr},
};

void linear_int4(const uint8_t*, const uint8_t* rows_layout, const QuantizedRow* params,
                 int64_t rows, int64_t k, const uint8_t* weight, const float* weight_scale,
                 int64_t group_size, const float* bias, float* out, int64_t n_total,
                 int64_t n_begin, int64_t n_end) {
  if (rows == 0) return;
  const int8_t* a = reinterpret_cast<const int8_t*>(rows_layout);
  const int64_t groups = k / group_size;
  const int64_t row_block = std::min<int64_t>(rows, 2);
  const int64_t channel_block = kInt4Channels[row_block - 1];
  float totals[4][4];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += channel_block) {
    const int channels = static_cast<int>(std::min<int64_t>(channel_block, n_end - n0));
    for (int64_t m0 = 0; m0 < rows; m0 += 2) {
      const int block_rows = static_cast<int>(std::min<int64_t>(2, rows - m0));
      kInt4Blocks[block_rows - 1][channels - 1](a + m0 * k, k, params + m0, weight + n0 * (k / 2),
                                                weight_scale + n0 * groups, group_size, totals);
      MY_OPS_UNROLL for (int r = 0; r < block_rows; ++r) {
        const QuantizedRow& p = params[m0 + r];
        MY_OPS_UNROLL for (int c = 0; c < channels; ++c) {
          const int64_t n = n0 + c;
          out[(m0 + r) * n_total + n] =
              int4_output(p, totals[r][c], bias != nullptr ? bias[n] : 0.0f);
        }
      }
    }
  }
}

QuantizedLinearKernels neon_dot_kernels() {
  // Quantizing a row and converting scales are the portable loops' (vectorised by the compiler
  // at the armv8-a baseline): the products are what the dot product changes.
  QuantizedLinearKernels kernels = *scalar_quantized_linear_kernels();
  kernels.isa = cpu::CpuIsa::kNeonDot;
  kernels.int8_rows = &int8_rows;
  kernels.int4_rows = &int4_rows;
  kernels.linear_int8 = &linear_int8;
  kernels.linear_int4 = &linear_int4;
  return kernels;
}

}  // namespace
}  // namespace neon_dot

const QuantizedLinearKernels* neon_dot_quantized_linear_kernels() {
  static const QuantizedLinearKernels kernels = neon_dot::neon_dot_kernels();
  return &kernels;
}
#else
const QuantizedLinearKernels* neon_dot_quantized_linear_kernels() { return nullptr; }
#endif  // __aarch64__

}  // namespace my_ops::cpu_vec
