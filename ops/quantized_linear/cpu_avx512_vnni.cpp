// The quantized linear layers with AVX-512 VNNI: vpdpbusd multiplies 64 unsigned q bytes by 64
// signed weight bytes and adds each four adjacent products into 16 int32 lanes, exactly.

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "ops/common/cpu_unroll.h"
#include "ops/quantized_linear/cpu_avx512_tiles.h"
#include "ops/quantized_linear/cpu_common.h"
#include "ops/quantized_linear/cpu_vec.h"

namespace my_ops::cpu_vec {
#if defined(__x86_64__)
namespace avx512 {
namespace {

using detail::int4_output;
using detail::int8_output;
using detail::kNaN;
using detail::row_scale;
using detail::RowScale;

// The sums of the lanes of four vectors, as the four lanes of one: a transposing add tree, a
// third of the shuffles of four reductions, which at a decoding step's one row cost as much as
// the products of a short in_features.
MY_OPS_VNNI inline __m128i sum_lanes_of_four(__m512i a, __m512i b, __m512i c, __m512i d) {
  // Per 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3], and the same of c and d.
  const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  // Per 128-bit lane: the lane's sums of a, b, c and d.
  const __m512i abcd =
      _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  const __m256i halves =
      _mm256_add_epi32(_mm512_castsi512_si256(abcd), _mm512_extracti64x4_epi64(abcd, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(halves), _mm256_extracti128_si256(halves, 1));
}

// dots[r][c] = sum_i q[r * q_stride + i] * w[c * w_stride + i] over i < k: R rows by C channels
// at once, each weight step loaded once for the R rows. The channels are read one after the
// other, each row of weights from its start to its end: the C rows are adjacent, so the block is
// read in address order, a stream the hardware prefetcher follows. Reading the C channels' steps
// side by side (four streams in_features apart, which it does not follow) with software prefetches
// 8 channels ahead streamed SmolLM2's int8 weights at 8.7 GB/s at one row on a 2-core EPYC
// (weights out of cache); this order streams them at 17.3.
template <int R, int C>
MY_OPS_VNNI void int8_dots(const uint8_t* q, int64_t q_stride, const int8_t* w, int64_t w_stride,
                           int64_t k, int32_t (&dots)[4][4]) {
  __m512i acc[R][C];
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) acc[r][c] = _mm512_setzero_si512();
    for (int64_t i = 0; i < k; i += 64) {
      const __mmask64 mask = step_mask(k - i);
      const __m512i wv = _mm512_maskz_loadu_epi8(mask, w + c * w_stride + i);
      for (int r = 0; r < R; ++r) {
        acc[r][c] =
            _mm512_dpbusd_epi32(acc[r][c], _mm512_maskz_loadu_epi8(mask, q + r * q_stride + i), wv);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    if constexpr (C == 4) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dots[r]),
                       sum_lanes_of_four(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    } else {
      for (int c = 0; c < C; ++c) dots[r][c] = _mm512_reduce_add_epi32(acc[r][c]);
    }
  }
}

using Int8Dots = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t,
                          int32_t (&)[4][4]);

template <int R>
constexpr Int8Dots kInt8DotsForRows[4] = {&int8_dots<R, 1>, &int8_dots<R, 2>, &int8_dots<R, 3>,
                                          &int8_dots<R, 4>};
constexpr const Int8Dots* kInt8Dots[4] = {kInt8DotsForRows<1>, kInt8DotsForRows<2>,
                                          kInt8DotsForRows<3>, kInt8DotsForRows<4>};

void linear_int8_vnni(const uint8_t* q, const QuantizedRow* params, int64_t rows, int64_t k,
                      const int8_t* weight, const float* weight_scale, const float* bias,
                      float* out, int64_t n_total, int64_t n_begin, int64_t n_end) {
  // At up to 3 rows (a decoding step is 1) the products read each weight once, from memory, and
  // a pass of their own for the weights' sums would be that read: a row of ones after the rows
  // makes the sums in the products' pass instead, as one more row of the same block.
  const bool sums_from_products = rows < 4;
  std::vector<uint8_t> rows_and_ones;
  if (sums_from_products) {
    rows_and_ones.assign(static_cast<size_t>((rows + 1) * k), 1);
    std::memcpy(rows_and_ones.data(), q, static_cast<size_t>(rows * k));
  }
  int32_t dots[4][4];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += 4) {
    const int channels = static_cast<int>(std::min<int64_t>(4, n_end - n0));
    const int8_t* w = weight + n0 * k;
    int64_t w_sums[4];
    if (sums_from_products) {
      kInt8Dots[rows][channels - 1](rows_and_ones.data(), k, w, k, k, dots);
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < channels; ++c) {
          const int64_t n = n0 + c;
          out[r * n_total + n] = int8_output(params[r], dots[r][c], dots[rows][c], weight_scale[n],
                                             bias != nullptr ? bias[n] : 0.0f);
        }
      }
      continue;
    }
    for (int c = 0; c < channels; ++c) w_sums[c] = int8_weight_sum(w + c * k, k);
    for (int64_t m0 = 0; m0 < rows; m0 += 4) {
      const int block_rows = static_cast<int>(std::min<int64_t>(4, rows - m0));
      kInt8Dots[block_rows - 1][channels - 1](q + m0 * k, k, w, k, k, dots);
      for (int r = 0; r < block_rows; ++r) {
        for (int c = 0; c < channels; ++c) {
          const int64_t n = n0 + c;
          out[(m0 + r) * n_total + n] =
              int8_output(params[m0 + r], dots[r][c], w_sums[c], weight_scale[n],
                          bias != nullptr ? bias[n] : 0.0f);
        }
      }
    }
  }
}

