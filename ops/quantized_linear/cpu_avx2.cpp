// The quantized linear layers with AVX2 (x86-64-v3, the library's baseline: no target attribute).
//
// Exact integer sums without a saturating step. vpmaddubsw adds two u8 x s8 products into a
// saturating int16 (2 x 255 x 127 > 32767), so neither op feeds it q against an int8 weight:
// - linear_int8 widens: q's rows are centered once per call, (q - zero) in int16 ([-255, 255]),
//   each weight is sign-extended to int16, and vpmaddwd adds product pairs into int32 exactly
//   (2 x 255 x 128 < 2^31; the sums fit for K up to kMaxInt8InFeatures). No weight sums needed.
// - linear_int4 keeps bytes: its weights are in [-8, 7], so vpmaddubsw's pairs stay within
//   2 x 255 x 8, exact; vpmaddwd with ones widens them to int32. The weights' sums, made in the
//   same pass, take the zero point out.

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "ops/common/cpu_unroll.h"
#include "ops/quantized_linear/cpu_common.h"
#include "ops/quantized_linear/cpu_vec.h"

namespace my_ops::cpu_vec {
#if defined(__x86_64__)
namespace avx2 {
namespace {

using detail::int4_output;
using detail::int8_output;
using detail::kNaN;
using detail::round_to_int;
using detail::row_scale;
using detail::RowScale;

inline int32_t sum_lanes(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline float sum_lanes(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// quantize_rows' row: the scalar code's float operations per element, so the same q; min and max
// are reduced in another order, which cannot change them.
QuantizedRow quantize_row(const float* row, int64_t k, uint8_t* q_row) {
  __m256 lo_v = _mm256_setzero_ps();
  __m256 hi_v = _mm256_setzero_ps();
  __m256 poison_v = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 v = _mm256_loadu_ps(row + i);
    lo_v = _mm256_min_ps(v, lo_v);
    hi_v = _mm256_max_ps(v, hi_v);
    poison_v = _mm256_add_ps(poison_v, _mm256_mul_ps(v, _mm256_setzero_ps()));
  }
  alignas(32) float lanes[3][8];
  _mm256_store_ps(lanes[0], lo_v);
  _mm256_store_ps(lanes[1], hi_v);
  _mm256_store_ps(lanes[2], poison_v);
  float lo = 0.0f;
  float hi = 0.0f;
  float poison = 0.0f;
  for (int l = 0; l < 8; ++l) {
    lo = lanes[0][l] < lo ? lanes[0][l] : lo;
    hi = lanes[1][l] > hi ? lanes[1][l] : hi;
    poison += lanes[2][l];
  }
  for (int64_t j = i; j < k; ++j) {
    lo = row[j] < lo ? row[j] : lo;
    hi = row[j] > hi ? row[j] : hi;
    poison += row[j] * 0.0f;
  }
  const float range = hi - lo;
  if (poison != 0.0f || !(range <= std::numeric_limits<float>::max())) {
    std::memset(q_row, 0, static_cast<size_t>(k));
    return {1.0f, 0, false};
  }
  const RowScale rs = row_scale(lo, range);
  const __m256 inverse = _mm256_set1_ps(rs.inverse);
  const __m256i zero = _mm256_set1_epi32(rs.zero_point);
  const __m256i max_q = _mm256_set1_epi32(255);
  const __m256i byte_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  auto quantize8 = [&](const float* p) {
    const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(p), inverse);
    const __m256i rounded =
        _mm256_cvtps_epi32(_mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return _mm256_min_epi32(
        _mm256_max_epi32(_mm256_add_epi32(rounded, zero), _mm256_setzero_si256()), max_q);
  };
  i = 0;
  for (; i + 32 <= k; i += 32) {
    const __m256i ab = _mm256_packus_epi32(quantize8(row + i), quantize8(row + i + 8));
    const __m256i cd = _mm256_packus_epi32(quantize8(row + i + 16), quantize8(row + i + 24));
    // packus works within 128-bit lanes: the permutation puts the 32 bytes back in order.
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), byte_order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q_row + i), bytes);
  }
  for (; i < k; ++i) {
    q_row[i] =
        static_cast<uint8_t>(std::clamp(round_to_int(row[i] * rs.inverse) + rs.zero_point, 0, 255));
  }
  return {rs.scale, rs.zero_point, true};
}

void quantize_rows(const float* x, int64_t k, int64_t begin, int64_t end, uint8_t* q,
                   QuantizedRow* params) {
  for (int64_t r = begin; r < end; ++r) params[r] = quantize_row(x + r * k, k, q + r * k);
}

// linear_int8's rows: (q - zero) as int16, each row padded with zeros to a multiple of 16.
constexpr int64_t kInt8Step = 16;

int64_t padded_k(int64_t k) { return (k + kInt8Step - 1) / kInt8Step * kInt8Step; }

// From this many rows the products run on tiles of 8 rows (int8_tile_block), below it on rows
// (int8_block).
constexpr int64_t kMinTileRows = 8;
constexpr int kTileRows = 8;

// Tile rows [8 rows from q, 16 in_features]: each row's 16 bytes widened and centered (8 pairs of
// int16, a 32-bit unit each), then the 8 x 8 units transposed, so that pair j's vector holds the
// 8 rows' units in row order; stored at dst + 16 * j.
inline void tile_pairs8(const uint8_t* q, int64_t k, const __m256i (&zero)[kTileRows],
                        int16_t* dst) {
  __m256i r[kTileRows];
  MY_OPS_UNROLL for (int l = 0; l < kTileRows; ++l) {
    r[l] = _mm256_sub_epi16(
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + l * k))),
        zero[l]);
  }
  // Units within 128-bit lanes: [a0 b0 a1 b1 | a4 b4 a5 b5], then four rows [a0 b0 c0 d0 | a4 ..],
  // then the lanes of rows 0-3 and 4-7 joined.
  __m256i two[kTileRows];
  MY_OPS_UNROLL for (int l = 0; l < kTileRows; l += 2) {
    two[l] = _mm256_unpacklo_epi32(r[l], r[l + 1]);
    two[l + 1] = _mm256_unpackhi_epi32(r[l], r[l + 1]);
  }
  __m256i four[kTileRows];
  MY_OPS_UNROLL for (int h = 0; h < 2; ++h) {
    const int l = 4 * h;
    four[l] = _mm256_unpacklo_epi64(two[l], two[l + 2]);          // units 0 and 4
    four[l + 1] = _mm256_unpackhi_epi64(two[l], two[l + 2]);      // units 1 and 5
    four[l + 2] = _mm256_unpacklo_epi64(two[l + 1], two[l + 3]);  // units 2 and 6
    four[l + 3] = _mm256_unpackhi_epi64(two[l + 1], two[l + 3]);  // units 3 and 7
  }
  MY_OPS_UNROLL for (int j = 0; j < 4; ++j) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16 * j),
                        _mm256_permute2x128_si256(four[j], four[4 + j], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16 * (j + 4)),
                        _mm256_permute2x128_si256(four[j], four[4 + j], 0x31));
  }
}

