// linear_int8 with the Arm int8 matrix multiply (FEAT_I8MM: smmla, Neoverse V1/V2/N2, Cortex-A510
// and later, Apple M2). One smmla multiplies two rows by two channels over 8 in_features, 32
// products, where sdot makes 16. As in the dot-product kernels (cpu_neon_dot.cpp), q's rows are
// shifted once per call to a = q - 128 (signed bytes) and
//   sum (q - zero) * w = sum a * w + (128 - zero) * sum w;
// the channels' weight sums come from a row of ones laid after the last row, in the same
// smmla as the rows (free for a single decoding row, which would otherwise pair with nothing).
// linear_int4 and the rest are the dot product's.

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
namespace neon_i8mm {
namespace {

#define MY_OPS_I8MM __attribute__((target("arch=armv8.2-a+i8mm")))

using detail::int8_output;

constexpr int64_t kStep = 8;     // in_features per smmla
constexpr int kBlockPairs = 4;   // row pairs per block (8 rows) ...
constexpr int kMaxPairs = 6;     // ... and up to 6 in the last, which holds the ones row
constexpr int kMaxChannels = 4;  // channels per block: 2 pairs

int64_t padded_k(int64_t k) { return (k + 2 * kStep - 1) / (2 * kStep) * (2 * kStep); }

// Rows (rows + 1, the last a row of ones) in pairs; a pair is padded_k(k) / 8 chunks of 16
// bytes, each the two rows' next 8 values: [r0[i, i + 8), r1[i, i + 8)]. Values are q - 128 as
// signed bytes; the padding past k, and the pair's second row when rows + 1 is odd, are zeros.
int64_t pair_count(int64_t rows) { return (rows + 2) / 2; }

MY_OPS_I8MM std::vector<uint8_t> int8_rows(const uint8_t* q, const QuantizedRow*, int64_t rows,
                                           int64_t k) {
  const int64_t stride = 2 * padded_k(k);
  std::vector<uint8_t> pairs(static_cast<size_t>(pair_count(rows) * stride), 0);
  const uint8x8_t flip = vdup_n_u8(0x80);
  const int64_t whole = k / kStep * kStep;
  for (int64_t m = 0; m <= rows; ++m) {
    uint8_t* pair = pairs.data() + (m / 2) * stride + (m % 2) * kStep;
    if (m == rows) {
      for (int64_t i = 0; i < k; ++i) pair[(i / kStep) * 2 * kStep + i % kStep] = 1;
      break;
    }
    const uint8_t* row = q + m * k;
    for (int64_t i = 0; i < whole; i += kStep) {
      vst1_u8(pair + 2 * i, veor_u8(vld1_u8(row + i), flip));
    }
    for (int64_t i = whole; i < k; ++i) pair[2 * whole + i - whole] = row[i] ^ 0x80;
  }
  return pairs;
}

// 16 weights of a channel from in_feature i: a whole step, or the last ones with zeros after
// them (read through a copy, never past the weights' end).
MY_OPS_I8MM inline int8x16_t load_tail(const int8_t* w, int64_t remaining) {
  int8_t tail[2 * kStep] = {};
  std::memcpy(tail, w, static_cast<size_t>(std::min<int64_t>(remaining, 2 * kStep)));
  return vld1q_s8(tail);
}

// One step of 16 in_features for P row pairs by C channels (wv: each channel's 16 weights):
// two channels' halves paired by zip, two smmla per row pair and channel pair.
template <int P, int C>
MY_OPS_I8MM __attribute__((always_inline)) inline void int8_step(const int8_t* pairs,
                                                                 int64_t pair_stride, int64_t i,
                                                                 const int8x16_t (&wv)[C],
                                                                 int32x4_t (&acc)[P][(C + 1) / 2]) {
  constexpr int kPairs = (C + 1) / 2;
  int8x16_t first[kPairs];
  int8x16_t second[kPairs];
  MY_OPS_UNROLL for (int c = 0; c < kPairs; ++c) {
    const int64x2_t a = vreinterpretq_s64_s8(wv[2 * c]);
    const int64x2_t b = vreinterpretq_s64_s8(2 * c + 1 < C ? wv[2 * c + 1] : vdupq_n_s8(0));
    first[c] = vreinterpretq_s8_s64(vzip1q_s64(a, b));
    second[c] = vreinterpretq_s8_s64(vzip2q_s64(a, b));
  }
  MY_OPS_UNROLL for (int p = 0; p < P; ++p) {
    const int8x16_t x0 = vld1q_s8(pairs + p * pair_stride + 2 * i);
    const int8x16_t x1 = vld1q_s8(pairs + p * pair_stride + 2 * i + 2 * kStep);
    MY_OPS_UNROLL for (int c = 0; c < kPairs; ++c) {
      acc[p][c] = vmmlaq_s32(vmmlaq_s32(acc[p][c], x0, first[c]), x1, second[c]);
    }
  }
}

// dots[p][c] = the 2x2 tile of row pair p by channels (2c, 2c + 1): [r0.c0, r0.c1, r1.c0, r1.c1],
// for P row pairs by C channels (an odd C's last pair has a zero second channel).
template <int P, int C>
MY_OPS_I8MM void int8_block(const int8_t* pairs, int64_t pair_stride, const int8_t* w, int64_t k,
                            int32_t (&dots)[kMaxPairs][kMaxChannels / 2][4]) {
  constexpr int kPairs = (C + 1) / 2;
  int32x4_t acc[P][kPairs];
  MY_OPS_UNROLL for (int p = 0; p < P; ++p) {
    MY_OPS_UNROLL for (int c = 0; c < kPairs; ++c) acc[p][c] = vdupq_n_s32(0);
  }
  const int64_t whole = k / (2 * kStep) * (2 * kStep);
  for (int64_t i = 0; i < whole; i += 2 * kStep) {
    int8x16_t wv[C];
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) wv[c] = vld1q_s8(w + c * k + i);
    int8_step<P, C>(pairs, pair_stride, i, wv, acc);
  }
  if (whole < k) {
    int8x16_t wv[C];
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) wv[c] = load_tail(w + c * k + whole, k - whole);
    int8_step<P, C>(pairs, pair_stride, whole, wv, acc);
  }
  MY_OPS_UNROLL for (int p = 0; p < P; ++p) {
    MY_OPS_UNROLL for (int c = 0; c < kPairs; ++c) vst1q_s32(dots[p][c], acc[p][c]);
  }
}