// linear_int4 with AVX-512 VNNI. A step is 64 in_features: 32 weight bytes, whose low four bits
// (the even k) become the step's first 32 bytes and whose high four bits (the odd k) its last 32,
// so each row of q is permuted the same way once per call (int4_rows). The 16
// int32 lanes of a step's sums then cover k 0-31 (lanes 0-3 and 8-11) and k 32-63 (lanes 4-7 and
// 12-15): two groups of 32 at most, each lane scaled by its group's scale. A last step of 32
// in_features uses lanes 0-3 and 8-11 alone.
#define MY_OPS_VNNI_VL __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

constexpr __mmask16 kSecondGroupLanes = 0xF0F0;

// totals[r][c] = sum_g weight_scale[c, g] * sum_{k in g} (q[r, k] - zero[r]) * w[c, k].
template <int R, int C>
MY_OPS_VNNI_VL void int4_block(const uint8_t* ordered, int64_t ordered_stride,
                               const QuantizedRow* params, const uint8_t* w, int64_t w_stride,
                               const float* scales, int64_t groups, int64_t group_size, int64_t k,
                               float (&totals)[4][4]) {
  const __m256i low_bits = _mm256_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi8(8);
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i zero = _mm512_setzero_si512();
  __m512 zero_points[R];
  for (int r = 0; r < R; ++r)
    zero_points[r] = _mm512_set1_ps(static_cast<float>(params[r].zero_point));
  __m512 total[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) total[r][c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < k; i += 64) {
    const bool half = k - i < 64;
    const __mmask16 lanes = half ? __mmask16{0x0F0F} : __mmask16{0xFFFF};
    const __mmask32 bytes = half ? __mmask32{0xFFFF} : ~__mmask32{0};
    const int64_t first_group = i / group_size;
    const int64_t second_group = half ? first_group : (i + 32) / group_size;
    __m512i weights[C];
    __m512 weight_sums[C];
    __m512 step_scales[C];
    for (int c = 0; c < C; ++c) {
      const __m256i packed = _mm256_maskz_loadu_epi8(bytes, w + c * w_stride + i / 2);
      const __m256i even = _mm256_and_si256(packed, low_bits);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_bits);
      weights[c] = _mm512_sub_epi8(_mm512_inserti64x4(_mm512_castsi256_si512(even), odd, 1), eight);
      // Integers of at most 4 * 8 in magnitude: exact in float.
      weight_sums[c] = _mm512_cvtepi32_ps(_mm512_maskz_dpbusd_epi32(lanes, zero, ones, weights[c]));
      step_scales[c] =
          _mm512_mask_blend_ps(kSecondGroupLanes, _mm512_set1_ps(scales[c * groups + first_group]),
                               _mm512_set1_ps(scales[c * groups + second_group]));
    }
    for (int r = 0; r < R; ++r) {
      const __m512i x = _mm512_loadu_si512(ordered + r * ordered_stride + i);
      for (int c = 0; c < C; ++c) {
        const __m512i sums = _mm512_maskz_dpbusd_epi32(lanes, zero, x, weights[c]);
        // sum (q - zero) * w = sum q * w - zero * sum w, exact: integers below 2**24.
        const __m512 centered =
            _mm512_fnmadd_ps(zero_points[r], weight_sums[c], _mm512_cvtepi32_ps(sums));
        total[r][c] = _mm512_fmadd_ps(centered, step_scales[c], total[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) totals[r][c] = _mm512_reduce_add_ps(total[r][c]);
  }
}

using Int4Block = void (*)(const uint8_t*, int64_t, const QuantizedRow*, const uint8_t*, int64_t,
                           const float*, int64_t, int64_t, int64_t, float (&)[4][4]);

// Four rows by two channels: the sixteen float accumulators of four by four would not leave
// registers for the unpacked weights.
template <int R>
constexpr Int4Block kInt4BlocksForRows[2] = {&int4_block<R, 1>, &int4_block<R, 2>};
constexpr const Int4Block* kInt4Blocks[4] = {kInt4BlocksForRows<1>, kInt4BlocksForRows<2>,
                                             kInt4BlocksForRows<3>, kInt4BlocksForRows<4>};

void linear_int4_vnni(const uint8_t* ordered, const QuantizedRow* params, int64_t rows, int64_t k,
                      const uint8_t* weight, const float* weight_scale, int64_t group_size,
                      const float* bias, float* out, int64_t n_total, int64_t n_begin,
                      int64_t n_end) {
  const int64_t ordered_stride = (k + 63) / 64 * 64;
  const int64_t groups = k / group_size;
  float totals[4][4];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += 2) {
    const int channels = static_cast<int>(std::min<int64_t>(2, n_end - n0));
    for (int64_t m0 = 0; m0 < rows; m0 += 4) {
      const int block_rows = static_cast<int>(std::min<int64_t>(4, rows - m0));
      kInt4Blocks[block_rows - 1][channels - 1](
          ordered + m0 * ordered_stride, ordered_stride, params + m0, weight + n0 * (k / 2), k / 2,
          weight_scale + n0 * groups, groups, group_size, k, totals);
      for (int r = 0; r < block_rows; ++r) {
        const QuantizedRow& p = params[m0 + r];
        for (int c = 0; c < channels; ++c) {
          const int64_t n = n0 + c;
          out[(m0 + r) * n_total + n] =
              int4_output(p, totals[r][c], bias != nullptr ? bias[n] : 0.0f);
        }
      }
    }
  }
}

// q's rows as tiles of 16: tile t, step s (in_features 4s to 4s + 3), row t * 16 + l at bytes
// [t * 16 * k + s * 64 + l * 4, + 4), zero past the last row. k is a multiple of 4.
std::vector<uint8_t> tiles_of(const uint8_t* q, int64_t rows, int64_t k) {
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  std::vector<uint8_t> tiled(static_cast<size_t>(tiles * kTileRows * k), 0);
  for (int64_t m = 0; m < rows; ++m) {
    uint8_t* dst = tiled.data() + (m / kTileRows) * kTileRows * k + (m % kTileRows) * 4;
    const uint8_t* src = q + m * k;
    for (int64_t s = 0; s < k / 4; ++s) std::memcpy(dst + s * 64, src + s * 4, 4);
  }
  return tiled;
}

// What a block of channels needs beyond q: its weights as int8 rows of `w_stride` bytes, and for
// each channel c and group g (one group of k for int8) the group's scale and the sum of its
// weights, which takes the zero points out: sum (q - zero) * w = sum q * w - zero * sum w.
struct ChannelBlock {
  const int8_t* weights;
  int64_t w_stride;
  const float* scales;  // [c * groups + g]
  const int32_t* sums;  // [c * groups + g]
  const float* bias;    // [c], or null
  int64_t groups;
  int64_t group_steps;  // in_features / 4 per group
  // The next block's weights as stored, fetched into the cache while this block multiplies: at a
  // few tiles a block's products take about as long as its weights take to come from memory,
  // and without this the two ran one after the other.
  const uint8_t* next = nullptr;
  int64_t next_bytes = 0;
};

// acc += the four-byte dot products of x (unsigned) and w (signed), lane by lane. In assembly,
// which ties the accumulator to its register: with _mm512_dpbusd_epi32 GCC 12 copied each
// accumulator to another register and back on every step.
MY_OPS_VNNI inline __attribute__((always_inline)) void dpbusd(__m512i& acc, __m512i x, __m512i w) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
}