// linear_int8's rows, (q - zero) as int16. Below kMinTileRows, row by row, each row padded with
// zeros to a multiple of 16. From it, in tiles of 8 rows: tile t, pair p (in_features 2p and
// 2p + 1) at int16 [(t * pairs + p) * 16 + 2 * l, + 2) for its row l, zeros past the last row and
// the last in_feature: one load gives 8 rows' pairs, for vpmaddwd against one channel's pair.
std::vector<uint8_t> int8_rows(const uint8_t* q, const QuantizedRow* params, int64_t rows,
                               int64_t k) {
  const bool tiled = rows >= kMinTileRows;
  const int64_t stride = tiled ? (k + 1) / 2 * 2 : padded_k(k);
  const int64_t padded_rows = tiled ? (rows + kTileRows - 1) / kTileRows * kTileRows : rows;
  std::vector<uint8_t> bytes(static_cast<size_t>(padded_rows * stride) * sizeof(int16_t), 0);
  int16_t* centered = reinterpret_cast<int16_t*>(bytes.data());
  const int64_t pairs = stride / 2;
  // Full tiles, 16 in_features at a time; the rest below, an element at a time.
  const int64_t full_tiles = tiled ? rows / kTileRows : 0;
  const int64_t vector_k = k / 16 * 16;
  for (int64_t t = 0; t < full_tiles; ++t) {
    __m256i zero[kTileRows];
    MY_OPS_UNROLL for (int l = 0; l < kTileRows; ++l) {
      zero[l] = _mm256_set1_epi16(static_cast<int16_t>(params[t * kTileRows + l].zero_point));
    }
    for (int64_t i = 0; i < vector_k; i += 16) {
      tile_pairs8(q + t * kTileRows * k + i, k, zero, centered + (t * pairs + i / 2) * 16);
    }
  }
  for (int64_t m = 0; m < rows; ++m) {
    const int16_t zero = static_cast<int16_t>(params[m].zero_point);
    for (int64_t i = m < full_tiles * kTileRows ? vector_k : 0; i < k; ++i) {
      const int16_t value = static_cast<int16_t>(int16_t{q[m * k + i]} - zero);
      if (tiled) {
        const int64_t t = m / kTileRows, l = m % kTileRows;
        centered[((t * pairs + i / 2) * kTileRows + l) * 2 + i % 2] = value;
      } else {
        centered[m * stride + i] = value;
      }
    }
  }
  return bytes;
}

