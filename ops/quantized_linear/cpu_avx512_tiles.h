#pragma once

// What the AVX-512 VNNI kernels (cpu_avx512_vnni.cpp) share with the AMX ones (cpu_amx.cpp):
// the layout of q's rows in tiles of 16 rows and each tile's quantization parameters.

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/quantized_linear/cpu_vec.h"

namespace my_ops::cpu_vec::avx512 {

// Compiled for that ISA alone (the rest of the library stays at x86-64-v3) and picked at run time.
#define MY_OPS_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

// The bytes [i, k) of a 64-byte step, as a load mask.
MY_OPS_VNNI inline __mmask64 step_mask(int64_t remaining) {
  return remaining >= 64 ? ~__mmask64{0} : (__mmask64{1} << remaining) - 1;
}

MY_OPS_VNNI inline int64_t int8_weight_sum(const int8_t* w, int64_t k) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i acc = _mm512_setzero_si512();
  for (int64_t i = 0; i < k; i += 64) {
    acc = _mm512_dpbusd_epi32(acc, ones, _mm512_maskz_loadu_epi8(step_mask(k - i), w + i));
  }
  return _mm512_reduce_add_epi32(acc);
}

// The products at several rows (kMinTileRows and more: from 8, a half-empty tile is already
// faster than the per-row dot products): vpdpbusd with sixteen rows in a vector's
// lanes and one weight dword (4 in_features of a channel) broadcast to all of them, so that each
// load of q serves a whole row of channels and each weight dword sixteen rows, and no sum is
// reduced across lanes. q is laid out for it once per call (int8_rows, before the threads split
// the channels); the weights are read as they are: int8 rows directly, int4 rows unpacked to int8
// one block of channels at a time.
inline constexpr int64_t kMinTileRows = 8;
inline constexpr int kTileRows = 16;

// One tile's quantization parameters, lane l being its row l; plain arrays, loaded unaligned,
// so that the tensor code's vectors hold them without AVX-512 types.
struct TileParams {
  int32_t zero_points[kTileRows];
  float scales[kTileRows];
  __mmask16 finite;  // rows whose outputs are numbers
  __mmask16 rows;    // rows that exist
};

inline TileParams tile_params(const QuantizedRow* params, int64_t rows) {
  TileParams tile{};
  const int64_t present = std::min<int64_t>(rows, kTileRows);
  for (int64_t l = 0; l < present; ++l) {
    tile.zero_points[l] = params[l].zero_point;
    tile.scales[l] = params[l].scale;
    if (params[l].finite) tile.finite = static_cast<__mmask16>(tile.finite | (1u << l));
  }
  tile.rows = static_cast<__mmask16>((1u << present) - 1);
  return tile;
}

inline std::vector<TileParams> tile_params_of(const QuantizedRow* params, int64_t rows) {
  std::vector<TileParams> tiles;
  for (int64_t m0 = 0; m0 < rows; m0 += kTileRows)
    tiles.push_back(tile_params(params + m0, rows - m0));
  return tiles;
}

// q's rows as tiles of 16 (cpu_avx512_vnni.cpp), at kMinTileRows rows and more with k a
// multiple of 4; empty otherwise.
std::vector<uint8_t> int8_rows(const uint8_t* q, const QuantizedRow* params, int64_t rows,
                               int64_t k);

}  // namespace my_ops::cpu_vec::avx512
#endif  // __x86_64__