// dots[t][c] = sum over steps [first, first + steps) of q * w: tile t's rows by channel c.
template <int T, int C>
MY_OPS_VNNI inline __attribute__((always_inline)) void tile_dots(const uint8_t* tiles,
                                                                 int64_t tile_stride,
                                                                 const ChannelBlock& block,
                                                                 int64_t first, int64_t steps,
                                                                 __m512i (&dots)[T][C]) {
  MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) dots[t][c] = _mm512_setzero_si512();
  }
  for (int64_t s = first; s < first + steps; ++s) {
    // A line a step: a block's k / 4 steps cover its channels' k (int8) or k / 2 (int4) bytes.
    if (s * 64 < block.next_bytes) _mm_prefetch(block.next + s * 64, _MM_HINT_T0);
    __m512i x[T];
    MY_OPS_UNROLL for (int t = 0; t < T; ++t) x[t] =
        _mm512_loadu_si512(tiles + t * tile_stride + s * 64);
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      int32_t dword;
      std::memcpy(&dword, block.weights + c * block.w_stride + s * 4, 4);
      const __m512i w = _mm512_set1_epi32(dword);
      MY_OPS_UNROLL for (int t = 0; t < T; ++t) dpbusd(dots[t][c], x[t], w);
    }
  }
}

// sum_{k in g} (q - zero) * w = dots - zero * sum_{k in g} w, in int32 with wrap-around: the true
// difference fits (K <= 65536 for int8, a group's few bits for int4).
MY_OPS_VNNI inline __attribute__((always_inline)) __m512 centered(__m512i dots,
                                                                  const TileParams& params,
                                                                  int32_t w_sum) {
  const __m512i zero_times_sum =
      _mm512_mullo_epi32(_mm512_loadu_si512(params.zero_points), _mm512_set1_epi32(w_sum));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(dots, zero_times_sum));
}