// 16 weights of a channel as int16.
inline __m256i widen_weights(const int8_t* w) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
}

// sums[r][c] = sum_i centered[r, i] * w[c, i]: R rows by C channels, each weight step widened
// once for the R rows. The last k % 16 weights are read through a copy padded with zeros, never
// past the weights' end (the rows are padded with zeros already).
template <int R, int C>
void int8_block(const int16_t* centered, int64_t stride, const int8_t* w, int64_t k,
                int32_t (&sums)[4][4]) {
  if constexpr (R == 1) {
    // One row (decoding): each channel's weights from start to end in turn, so that the block
    // is read in address order (its channels' rows are adjacent), one stream the hardware
    // prefetcher follows; the channels stepped side by side were C streams k bytes apart.
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      const int8_t* wc = w + c * k;
      const auto product = [&](int64_t i, const int8_t* weights) {
        return _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(centered + i)),
                                 widen_weights(weights));
      };
      // Two accumulators: each step's add waits on the one before it otherwise.
      __m256i even = _mm256_setzero_si256();
      __m256i odd = _mm256_setzero_si256();
      int64_t i = 0;
      for (; i + 2 * kInt8Step <= k; i += 2 * kInt8Step) {
        even = _mm256_add_epi32(even, product(i, wc + i));
        odd = _mm256_add_epi32(odd, product(i + kInt8Step, wc + i + kInt8Step));
      }
      for (; i + kInt8Step <= k; i += kInt8Step) even = _mm256_add_epi32(even, product(i, wc + i));
      if (i < k) {
        alignas(16) int8_t tail[kInt8Step] = {};
        std::memcpy(tail, wc + i, static_cast<size_t>(k - i));
        odd = _mm256_add_epi32(odd, product(i, tail));
      }
      sums[0][c] = sum_lanes(_mm256_add_epi32(even, odd));
    }
    return;
  }
  __m256i acc[R][C];
  MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_si256();
  }
  const auto step = [&](int64_t i, const int8_t*(&weights)[C]) {
    __m256i x[R];
    MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
      x[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(centered + r * stride + i));
    }
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      const __m256i wv = widen_weights(weights[c]);
      MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
        acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(x[r], wv));
      }
    }
  };
  int64_t i = 0;
  for (; i + kInt8Step <= k; i += kInt8Step) {
    const int8_t* weights[C];
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) weights[c] = w + c * k + i;
    step(i, weights);
  }
  if (i < k) {
    alignas(16) int8_t tails[C][kInt8Step] = {};
    const int8_t* weights[C];
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      std::memcpy(tails[c], w + c * k + i, static_cast<size_t>(k - i));
      weights[c] = tails[c];
    }
    step(i, weights);
  }
  MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = sum_lanes(acc[r][c]);
  }
}

using Int8Block = void (*)(const int16_t*, int64_t, const int8_t*, int64_t, int32_t (&)[4][4]);

// [rows - 1][channels - 1]: R rows by C channels with R * C accumulators, R rows and a widened
// weight within AVX2's 16 registers (4 by 2, 3 by 3, 2 by 4, 1 by 4).
constexpr int kInt8Channels[4] = {4, 4, 3, 2};
constexpr Int8Block kInt8Blocks[4][4] = {
    {&int8_block<1, 1>, &int8_block<1, 2>, &int8_block<1, 3>, &int8_block<1, 4>},
    {&int8_block<2, 1>, &int8_block<2, 2>, &int8_block<2, 3>, &int8_block<2, 4>},
    {&int8_block<3, 1>, &int8_block<3, 2>, &int8_block<3, 3>, nullptr},
    {&int8_block<4, 1>, &int8_block<4, 2>, nullptr, nullptr},
};

