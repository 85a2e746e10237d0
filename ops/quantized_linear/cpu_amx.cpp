// The int8 products with AMX, where the CPU has it and the OS grants it (Sapphire Rapids and
// later); everything else of this tier is AVX-512 VNNI's (cpu_avx512_vnni.cpp).

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <array>
#include <cstdint>
#include <vector>

#include "ops/quantized_linear/cpu_avx512_tiles.h"
#include "ops/quantized_linear/cpu_common.h"
#include "ops/quantized_linear/cpu_vec.h"

namespace my_ops::cpu_vec {
#if defined(__x86_64__)
namespace avx512 {
namespace {

using detail::kNaN;

// int8 products with AMX, where the CPU has it and the OS grants it (Sapphire Rapids and later):
// tdpbsud multiplies a tile of 16 channels by 64 in_features of signed weights, read as stored
// (one row a channel, k apart), by a tile of 16 rows' quantized activations in int8_rows'
// layout (16 steps of 4 in_features, each 16 rows by 4 bytes), into 16 channels by 16 rows of
// int32 sums, exact as the AVX-512 tile blocks'. Those are transposed to a row's 16 channels, which
// are stored whole. Blocks of 32 channels by 32 rows keep the 8 tile registers busy: 2 weight
// tiles, 2 activation tiles, 4 sums. No packing: the weights are read as stored, the rows in
// the layout int8_rows made for the AVX-512 blocks.
#define MY_OPS_AMX __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vnni")))

inline constexpr int64_t kAmxK = 64;         // in_features per tile
inline constexpr int64_t kAmxChannels = 16;  // channels per weight tile

// Palette 1, every tile 16 rows of 64 bytes.
struct alignas(64) AmxConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// A tile of rows whose every byte is 1: a tile of weights times it is each channel's weight sum,
// in each of its 16 columns.
alignas(64) constexpr std::array<uint8_t, kTileRows * 64> kOnesTile = [] {
  std::array<uint8_t, kTileRows * 64> ones{};
  ones.fill(1);
  return ones;
}();

// sums[a][t] = tile a of channels (16 rows k apart from `w`) times tile t of rows, over k.
// Tiles 0-3 the sums (a * 2 + t), 4-5 the weights, 6-7 the rows. WeightSums, with one tile of
// rows (T == 1, which leaves tiles 1, 3 and 7 free): the weights are also multiplied by
// kOnesTile, into sums[a][1], so that their sums come from the pass that reads them for the
// products, not from one of their own before it (see linear_int8_amx).
template <int A, int T, bool WeightSums>
MY_OPS_AMX void amx_sums(const int8_t* w, int64_t k, const uint8_t* tiles, int64_t tile_stride,
                         int32_t (&sums)[2][2][kAmxChannels][kTileRows]) {
  static_assert(!WeightSums || T == 1);
  constexpr bool second_column = T == 2 || WeightSums;  // tiles 1 and 3, from tile 7
  _tile_zero(0);
  if constexpr (second_column) _tile_zero(1);
  if constexpr (A == 2) _tile_zero(2);
  if constexpr (A == 2 && second_column) _tile_zero(3);
  if constexpr (WeightSums) _tile_loadd(7, kOnesTile.data(), 64);
  for (int64_t i = 0; i < k; i += kAmxK) {
    // Step i / 4 of a tile of rows starts at byte i / 4 * 64.
    _tile_loadd(4, w + i, k);
    _tile_loadd(6, tiles + i * 16, 64);
    if constexpr (A == 2) _tile_loadd(5, w + kAmxChannels * k + i, k);
    if constexpr (T == 2) _tile_loadd(7, tiles + tile_stride + i * 16, 64);
    _tile_dpbsud(0, 4, 6);
    if constexpr (second_column) _tile_dpbsud(1, 4, 7);
    if constexpr (A == 2) _tile_dpbsud(2, 5, 6);
    if constexpr (A == 2 && second_column) _tile_dpbsud(3, 5, 7);
  }
  _tile_stored(0, sums[0][0], 64);
  if constexpr (second_column) _tile_stored(1, sums[0][1], 64);
  if constexpr (A == 2) _tile_stored(2, sums[1][0], 64);
  if constexpr (A == 2 && second_column) _tile_stored(3, sums[1][1], 64);
}

using AmxSums = void (*)(const int8_t*, int64_t, const uint8_t*, int64_t,
                         int32_t (&)[2][2][kAmxChannels][kTileRows]);
// [channel tiles - 1][row tiles - 1, or 2 for one tile of rows and the weights' sums].
constexpr AmxSums kAmxSums[2][3] = {
    {&amx_sums<1, 1, false>, &amx_sums<1, 2, false>, &amx_sums<1, 1, true>},
    {&amx_sums<2, 1, false>, &amx_sums<2, 2, false>, &amx_sums<2, 1, true>}};

MY_OPS_AMX void amx_begin() {
  AmxConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

MY_OPS_AMX void amx_end() { _tile_release(); }

// rows[i] becomes column i: a 16 by 16 transpose of int32 in registers.
MY_OPS_VNNI inline __attribute__((always_inline)) void transpose16(__m512i (&rows)[16]) {
  __m512i pairs[16];
  for (int i = 0; i < 16; i += 2) {
    pairs[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
    pairs[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
  }
  // quads[4i + e], 128-bit lane L: element 4L + e of rows 4i to 4i + 3.
  __m512i quads[16];
  for (int i = 0; i < 16; i += 4) {
    quads[i] = _mm512_unpacklo_epi64(pairs[i], pairs[i + 2]);
    quads[i + 1] = _mm512_unpackhi_epi64(pairs[i], pairs[i + 2]);
    quads[i + 2] = _mm512_unpacklo_epi64(pairs[i + 1], pairs[i + 3]);
    quads[i + 3] = _mm512_unpackhi_epi64(pairs[i + 1], pairs[i + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    const __m512i even_lanes_low = _mm512_shuffle_i32x4(quads[e], quads[4 + e], 0x88);
    const __m512i odd_lanes_low = _mm512_shuffle_i32x4(quads[e], quads[4 + e], 0xdd);
    const __m512i even_lanes_high = _mm512_shuffle_i32x4(quads[8 + e], quads[12 + e], 0x88);
    const __m512i odd_lanes_high = _mm512_shuffle_i32x4(quads[8 + e], quads[12 + e], 0xdd);
    rows[e] = _mm512_shuffle_i32x4(even_lanes_low, even_lanes_high, 0x88);
    rows[8 + e] = _mm512_shuffle_i32x4(even_lanes_low, even_lanes_high, 0xdd);
    rows[4 + e] = _mm512_shuffle_i32x4(odd_lanes_low, odd_lanes_high, 0x88);
    rows[12 + e] = _mm512_shuffle_i32x4(odd_lanes_low, odd_lanes_high, 0xdd);
  }
}

// out[row, c] for the channels [n_begin, n_end) in whole tiles of 16; returns the first channel
// it left, for the AVX-512 blocks. k is a multiple of kAmxK.
MY_OPS_VNNI int64_t linear_int8_amx(const uint8_t* tiles, const QuantizedRow* params, int64_t rows,
                                    int64_t k, const int8_t* weight, const float* weight_scale,
                                    const float* bias, float* out, int64_t n_total, int64_t n_begin,
                                    int64_t n_end) {
  const int64_t tile_stride = kTileRows * k;
  const int64_t tile_count = (rows + kTileRows - 1) / kTileRows;
  const std::vector<TileParams> tile_parameters = tile_params_of(params, rows);
  alignas(64) int32_t sums[2][2][kAmxChannels][kTileRows];
  int32_t w_sums[2 * kAmxChannels];
  int64_t n0 = n_begin;
  amx_begin();
  while (n_end - n0 >= kAmxChannels) {
    const int a_tiles = n_end - n0 >= 2 * kAmxChannels ? 2 : 1;
    const int channels = a_tiles * static_cast<int>(kAmxChannels);
    // At a few rows a call streams every weight from memory once, and a pass of its own for the
    // sums would be that stream, the products then reading the weights from cache: with one
    // tile of rows the products' pass makes the sums (amx_sums' WeightSums). With more tiles
    // the sums' pass is paid once for all of them.
    const bool sums_from_products = tile_count == 1;
    if (!sums_from_products) {
      for (int c = 0; c < channels; ++c) {
        w_sums[c] = static_cast<int32_t>(int8_weight_sum(weight + (n0 + c) * k, k));
      }
    }
    for (int64_t t0 = 0; t0 < tile_count; t0 += 2) {
      const int t_tiles = tile_count - t0 >= 2 ? 2 : 1;
      kAmxSums[a_tiles - 1][sums_from_products ? 2 : t_tiles - 1](
          weight + n0 * k, k, tiles + t0 * tile_stride, tile_stride, sums);
      if (sums_from_products) {
        for (int a = 0; a < a_tiles; ++a) {
          for (int c = 0; c < kAmxChannels; ++c) w_sums[a * kAmxChannels + c] = sums[a][1][c][0];
        }
      }
      // Transposed, a row of sums is one row's 16 channels: stored whole, where a channel's
      // 16 rows would be scattered n_total apart.
      for (int a = 0; a < a_tiles; ++a) {
        const int64_t n = n0 + a * kAmxChannels;
        const __m512i channel_sums = _mm512_loadu_si512(w_sums + a * kAmxChannels);
        const __m512 channel_scales = _mm512_loadu_ps(weight_scale + n);
        const __m512 channel_bias =
            bias != nullptr ? _mm512_loadu_ps(bias + n) : _mm512_setzero_ps();
        for (int t = 0; t < t_tiles; ++t) {
          const TileParams& tile = tile_parameters[static_cast<size_t>(t0 + t)];
          __m512i by_row[16];
          for (int r = 0; r < 16; ++r) by_row[r] = _mm512_load_si512(sums[a][t][r]);
          transpose16(by_row);
          const int64_t m0 = (t0 + t) * kTileRows;
          for (int l = 0; l < kTileRows && m0 + l < rows; ++l) {
            float* dst = out + (m0 + l) * n_total + n;
            if ((tile.finite >> l & 1) == 0) {
              _mm512_storeu_ps(dst, _mm512_set1_ps(kNaN));
              continue;
            }
            const __m512i centered_sums = _mm512_sub_epi32(
                by_row[l],
                _mm512_mullo_epi32(_mm512_set1_epi32(tile.zero_points[l]), channel_sums));
            const __m512 total = _mm512_mul_ps(_mm512_cvtepi32_ps(centered_sums), channel_scales);
            _mm512_storeu_ps(dst,
                             _mm512_fmadd_ps(_mm512_set1_ps(tile.scales[l]), total, channel_bias));
          }
        }
      }
    }
    n0 += channels;
  }
  amx_end();
  return n0;
}

// Whole tiles of 16 channels with AMX where k is a multiple of its 64, the channels left with
// AVX-512 VNNI's blocks.
void linear_int8(const uint8_t* q, const uint8_t* rows_layout, const QuantizedRow* params,
                 int64_t rows, int64_t k, const int8_t* weight, const float* weight_scale,
                 const float* bias, float* out, int64_t n_total, int64_t n_begin, int64_t n_end) {
  if (rows_layout != nullptr && k % kAmxK == 0) {
    n_begin = linear_int8_amx(rows_layout, params, rows, k, weight, weight_scale, bias, out,
                              n_total, n_begin, n_end);
    if (n_begin == n_end) return;
  }
  avx512_vnni_quantized_linear_kernels()->linear_int8(
      q, rows_layout, params, rows, k, weight, weight_scale, bias, out, n_total, n_begin, n_end);
}

QuantizedLinearKernels amx_kernels() {
  QuantizedLinearKernels kernels = *avx512_vnni_quantized_linear_kernels();
  kernels.isa = cpu::CpuIsa::kAmx;
  kernels.linear_int8 = &linear_int8;
  return kernels;
}

}  // namespace
}  // namespace avx512

const QuantizedLinearKernels* amx_quantized_linear_kernels() {
  static const QuantizedLinearKernels kernels = avx512::amx_kernels();
  return &kernels;
}
#else
const QuantizedLinearKernels* amx_quantized_linear_kernels() { return nullptr; }
#endif  // __x86_64__

}  // namespace my_ops::cpu_vec