// out[row, c] = row scale * total + bias for tile `params`'s rows, NaN for a row with a
// non-finite value; the rows are 16 outputs apart by n_total.
MY_OPS_VNNI inline __attribute__((always_inline)) void store_column(float* out, int64_t n_total,
                                                                    const TileParams& params,
                                                                    __m512 total, float bias) {
  const __m512i row_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(n_total)));
  __m512 value = _mm512_fmadd_ps(_mm512_loadu_ps(params.scales), total, _mm512_set1_ps(bias));
  value = _mm512_mask_mov_ps(_mm512_set1_ps(kNaN), params.finite, value);
  _mm512_mask_i32scatter_ps(out, params.rows, row_offsets, value, 4);
}

// out[row, c] for T tiles of rows and C channels: total = sum_g scale[c, g] *
// sum_{k in g} (q - zero) * w, exact integers until the scale. With one group (int8) the sums are
// scaled as they finish; with groups (int4) into float totals kept beside them.
template <int T, int C, bool Grouped>
MY_OPS_VNNI void tile_block(const uint8_t* tiles, int64_t tile_stride, const TileParams* params,
                            const ChannelBlock& block, float* out, int64_t n_total) {
  __m512i dots[T][C];
  if constexpr (!Grouped) {
    tile_dots<T, C>(tiles, tile_stride, block, 0, block.group_steps, dots);
    MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
      MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
        const __m512 total = _mm512_mul_ps(centered(dots[t][c], params[t], block.sums[c]),
                                           _mm512_set1_ps(block.scales[c]));
        store_column(out + t * kTileRows * n_total + c, n_total, params[t], total,
                     block.bias != nullptr ? block.bias[c] : 0.0f);
      }
    }
  } else {
    __m512 totals[T][C];
    MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
      MY_OPS_UNROLL for (int c = 0; c < C; ++c) totals[t][c] = _mm512_setzero_ps();
    }
    for (int64_t g = 0; g < block.groups; ++g) {
      tile_dots<T, C>(tiles, tile_stride, block, g * block.group_steps, block.group_steps, dots);
      MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
        const __m512 scale = _mm512_set1_ps(block.scales[c * block.groups + g]);
        MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
          totals[t][c] =
              _mm512_fmadd_ps(centered(dots[t][c], params[t], block.sums[c * block.groups + g]),
                              scale, totals[t][c]);
        }
      }
    }
    MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
      MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
        store_column(out + t * kTileRows * n_total + c, n_total, params[t], totals[t][c],
                     block.bias != nullptr ? block.bias[c] : 0.0f);
      }
    }
  }
}