// The products on tiles of 8 rows: vpmaddwd of a tile's pair of in_features (8 rows in the
// lanes) by one channel's pair broadcast to every lane, so that no sum is reduced across lanes and
// each weight pair serves 8 rows. The weights are widened to int16 a block of channels at a
// time, once per call (w16: [channels][pairs * 2]). T tiles by C channels: 12 accumulators, the
// tiles and a broadcast in 16 registers.
constexpr int kTilesAtOnce = 2;
constexpr int kTileChannels = 6;

// acc[t][c] = sum over the in_feature pairs [first, last) of tile t's rows (8 in the lanes) by
// channel c's pair, broadcast: each weight pair serves 8 rows, and no sum is reduced across lanes.
// Pair p also prefetches next + p * next_step: the next block's weights arrive spread over this
// block's products; a burst of prefetches before them stalled on the cache's miss buffers.
template <int T, int C>
inline __attribute__((always_inline)) void tile_pair_sums(const int16_t* tiles, int64_t tile_stride,
                                                          const int16_t* w16, int64_t pairs,
                                                          int64_t first, int64_t last,
                                                          const char* next, int64_t next_step,
                                                          __m256i (&acc)[T][C]) {
  MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) acc[t][c] = _mm256_setzero_si256();
  }
  for (int64_t p = first; p < last; ++p) {
    _mm_prefetch(next + p * next_step, _MM_HINT_T0);
    __m256i x[T];
    MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
      x[t] = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(tiles + t * tile_stride + p * 2 * kTileRows));
    }
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      int32_t pair;
      std::memcpy(&pair, w16 + c * pairs * 2 + p * 2, sizeof(pair));
      const __m256i wv = _mm256_set1_epi32(pair);
      MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
        acc[t][c] = _mm256_add_epi32(acc[t][c], _mm256_madd_epi16(x[t], wv));
      }
    }
  }
}

template <int T, int C>
void int8_tile_block(const int16_t* tiles, int64_t tile_stride, const int16_t* w16, int64_t pairs,
                     const char* next, __m256i (&dots)[kTilesAtOnce][kTileChannels]) {
  __m256i acc[T][C];
  // The next block is kTileChannels channels of 2 * pairs bytes: 2 * kTileChannels per pair.
  tile_pair_sums<T, C>(tiles, tile_stride, w16, pairs, 0, pairs, next, 2 * kTileChannels, acc);
  MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) dots[t][c] = acc[t][c];
  }
}

using Int8TileBlock = void (*)(const int16_t*, int64_t, const int16_t*, int64_t, const char*,
                               __m256i (&)[kTilesAtOnce][kTileChannels]);

template <int T, size_t... C>
constexpr std::array<Int8TileBlock, sizeof...(C)> tile_blocks_of(std::index_sequence<C...>) {
  return {&int8_tile_block<T, static_cast<int>(C) + 1>...};
}

constexpr std::array<std::array<Int8TileBlock, kTileChannels>, kTilesAtOnce> kInt8TileBlocks = {
    tile_blocks_of<1>(std::make_index_sequence<kTileChannels>()),
    tile_blocks_of<2>(std::make_index_sequence<kTileChannels>())};