using Int8Block = void (*)(const int8_t*, int64_t, const int8_t*, int64_t,
                           int32_t (&)[kMaxPairs][kMaxChannels / 2][4]);

template <int P>
constexpr Int8Block kBlocksForPairs[kMaxChannels] = {&int8_block<P, 1>, &int8_block<P, 2>,
                                                     &int8_block<P, 3>, &int8_block<P, 4>};
constexpr const Int8Block* kBlocks[kMaxPairs] = {kBlocksForPairs<1>, kBlocksForPairs<2>,
                                                 kBlocksForPairs<3>, kBlocksForPairs<4>,
                                                 kBlocksForPairs<5>, kBlocksForPairs<6>};

// The product of row m (m <= rows: rows is the ones row) and channel c from a block's tiles.
inline int32_t tile_value(const int32_t (&dots)[kMaxPairs][kMaxChannels / 2][4], int64_t m, int c) {
  return dots[m / 2][c / 2][(m % 2) * 2 + c % 2];
}

void linear_int8(const uint8_t*, const uint8_t* rows_layout, const QuantizedRow* params,
                 int64_t rows, int64_t k, const int8_t* weight, const float* weight_scale,
                 const float* bias, float* out, int64_t n_total, int64_t n_begin, int64_t n_end) {
  if (rows == 0) return;
  const int8_t* pairs = reinterpret_cast<const int8_t*>(rows_layout);
  const int64_t pair_stride = 2 * padded_k(k);
  const int64_t total_pairs = pair_count(rows);
  // Blocks of 4 pairs, the last of up to 6: it holds the ones row, and a block of that row
  // alone would read every weight again for one pair.
  int64_t last_block = 0;
  while (total_pairs - last_block > kMaxPairs) last_block += kBlockPairs;
  int32_t dots[kMaxPairs][kMaxChannels / 2][4];
  int32_t sums[kMaxChannels];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kMaxChannels) {
    const int channels = static_cast<int>(std::min<int64_t>(kMaxChannels, n_end - n0));
    // The last block first: the ones row's products are the weight sums every block needs.
    for (int64_t p0 = last_block; p0 >= 0; p0 -= kBlockPairs) {
      const int block_pairs = static_cast<int>(p0 == last_block ? total_pairs - p0 : kBlockPairs);
      kBlocks[block_pairs - 1][channels - 1](pairs + p0 * pair_stride, pair_stride, weight + n0 * k,
                                             k, dots);
      if (p0 == last_block) {
        for (int c = 0; c < channels; ++c) sums[c] = tile_value(dots, rows - 2 * p0, c);
      }
      const int64_t block_rows = std::min<int64_t>(2 * block_pairs, rows - 2 * p0);
      for (int64_t r = 0; r < block_rows; ++r) {
        const QuantizedRow& p = params[2 * p0 + r];
        for (int c = 0; c < channels; ++c) {
          const int64_t n = n0 + c;
          const int64_t centered =
              int64_t{tile_value(dots, r, c)} + int64_t{128 - p.zero_point} * sums[c];
          out[(2 * p0 + r) * n_total + n] =
              int8_output(p, centered, weight_scale[n], bias != nullptr ? bias[n] : 0.0f);
        }
      }
    }
  }
}

QuantizedLinearKernels neon_i8mm_kernels() {
  const QuantizedLinearKernels* dot = neon_dot_quantized_linear_kernels();
  QuantizedLinearKernels kernels = dot != nullptr ? *dot : *scalar_quantized_linear_kernels();
  kernels.isa = cpu::CpuIsa::kNeonI8mm;
  kernels.int8_rows = &int8_rows;
  kernels.linear_int8 = &linear_int8;
  return kernels;
}

}  // namespace
}  // namespace neon_i8mm

const QuantizedLinearKernels* neon_i8mm_quantized_linear_kernels() {
  static const QuantizedLinearKernels kernels = neon_i8mm::neon_i8mm_kernels();
  return &kernels;
}
#else
const QuantizedLinearKernels* neon_i8mm_quantized_linear_kernels() { return nullptr; }
#endif  // __aarch64__

}  // namespace my_ops::cpu_vec
