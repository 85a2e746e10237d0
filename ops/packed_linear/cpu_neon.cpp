// linear_packed's blocks with NEON (ASIMD, every aarch64 CPU): a panel's 32 channels in eight
// vectors.

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <cstdint>
#include <utility>

#include "ops/common/cpu_unroll.h"
#include "ops/packed_linear/cpu_blocks.h"
#include "ops/packed_linear/cpu_vec.h"
#include "ops/packed_linear/panel.h"

namespace my_ops::cpu_vec {
#if defined(__aarch64__)
namespace {

// Rows per block: 3 rows by 8 vectors is 24 accumulators of NEON's 32 registers, with room for a
// weight vector and the rows' values. Two FMA pipes of 4 cycles want 8 sums in flight: one row's
// 8 already are.
constexpr int kNeonBlockRows = 3;

template <int R>
void panel_block_neon(const float* x, int64_t k, const float* panel, const float* bias, float* out,
                      int64_t out_stride) {
  float32x4_t acc[R][8];
  MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
    MY_OPS_UNROLL for (int v = 0; v < 8; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  }
  for (int64_t i = 0; i < k; ++i) {
    const float* w = panel + i * kPanelChannels;
    float xv[R];
    MY_OPS_UNROLL for (int r = 0; r < R; ++r) xv[r] = x[r * k + i];
    MY_OPS_UNROLL for (int v = 0; v < 8; ++v) {
      const float32x4_t wv = vld1q_f32(w + 4 * v);
      MY_OPS_UNROLL for (int r = 0; r < R; ++r) acc[r][v] = vfmaq_n_f32(acc[r][v], wv, xv[r]);
    }
  }
  MY_OPS_UNROLL for (int r = 0; r < R; ++r) {
    MY_OPS_UNROLL for (int v = 0; v < 8; ++v) {
      const float32x4_t b = bias != nullptr ? vld1q_f32(bias + 4 * v) : vdupq_n_f32(0.0f);
      vst1q_f32(out + r * out_stride + 4 * v, vaddq_f32(acc[r][v], b));
    }
  }
}

template <int R>
struct Neon {
  static void run(const float* x, int64_t k, const float* panel, const float* bias, float* out,
                  int64_t out_stride) {
    panel_block_neon<R>(x, k, panel, bias, out, out_stride);
  }
};

const PackedLinearKernels kNeon = {cpu::CpuIsa::kNeon, kNeonBlockRows,
                                   blocks_of<Neon>(std::make_index_sequence<kNeonBlockRows>())};

}  // namespace

const PackedLinearKernels* neon_packed_linear_kernels() { return &kNeon; }
#else
const PackedLinearKernels* neon_packed_linear_kernels() { return nullptr; }
#endif  // __aarch64__

}  // namespace my_ops::cpu_vec