void linear_int8_tiles(const int16_t* tiles, const QuantizedRow* params, int64_t rows, int64_t k,
                       const int8_t* weight, const float* weight_scale, const float* bias,
                       float* out, int64_t n_total, int64_t n_begin, int64_t n_end) {
  const int64_t pairs = (k + 1) / 2;
  const int64_t tile_stride = pairs * 2 * kTileRows;
  const int64_t tile_count = (rows + kTileRows - 1) / kTileRows;
  std::vector<int16_t> w16(static_cast<size_t>(kTileChannels * pairs * 2), 0);
  __m256i dots[kTilesAtOnce][kTileChannels];
  alignas(32) int32_t lanes[kTileRows];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kTileChannels) {
    const int channels = static_cast<int>(std::min<int64_t>(kTileChannels, n_end - n0));
    for (int c = 0; c < channels; ++c) {
      const int8_t* w = weight + (n0 + c) * k;
      int16_t* dst = w16.data() + c * pairs * 2;
      int64_t i = 0;
      for (; i + 16 <= k; i += 16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), widen_weights(w + i));
      }
      for (; i < k; ++i) dst[i] = w[i];
    }
    // The next block's weights come from memory while this block's tiles compute (widening
    // them would otherwise wait on every line); the last block asks for its own again, which
    // are in cache (a prefetch never faults, so reaching past the weights' end is harmless).
    const int64_t next_n = n0 + kTileChannels < n_end ? n0 + kTileChannels : n0;
    const int8_t* next = weight + next_n * k;
    for (int64_t t0 = 0; t0 < tile_count; t0 += kTilesAtOnce) {
      const int at_once = static_cast<int>(std::min<int64_t>(kTilesAtOnce, tile_count - t0));
      kInt8TileBlocks[at_once - 1][channels - 1](tiles + t0 * tile_stride, tile_stride, w16.data(),
                                                 pairs, reinterpret_cast<const char*>(next), dots);
      for (int t = 0; t < at_once; ++t) {
        const int64_t m0 = (t0 + t) * kTileRows;
        const int present = static_cast<int>(std::min<int64_t>(kTileRows, rows - m0));
        for (int c = 0; c < channels; ++c) {
          const int64_t n = n0 + c;
          _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), dots[t][c]);
          for (int l = 0; l < present; ++l) {
            out[(m0 + l) * n_total + n] =
                int8_output(params[m0 + l], int64_t{lanes[l]}, weight_scale[n],
                            bias != nullptr ? bias[n] : 0.0f);
          }
        }
      }
    }
  }
}

void linear_int8(const uint8_t*, const uint8_t* rows_layout, const QuantizedRow* params,
                 int64_t rows, int64_t k, const int8_t* weight, const float* weight_scale,
                 const float* bias, float* out, int64_t n_total, int64_t n_begin, int64_t n_end) {
  if (rows == 0) return;
  const int16_t* centered = reinterpret_cast<const int16_t*>(rows_layout);
  if (rows >= kMinTileRows) {
    linear_int8_tiles(centered, params, rows, k, weight, weight_scale, bias, out, n_total, n_begin,
                      n_end);
    return;
  }
  const int64_t stride = padded_k(k);
  const int64_t row_block = std::min<int64_t>(rows, 4);
  const int64_t channel_block = kInt8Channels[row_block - 1];
  int32_t sums[4][4];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += channel_block) {
    const int channels = static_cast<int>(std::min<int64_t>(channel_block, n_end - n0));
    for (int64_t m0 = 0; m0 < rows; m0 += 4) {
      const int block_rows = static_cast<int>(std::min<int64_t>(4, rows - m0));
      kInt8Blocks[block_rows - 1][channels - 1](centered + m0 * stride, stride, weight + n0 * k, k,
                                                sums);
      MY_OPS_UNROLL for (int r = 0; r < block_rows; ++r) {
        MY_OPS_UNROLL for (int c = 0; c < channels; ++c) {
          const int64_t n = n0 + c;
          out[(m0 + r) * n_total + n] =
              int8_output(params[m0 + r], int64_t{sums[r][c]}, weight_scale[n],
                          bias != nullptr ? bias[n] : 0.0f);
        }
      }
    }
  }
}

// linear_int4's rows: q in the steps' order. A step is 32 in_features, 16 weight bytes, whose low
// four bits (the even k) pair with the step's first 16 bytes of q and whose high four bits (the
// odd k) with its last 16. k is a multiple of 32 (group sizes are).
constexpr int64_t kInt4Step = 32;

// From kMinTileRows rows, int8's tiles of centered rows (k is even); below, the steps' order.
std::vector<uint8_t> int4_rows(const uint8_t* q, const QuantizedRow* params, int64_t rows,
                               int64_t k, int64_t) {
  if (rows >= kMinTileRows) return int8_rows(q, params, rows, k);
  return detail::int4_step_order<kInt4Step>(q, rows, k, 0);
}

// linear_int4 on tiles of 8 rows, as int8's: the weights unpacked to int16 a block of channels
// at a time, each group's exact int32 lanes scaled into float totals as the group ends. T tiles
// by C channels: 6 int32 sums and 6 float totals, the tiles and a broadcast in 16 registers.
constexpr int kInt4TileChannels = 3;

