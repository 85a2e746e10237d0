// linear_packed's blocks with AVX2 and FMA (x86-64-v3, the library's baseline): a panel's 32
// channels in four vectors.

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <utility>

#include "ops/common/cpu_unroll.h"
#include "ops/packed_linear/cpu_blocks.h"
#include "ops/packed_linear/cpu_vec.h"
#include "ops/packed_linear/panel.h"

namespace my_ops::cpu_vec {
#if defined(__x86_64__)
namespace {

// Rows per block: 3 rows by 4 vectors is 12 accumulators and 3 broadcasts of AVX2's 16
// registers, the weights read by the FMAs from memory (cache).
constexpr int kAvx2BlockRows = 3;

// A block of R rows by one panel. An FMA takes 4 cycles and two issue a cycle, so 8 sums must be
// in flight: one row keeps two sets of its 4, over the even and the odd k, added at the end.
template <int R>
void panel_block_avx2(const float* x, int64_t k, const float* panel, const float* bias, float* out,
                      int64_t out_stride) {
  constexpr int C = R == 1 ? 2 : 1;
  __m256 acc[C][R][4];
  MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
    MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
      MY_OPS_UNROLL for (int v = 0; v < 4; ++v) acc[c][r][v] = _mm256_setzero_ps();
    }
  }
  int64_t i = 0;
  for (; i + C <= k; i += C) {
    MY_OPS_UNROLL for (int c = 0; c < C; ++c) {
      const float* w = panel + (i + c) * kPanelChannels;
      MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_broadcast_ss(x + r * k + i + c);
        MY_OPS_UNROLL for (int v = 0; v < 4; ++v) {
          acc[c][r][v] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w + 8 * v), acc[c][r][v]);
        }
      }
    }
  }
  for (; i < k; ++i) {
    const float* w = panel + i * kPanelChannels;
    MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x + r * k + i);
      MY_OPS_UNROLL for (int v = 0; v < 4; ++v) {
        acc[0][r][v] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w + 8 * v), acc[0][r][v]);
      }
    }
  }
  MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
    MY_OPS_UNROLL for (int v = 0; v < 4; ++v) {
      __m256 sum = acc[0][r][v];
      MY_OPS_UNROLL for (int c = 1; c < C; ++c) sum = _mm256_add_ps(sum, acc[c][r][v]);
      const __m256 b = bias != nullptr ? _mm256_loadu_ps(bias + 8 * v) : _mm256_setzero_ps();
      _mm256_storeu_ps(out + r * out_stride + 8 * v, _mm256_add_ps(sum, b));
    }
  }
}

template <int R>
struct Avx2 {
  static void run(const float* x, int64_t k, const float* panel, const float* bias, float* out,
                  int64_t out_stride) {
    panel_block_avx2<R>(x, k, panel, bias, out, out_stride);
  }
};

const PackedLinearKernels kAvx2 = {cpu::CpuIsa::kAvx2, kAvx2BlockRows,
                                   blocks_of<Avx2>(std::make_index_sequence<kAvx2BlockRows>())};

}  // namespace

const PackedLinearKernels* avx2_packed_linear_kernels() { return &kAvx2; }
#else
const PackedLinearKernels* avx2_packed_linear_kernels() { return nullptr; }
#endif  // __x86_64__

}  // namespace my_ops::cpu_vec