// Two tiles at a time by a block of channels, the last tile and the last block of a range
// smaller. int8 runs one group, so its 24 int32 accumulators (2 tiles by 12 channels) are the only
// ones live in the loop; int4 scales each group into float totals, so its 2 by 6 keeps both sets
// (24 registers) in the 32 that AVX-512 has.
inline constexpr int kTilesAtOnce = 2;
inline constexpr int kInt8BlockChannels = 12;
inline constexpr int kInt4BlockChannels = 6;

using TileBlock = void (*)(const uint8_t*, int64_t, const TileParams*, const ChannelBlock&, float*,
                           int64_t);

template <int T, bool Grouped, size_t... C>
constexpr std::array<TileBlock, sizeof...(C)> tile_blocks_of(std::index_sequence<C...>) {
  return {&tile_block<T, static_cast<int>(C) + 1, Grouped>...};
}

template <int Channels, bool Grouped>
constexpr std::array<std::array<TileBlock, Channels>, kTilesAtOnce> kTileBlocks = {
    tile_blocks_of<1, Grouped>(std::make_index_sequence<Channels>()),
    tile_blocks_of<2, Grouped>(std::make_index_sequence<Channels>())};

// Runs `block_for(n0, channels)`'s block over every tile, for each block of channels in
// [n_begin, n_end).
// `weight` and `row_bytes`: the weights as stored, for fetching the next block ahead.
template <int Channels, bool Grouped, class BlockFor>
void tiled_products(const uint8_t* tiled, const QuantizedRow* params, int64_t rows, int64_t k,
                    const void* weight, int64_t row_bytes, float* out, int64_t n_total,
                    int64_t n_begin, int64_t n_end, const BlockFor& block_for) {
  const int64_t tile_stride = kTileRows * k;
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  const std::vector<TileParams> tile_parameters = tile_params_of(params, rows);
  for (int64_t n0 = n_begin; n0 < n_end; n0 += Channels) {
    const int channels = static_cast<int>(std::min<int64_t>(Channels, n_end - n0));
    ChannelBlock block = block_for(n0, channels);
    const int64_t next_channels = std::min<int64_t>(Channels, n_end - n0 - Channels);
    if (next_channels > 0) {
      block.next = static_cast<const uint8_t*>(weight) + (n0 + Channels) * row_bytes;
      block.next_bytes = next_channels * row_bytes;
    }
    for (int64_t t0 = 0; t0 < tiles; t0 += kTilesAtOnce) {
      const int at_once = static_cast<int>(std::min<int64_t>(kTilesAtOnce, tiles - t0));
      kTileBlocks<Channels, Grouped>[at_once - 1][channels - 1](
          tiled + t0* tile_stride, tile_stride, tile_parameters.data() + t0, block,
          out + t0* kTileRows* n_total + n0, n_total);
    }
  }
}
void linear_int8_tiles(const uint8_t* tiles, const QuantizedRow* params, int64_t rows, int64_t k,
                       const int8_t* weight, const float* weight_scale, const float* bias,
                       float* out, int64_t n_total, int64_t n_begin, int64_t n_end) {
  int32_t sums[kInt8BlockChannels];
  tiled_products<kInt8BlockChannels, false>(
      tiles, params, rows, k, weight, k, out, n_total, n_begin, n_end,
      [&](int64_t n0, int channels) {
        // |sum| <= 128 * K: an int32 for every K the op takes.
        for (int c = 0; c < channels; ++c) {
          sums[c] = static_cast<int32_t>(int8_weight_sum(weight + (n0 + c) * k, k));
        }
        return ChannelBlock{weight + n0 * k,
                            k,
                            weight_scale + n0,
                            sums,
                            bias != nullptr ? bias + n0 : nullptr,
                            1,
                            k / 4};
      });
}