template <int T, int C>
void int4_tile_block(const int16_t* tiles, int64_t tile_stride, const int16_t* w16, int64_t pairs,
                     const float* scales, int64_t groups, int64_t group_pairs, const char* next,
                     __m256 (&totals)[kTilesAtOnce][kInt4TileChannels]) {
  __m256 total[T][C];
  MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) total[t][c] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m256i acc[T][C];
    // The next block is kInt4TileChannels channels of pairs bytes.
    tile_pair_sums<T, C>(tiles, tile_stride, w16, pairs, g * group_pairs, (g + 1) * group_pairs,
                         next, kInt4TileChannels, acc);
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      const __m256 scale = _mm256_set1_ps(scales[c * groups + g]);
      MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
        total[t][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t][c]), scale, total[t][c]);
      }
    }
  }
  MY_OPS_UNROLL for (int t = 0; t < T; ++t) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) totals[t][c] = total[t][c];
  }
}

using Int4TileBlock = void (*)(const int16_t*, int64_t, const int16_t*, int64_t, const float*,
                               int64_t, int64_t, const char*,
                               __m256 (&)[kTilesAtOnce][kInt4TileChannels]);

template <int T, size_t... C>
constexpr std::array<Int4TileBlock, sizeof...(C)> int4_tile_blocks_of(std::index_sequence<C...>) {
  return {&int4_tile_block<T, static_cast<int>(C) + 1>...};
}

constexpr std::array<std::array<Int4TileBlock, kInt4TileChannels>, kTilesAtOnce> kInt4TileBlocks = {
    int4_tile_blocks_of<1>(std::make_index_sequence<kInt4TileChannels>()),
    int4_tile_blocks_of<2>(std::make_index_sequence<kInt4TileChannels>())};

void linear_int4_tiles(const int16_t* tiles, const QuantizedRow* params, int64_t rows, int64_t k,
                       const uint8_t* weight, const float* weight_scale, int64_t group_size,
                       const float* bias, float* out, int64_t n_total, int64_t n_begin,
                       int64_t n_end) {
  const int64_t pairs = k / 2;
  const int64_t groups = k / group_size;
  const int64_t tile_stride = pairs * 2 * kTileRows;
  const int64_t tile_count = (rows + kTileRows - 1) / kTileRows;
  std::vector<int16_t> w16(static_cast<size_t>(kInt4TileChannels * k));
  __m256 totals[kTilesAtOnce][kInt4TileChannels];
  alignas(32) float lanes[kTileRows];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kInt4TileChannels) {
    const int channels = static_cast<int>(std::min<int64_t>(kInt4TileChannels, n_end - n0));
    for (int c = 0; c < channels; ++c) {
      const uint8_t* packed = weight + (n0 + c) * (k / 2);
      int16_t* dst = w16.data() + c * k;
      for (int64_t j = 0; j < k / 2; ++j) {
        dst[2 * j] = static_cast<int16_t>((packed[j] & 15) - 8);
        dst[2 * j + 1] = static_cast<int16_t>((packed[j] >> 4) - 8);
      }
    }
    // As int8's: the next block's weights, or the last block's own again.
    const int64_t next_n = n0 + kInt4TileChannels < n_end ? n0 + kInt4TileChannels : n0;
    const uint8_t* next = weight + next_n * (k / 2);
    for (int64_t t0 = 0; t0 < tile_count; t0 += kTilesAtOnce) {
      const int at_once = static_cast<int>(std::min<int64_t>(kTilesAtOnce, tile_count - t0));
      kInt4TileBlocks[at_once - 1][channels - 1](
          tiles + t0 * tile_stride, tile_stride, w16.data(), pairs, weight_scale + n0 * groups,
          groups, group_size / 2, reinterpret_cast<const char*>(next), totals);
      for (int t = 0; t < at_once; ++t) {
        const int64_t m0 = (t0 + t) * kTileRows;
        const int present = static_cast<int>(std::min<int64_t>(kTileRows, rows - m0));
        for (int c = 0; c < channels; ++c) {
          const int64_t n = n0 + c;
          const float b = bias != nullptr ? bias[n] : 0.0f;
          _mm256_store_ps(lanes, totals[t][c]);
          for (int l = 0; l < present; ++l) {
            const QuantizedRow& p = params[m0 + l];
            out[(m0 + l) * n_total + n] = int4_output(p, lanes[l], b);
          }
        }
      }
    }
  }
}

