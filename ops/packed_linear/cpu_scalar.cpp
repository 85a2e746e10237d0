// linear_packed's portable blocks: every CPU's fallback, and the reference the other tiers are
// tested against.

#include <cstdint>
#include <utility>

#include "ops/packed_linear/cpu_blocks.h"
#include "ops/packed_linear/cpu_vec.h"
#include "ops/packed_linear/panel.h"

namespace my_ops::cpu_vec {
namespace {

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

template <int R>
struct Portable {
  static void run(const float* x, int64_t k, const float* panel, const float* bias, float* out,
                  int64_t out_stride) {
    panel_block_portable<R>(x, k, panel, bias, out, out_stride);
  }
};

const PackedLinearKernels kScalar = {
    cpu::CpuIsa::kScalar, kMaxPanelBlockRows,
    blocks_of<Portable>(std::make_index_sequence<kMaxPanelBlockRows>())};

}  // namespace

const PackedLinearKernels* scalar_packed_linear_kernels() { return &kScalar; }

}  // namespace my_ops::cpu_vec