// Rows [0, channels) of int4 weights as int8 in in_feature order, and each group's sum.
MY_OPS_VNNI void unpack_int4_rows(const uint8_t* weight, int64_t k, int64_t group_size,
                                  int channels, int8_t* unpacked, int32_t* sums) {
  const __m128i low_bits = _mm_set1_epi8(0x0F);
  const __m128i eight = _mm_set1_epi8(8);
  const __m128i zero = _mm_setzero_si128();
  const int64_t groups = k / group_size;
  for (int c = 0; c < channels; ++c) {
    const uint8_t* row = weight + c * (k / 2);
    int8_t* dst = unpacked + c * k;
    for (int64_t g = 0; g < groups; ++g) {
      int32_t sum = 0;
      for (int64_t i = g * group_size; i < (g + 1) * group_size; i += 32) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i / 2));
        const __m128i even = _mm_and_si128(bytes, low_bits);
        const __m128i odd = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_bits);
        // Byte j holds in_features 2j (low bits) and 2j + 1: interleaving restores their order.
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm_sub_epi8(_mm_unpacklo_epi8(even, odd), eight));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 16),
                         _mm_sub_epi8(_mm_unpackhi_epi8(even, odd), eight));
        const __m128i stored = _mm_add_epi64(_mm_sad_epu8(even, zero), _mm_sad_epu8(odd, zero));
        sum += _mm_cvtsi128_si32(stored) + _mm_extract_epi32(stored, 2) - 8 * 32;
      }
      sums[c * groups + g] = sum;
    }
  }
}

void linear_int4_tiles(const uint8_t* tiles, const QuantizedRow* params, int64_t rows, int64_t k,
                       const uint8_t* weight, const float* weight_scale, int64_t group_size,
                       const float* bias, float* out, int64_t n_total, int64_t n_begin,
                       int64_t n_end) {
  const int64_t groups = k / group_size;
  std::vector<int8_t> unpacked(static_cast<size_t>(kInt4BlockChannels * k));
  std::vector<int32_t> sums(static_cast<size_t>(kInt4BlockChannels * groups));
  tiled_products<kInt4BlockChannels, true>(
      tiles, params, rows, k, weight, k / 2, out, n_total, n_begin, n_end,
      [&](int64_t n0, int channels) {
        unpack_int4_rows(weight + n0 * (k / 2), k, group_size, channels, unpacked.data(),
                         sums.data());
        return ChannelBlock{unpacked.data(),
                            k,
                            weight_scale + n0 * groups,
                            sums.data(),
                            bias != nullptr ? bias + n0 : nullptr,
                            groups,
                            group_size / 4};
      });
}