// totals[r][c] = sum_g scale[c, g] * sum_{k in g} (q[r, k] - zero[r]) * w[c, k]. Each step's
// int32 lanes are exact integers below 2^24, and so is a lane's q * w minus zero times its weights'
// sum: it is centered exactly, in float, before its group's scale (as the VNNI kernels do; taking
// zero * sum_g scale * sum w out at the end instead lost up to 0.2 % to cancellation at K 4160).
template <int R, int C>
void int4_block(const uint8_t* ordered, int64_t k, const QuantizedRow* params, const uint8_t* w,
                const float* scales, int64_t group_size, float (&totals)[4][4]) {
  const __m256i low_bits = _mm256_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi8(8);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const int64_t groups = k / group_size;
  __m256 zero_points[R];
  __m256 total[R][C];
  MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
    zero_points[r] = _mm256_set1_ps(static_cast<float>(params[r].zero_point));
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) total[r][c] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < k; i += kInt4Step) {
    const int64_t g = i / group_size;
    __m256i x[R];
    MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
      x[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ordered + r * k + i));
    }
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      const __m128i packed =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + c * (k / 2) + i / 2));
      const __m256i both =
          _mm256_inserti128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1);
      const __m256i wv = _mm256_sub_epi8(_mm256_and_si256(both, low_bits), eight);
      const __m256 scale = _mm256_set1_ps(scales[c * groups + g]);
      const __m256 w_sum =
          _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, wv), ones16));
      MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
        const __m256i dots = _mm256_madd_epi16(_mm256_maddubs_epi16(x[r], wv), ones16);
        const __m256 centered = _mm256_fnmadd_ps(zero_points[r], w_sum, _mm256_cvtepi32_ps(dots));
        total[r][c] = _mm256_fmadd_ps(centered, scale, total[r][c]);
      }
    }
  }
  MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) totals[r][c] = sum_lanes(total[r][c]);
  }
}

using Int4Block = void (*)(const uint8_t*, int64_t, const QuantizedRow*, const uint8_t*,
                           const float*, int64_t, float (&)[4][4]);

// [rows - 1][channels - 1]: one row by 4 channels, two by 2 (a float total per row and
// channel, the rows' zero points and the unpacked weights in 16 registers).
constexpr int kInt4Rows = 2;
constexpr int kInt4Channels[kInt4Rows] = {4, 2};
constexpr Int4Block kInt4Blocks[kInt4Rows][4] = {
    {&int4_block<1, 1>, &int4_block<1, 2>, &int4_block<1, 3>, &int4_block<1, 4>},
    {&int4_block<2, 1>, &int4_block<2, 2>, nullptr, nullptr},
};

void linear_int4(const uint8_t*, const uint8_t* rows_layout, const QuantizedRow* params,
                 int64_t rows, int64_t k, const uint8_t* weight, const float* weight_scale,
                 int64_t group_size, const float* bias, float* out, int64_t n_total,
                 int64_t n_begin, int64_t n_end) {
  if (rows == 0) return;
  if (rows >= kMinTileRows) {
    linear_int4_tiles(reinterpret_cast<const int16_t*>(rows_layout), params, rows, k, weight,
                      weight_scale, group_size, bias, out, n_total, n_begin, n_end);
    return;
  }
  const int64_t groups = k / group_size;
  const int64_t row_block = std::min<int64_t>(rows, kInt4Rows);
  const int64_t channel_block = kInt4Channels[row_block - 1];
  float totals[4][4];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += channel_block) {
    const int channels = static_cast<int>(std::min<int64_t>(channel_block, n_end - n0));
    for (int64_t m0 = 0; m0 < rows; m0 += kInt4Rows) {
      const int block_rows = static_cast<int>(std::min<int64_t>(kInt4Rows, rows - m0));
      kInt4Blocks[block_rows - 1][channels - 1](rows_layout + m0 * k, k, params + m0,
                                                weight + n0 * (k / 2), weight_scale + n0 * groups,
                                                group_size, totals);
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

void halves_to_floats(const uint16_t* bits, int64_t count, float* out) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bits + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < count; ++i) out[i] = _cvtsh_ss(bits[i]);
}

constexpr QuantizedLinearKernels kAvx2 = {
    cpu::CpuIsa::kAvx2, &quantize_rows, &int8_rows,        &int4_rows,
    &linear_int8,       &linear_int4,   &halves_to_floats,
};

}  // namespace
}  // namespace avx2

const QuantizedLinearKernels* avx2_quantized_linear_kernels() { return &avx2::kAvx2; }
#else
const QuantizedLinearKernels* avx2_quantized_linear_kernels() { return nullptr; }
#endif  // __x86_64__

}  // namespace my_ops::cpu_vec
