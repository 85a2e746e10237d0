// linear_packed's blocks with AVX-512 F: a panel's 32 channels in two vectors.

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <utility>

#include "ops/packed_linear/cpu_blocks.h"
#include "ops/packed_linear/cpu_vec.h"
#include "ops/packed_linear/panel.h"

namespace my_ops::cpu_vec {
#if defined(__x86_64__)
namespace {

// Compiled for AVX-512 alone (the rest of the library stays at x86-64-v3) and picked at run time.
#define MY_OPS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// A block of R rows by one panel: per step of k, the panel's 32 weights in two vectors and one
// broadcast FMA per row and vector. An FMA takes 4 cycles and two issue a cycle, so 8 sums must
// be in flight: a block of fewer than 4 rows keeps C sums per row and vector, over every C-th k,
// added up at the end.
template <int R>
MY_OPS_AVX512 void panel_block_avx512(const float* x, int64_t k, const float* panel,
                                      const float* bias, float* out, int64_t out_stride) {
  constexpr int C = R >= 4 ? 1 : (R == 1 ? 4 : 2);
  __m512 low[C][R];
  __m512 high[C][R];
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) low[c][r] = high[c][r] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + C <= k; i += C) {
    for (int c = 0; c < C; ++c) {
      const float* w = panel + (i + c) * kPanelChannels;
      const __m512 w_low = _mm512_loadu_ps(w);
      const __m512 w_high = _mm512_loadu_ps(w + 16);
      for (int r = 0; r < R; ++r) {
        const __m512 xv = _mm512_set1_ps(x[r * k + i + c]);
        low[c][r] = _mm512_fmadd_ps(xv, w_low, low[c][r]);
        high[c][r] = _mm512_fmadd_ps(xv, w_high, high[c][r]);
      }
    }
  }
  for (; i < k; ++i) {
    const float* w = panel + i * kPanelChannels;
    const __m512 w_low = _mm512_loadu_ps(w);
    const __m512 w_high = _mm512_loadu_ps(w + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * k + i]);
      low[0][r] = _mm512_fmadd_ps(xv, w_low, low[0][r]);
      high[0][r] = _mm512_fmadd_ps(xv, w_high, high[0][r]);
    }
  }
  for (int c = 1; c < C; ++c) {
    for (int r = 0; r < R; ++r) {
      low[0][r] = _mm512_add_ps(low[0][r], low[c][r]);
      high[0][r] = _mm512_add_ps(high[0][r], high[c][r]);
    }
  }
  const __m512 b_low = bias != nullptr ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
  const __m512 b_high = bias != nullptr ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(out + r * out_stride, _mm512_add_ps(low[0][r], b_low));
    _mm512_storeu_ps(out + r * out_stride + 16, _mm512_add_ps(high[0][r], b_high));
  }
}

template <int R>
struct Avx512 {
  static void run(const float* x, int64_t k, const float* panel, const float* bias, float* out,
                  int64_t out_stride) {
    panel_block_avx512<R>(x, k, panel, bias, out, out_stride);
  }
};

// 12 rows by a panel's 32 channels is 24 AVX-512 accumulators, with registers left for the two
// weight vectors and a broadcast.
const PackedLinearKernels kAvx512 = {
    cpu::CpuIsa::kAvx512, kMaxPanelBlockRows,
    blocks_of<Avx512>(std::make_index_sequence<kMaxPanelBlockRows>())};

}  // namespace

const PackedLinearKernels* avx512_packed_linear_kernels() { return &kAvx512; }
#else
const PackedLinearKernels* avx512_packed_linear_kernels() { return nullptr; }
#endif  // __x86_64__

}  // namespace my_ops::cpu_vec