// quantize_rows' row with AVX-512: the same float operations in the same order per element, so
// the same q; only min and max are reduced in another order, which cannot change them.
MY_OPS_VNNI QuantizedRow quantize_row_avx512(const float* row, int64_t k, uint8_t* q_row) {
  __m512 lo = _mm512_setzero_ps();
  __m512 hi = _mm512_setzero_ps();
  __m512 poison = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 mask = k - i >= 16 ? __mmask16{0xFFFF} : (__mmask16{1} << (k - i)) - 1;
    const __m512 v = _mm512_maskz_loadu_ps(mask, row + i);
    lo = _mm512_min_ps(v, lo);
    hi = _mm512_max_ps(v, hi);
    poison = _mm512_add_ps(poison, _mm512_mul_ps(v, _mm512_setzero_ps()));
  }
  const float low = _mm512_reduce_min_ps(lo);
  const float range = _mm512_reduce_max_ps(hi) - low;
  if (_mm512_reduce_add_ps(poison) != 0.0f || !(range <= std::numeric_limits<float>::max())) {
    std::memset(q_row, 0, static_cast<size_t>(k));
    return {1.0f, 0, false};
  }
  const RowScale rs = row_scale(low, range);
  const __m512 inverse_v = _mm512_set1_ps(rs.inverse);
  const __m512i zero_v = _mm512_set1_epi32(rs.zero_point);
  const __m512i min_q = _mm512_setzero_si512();
  const __m512i max_q = _mm512_set1_epi32(255);
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 mask = k - i >= 16 ? __mmask16{0xFFFF} : (__mmask16{1} << (k - i)) - 1;
    const __m512 scaled = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, row + i), inverse_v);
    const __m512i rounded = _mm512_cvtps_epi32(
        _mm512_roundscale_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m512i clamped =
        _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(rounded, zero_v), min_q), max_q);
    _mm512_mask_cvtepi32_storeu_epi8(q_row + i, mask, clamped);
  }
  return {rs.scale, rs.zero_point, true};
}

void quantize_rows(const float* x, int64_t k, int64_t begin, int64_t end, uint8_t* q,
                   QuantizedRow* params) {
  for (int64_t r = begin; r < end; ++r) params[r] = quantize_row_avx512(x + r * k, k, q + r * k);
}

// Below kMinTileRows rows, the per-row blocks read q in the steps' order.
std::vector<uint8_t> int4_rows(const uint8_t* q, const QuantizedRow* params, int64_t rows,
                               int64_t k, int64_t) {
  if (rows >= kMinTileRows) return tiles_of(q, rows, k);  // k is a multiple of 32
  (void)params;
  return detail::int4_step_order<64>(q, rows, k, 0);
}

void linear_int8(const uint8_t* q, const uint8_t* rows_layout, const QuantizedRow* params,
                 int64_t rows, int64_t k, const int8_t* weight, const float* weight_scale,
                 const float* bias, float* out, int64_t n_total, int64_t n_begin, int64_t n_end) {
  if (rows_layout != nullptr) {
    linear_int8_tiles(rows_layout, params, rows, k, weight, weight_scale, bias, out, n_total,
                      n_begin, n_end);
    return;
  }
  linear_int8_vnni(q, params, rows, k, weight, weight_scale, bias, out, n_total, n_begin, n_end);
}

void linear_int4(const uint8_t*, const uint8_t* rows_layout, const QuantizedRow* params,
                 int64_t rows, int64_t k, const uint8_t* weight, const float* weight_scale,
                 int64_t group_size, const float* bias, float* out, int64_t n_total,
                 int64_t n_begin, int64_t n_end) {
  if (rows >= kMinTileRows) {
    linear_int4_tiles(rows_layout, params, rows, k, weight, weight_scale, group_size, bias, out,
                      n_total, n_begin, n_end);
    return;
  }
  linear_int4_vnni(rows_layout, params, rows, k, weight, weight_scale, group_size, bias, out,
                   n_total, n_begin, n_end);
}

__attribute__((target("avx512f"))) void halves_to_floats(const uint16_t* bits, int64_t count,
                                                         float* out) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  for (; i < count; ++i) out[i] = _cvtsh_ss(bits[i]);
}

constexpr QuantizedLinearKernels kAvx512Vnni = {
    cpu::CpuIsa::kAvx512Vnni, &quantize_rows, &int8_rows, &int4_rows, &linear_int8, &linear_int4,
    &halves_to_floats,
};

}  // namespace

std::vector<uint8_t> int8_rows(const uint8_t* q, const QuantizedRow*, int64_t rows, int64_t k) {
  if (rows >= kMinTileRows && k % 4 == 0) return tiles_of(q, rows, k);
  return {};
}

}  // namespace avx512

const QuantizedLinearKernels* avx512_vnni_quantized_linear_kernels() {
  return &avx512::kAvx512Vnni;
}
#else
const QuantizedLinearKernels* avx512_vnni_quantized_linear_kernels() { return nullptr; }
#endif  // __x86_64__

}  // namespace my_ops::cpu_vec
