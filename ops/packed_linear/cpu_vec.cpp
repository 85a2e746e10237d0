#include "ops/packed_linear/cpu_vec.h"

#include <algorithm>
#include <array>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "ops/common/x86_features.h"
#include "ops/packed_linear/panel.h"

namespace my_ops::cpu_vec {
namespace {

// Rows of x a block multiplies at once: each weight step, loaded once, serves this many rows. 12
// rows by a panel's 32 channels is 24 AVX-512 accumulators, with registers left for the two
// weight vectors and a broadcast.
constexpr int kMaxBlockRows = 12;

// The rows split into blocks of at most kMaxBlockRows, as even as they come (16 rows: 8 and 8,
// not 12 and 4), so that every block keeps enough sums in flight to hide the FMA latency.
int64_t block_rows(int64_t rows) {
  const int64_t blocks = (rows + kMaxBlockRows - 1) / kMaxBlockRows;
  return (rows + blocks - 1) / blocks;
}

// A block of R rows by one panel, portably: the compiler vectorises the 32 channels.
template <int R>
void panel_block_portable(const float* x, int64_t k, const float* panel, const float* bias,
                          float* out, int64_t out_stride) {
  float acc[R][kPanelChannels] = {};
  for (int64_t i = 0; i < k; ++i) {
    const float* w = panel + i * kPanelChannels;
    for (int r = 0; r < R; ++r) {
      const float xv = x[r * k + i];
      for (int j = 0; j < kPanelChannels; ++j) acc[r][j] += xv * w[j];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < kPanelChannels; ++j) {
      out[r * out_stride + j] = acc[r][j] + (bias != nullptr ? bias[j] : 0.0f);
    }
  }
}

#if defined(__x86_64__)
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
#endif

using PanelBlock = void (*)(const float*, int64_t, const float*, const float*, float*, int64_t);

// kBlocks<Kernel>[R - 1] is Kernel<R>, for R in 1..kMaxBlockRows.
template <template <int> class Kernel, size_t... R>
constexpr std::array<PanelBlock, sizeof...(R)> blocks_of(std::index_sequence<R...>) {
  return {&Kernel<static_cast<int>(R) + 1>::run...};
}

template <int R>
struct Portable {
  static void run(const float* x, int64_t k, const float* panel, const float* bias, float* out,
                  int64_t out_stride) {
    panel_block_portable<R>(x, k, panel, bias, out, out_stride);
  }
};

#if defined(__x86_64__)
template <int R>
struct Avx512 {
  static void run(const float* x, int64_t k, const float* panel, const float* bias, float* out,
                  int64_t out_stride) {
    panel_block_avx512<R>(x, k, panel, bias, out, out_stride);
  }
};
#endif

const std::array<PanelBlock, kMaxBlockRows>& panel_blocks() {
  static const std::array<PanelBlock, kMaxBlockRows> blocks = [] {
#if defined(__x86_64__)
    if (has_avx512()) return blocks_of<Avx512>(std::make_index_sequence<kMaxBlockRows>());
#endif
    return blocks_of<Portable>(std::make_index_sequence<kMaxBlockRows>());
  }();
  return blocks;
}

}  // namespace

void linear_packed(const float* x, int64_t rows, int64_t k, const float* weight, const float* bias,
                   float* out, int64_t panels, int64_t panel_begin, int64_t panel_end) {
  const auto& blocks = panel_blocks();
  const int64_t n = panels * kPanelChannels;
  const int64_t step = block_rows(rows);
  // Panel by panel, every block of rows: a panel (k * 128 bytes) is read from memory once and
  // from cache by the blocks after the first.
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const float* panel = weight + p * k * kPanelChannels;
    const float* panel_bias = bias != nullptr ? bias + p * kPanelChannels : nullptr;
    for (int64_t m = 0; m < rows; m += step) {
      const int64_t r = std::min(step, rows - m);
      blocks[r - 1](x + m * k, k, panel, panel_bias, out + m * n + p * kPanelChannels, n);
    }
  }
}

}  // namespace my_ops::cpu_vec
